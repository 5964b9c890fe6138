"""charts/levergate, rendered by Helm's own template engine (Helm v4's Go SDK through
helm-python-sdk: no helm binary, no cluster) and validated against the Kubernetes schemas
(kubernetes-validate, strict: an unknown field is an error). What the manifests say is then
checked against levergate itself: the probe paths are its routes, the container's port and
config path are what `levergate serve` reads, and the ConfigMap plus the Deployment's variables
load as settings that share every store the values name."""

from __future__ import annotations

import os
import re
from pathlib import PurePosixPath
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import orjson
import pytest
import yaml

from levergate.cli.main import build_parser
from levergate.config import ServerSettings, Settings
from levergate.server.routes import ROUTES
from levergate.stores import select
from tests.packaging.files import CHART

# The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion) and the newest schema.
VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
FULL: dict[str, Any] = {
    "redis": {"existingSecret": "levergate-redis"},
    "batch": {"enabled": True, "persistentVolumeClaim": "levergate-batch-files"},
    "postgres": {"existingSecret": "levergate-postgres"},
    "admin": {"enabled": True, "existingSecret": "levergate-admin"},
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "autoscaling": {"enabled": False},
    "env": {"LEVERGATE_SERVER__ACCESS_LOG": "true"},
}
SECRET_VALUES = {"levergate-redis": "redis://:pw@redis-master:6379/0",
                 "levergate-postgres": "postgresql://gw:pw@pg:5432/levergate",
                 "levergate-admin": "chart-admin-token-0123456789",
                 "levergate-provider-keys": "sk-chart"}  # fmt: skip


def render(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The chart's manifests by kind."""
    with helm.Chart.load(CHART) as chart:
        files = chart.render(values, name="gw", namespace="ai")
    out: dict[str, dict[str, Any]] = {}
    for name, text in files.items():
        if name.endswith(".yaml"):
            for doc in yaml.safe_load_all(text):
                if doc:
                    assert doc["kind"] not in out
                    out[doc["kind"]] = doc
    return out


def container(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec = manifests["Deployment"]["spec"]["template"]["spec"]
    (only,) = spec["containers"]
    assert isinstance(only, dict)
    return only


def test_helm_lints_the_chart_clean() -> None:
    report = helm.lint(CHART)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] > 1] == []  # info only (no icon)


@pytest.mark.parametrize("values", [{}, FULL], ids=["defaults", "everything"])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_kubernetes(values: dict[str, Any], version: str) -> None:
    manifests = render(values)
    for kind, doc in manifests.items():
        if kind == "ServiceMonitor":  # a CRD: not in Kubernetes' schemas, checked below
            continue
        kubernetes_validate.validate(doc, version, strict=True)
    expected = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget"}
    expected |= {"ServiceMonitor"} if values else {"HorizontalPodAutoscaler"}
    assert set(manifests) == expected


def test_the_validator_refuses_a_broken_manifest() -> None:
    deployment = render({})["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_the_probes_and_port_are_levergates() -> None:
    manifests = render({})
    main = container(manifests)
    paths = {r.path for r in ROUTES if r.method == "GET"}
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"/readyz", "/healthz"} <= paths
    (port,) = main["ports"]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert int(env["LEVERGATE_SERVER__PORT"]) == port["containerPort"]
    assert manifests["Service"]["spec"]["ports"][0]["targetPort"] == port["name"]
    # The grace period covers the drain and the in-flight requests after it.
    grace = manifests["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert (
        grace
        > float(env["LEVERGATE_SERVER__DRAIN_SECONDS"]) + ServerSettings().graceful_shutdown_seconds
    )


def test_the_autoscaler_and_budget_point_at_the_deployment() -> None:
    manifests = render({})
    deployment = manifests["Deployment"]
    hpa, pdb = manifests["HorizontalPodAutoscaler"]["spec"], manifests["PodDisruptionBudget"]
    assert hpa["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["metrics"][0]["resource"]["name"] == "cpu"
    assert "replicas" not in deployment["spec"]  # the autoscaler owns the count
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert manifests["Service"]["spec"]["selector"] == selector
    assert render({"autoscaling": {"enabled": False}})["Deployment"]["spec"]["replicas"] == 3


def test_the_service_monitor_scrapes_the_services_port() -> None:
    manifests = render(FULL)
    monitor = manifests["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"] == manifests["Service"]["spec"]["selector"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in manifests["Service"]["spec"]["ports"]}
    assert endpoint["path"] in {r.path for r in ROUTES}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in [k for k in os.environ if k.startswith("LEVERGATE_")]:
        monkeypatch.delenv(key)
    return monkeypatch


def loaded(
    manifests: dict[str, dict[str, Any]], tmp_path: Any, env: pytest.MonkeyPatch
) -> Settings:
    """The settings a pod loads: its variables (Secret references resolved to test values),
    then the ConfigMap's file where the container's `--config` flag finds it."""
    main = container(manifests)
    for var in main["env"]:
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        env.setenv(var["name"], SECRET_VALUES[ref["name"]] if ref else var["value"])
    args = build_parser().parse_args(main["args"])
    mount = next(m for m in main["volumeMounts"] if m["name"] == "config")
    config = PurePosixPath(args.config)
    assert str(config.parent) == mount["mountPath"]
    (name,) = manifests["ConfigMap"]["data"]
    assert config.name == name
    path = tmp_path / name
    path.write_text(manifests["ConfigMap"]["data"][name], encoding="utf-8")
    return Settings.load(path)


def test_the_default_values_load_as_settings(tmp_path: Any, clean_env: pytest.MonkeyPatch) -> None:
    settings = loaded(render({}), tmp_path, clean_env)
    assert settings.unset_variables() == []  # the provider key comes from its Secret
    assert select.cache_store(settings).backend == "memory"
    assert select.limits(settings).backend == "memory"


def test_shared_store_values_reach_every_store(
    tmp_path: Any, clean_env: pytest.MonkeyPatch
) -> None:
    settings = loaded(render(FULL), tmp_path, clean_env)
    redis = SECRET_VALUES["levergate-redis"]
    keys = select.key_store(settings)
    shared = [
        select.cache_store(settings),
        select.limits(settings),
        keys,
        select.spend(settings, keys=keys, keys_in_sqlite=False),
        select.responses(settings),
    ]
    assert {(c.backend, c.address) for c in shared} == {("redis", redis)}  # fmt: skip
    assert settings.traffic.local_share == pytest.approx(0.34)
    assert settings.batch.enabled
    jobs = select.batch_jobs(settings)
    assert (jobs.backend, jobs.address) == ("postgres", SECRET_VALUES["levergate-postgres"])
    assert select.deprecations(settings) == []
    assert settings.admin.token is not None
    assert settings.server.access_log
    mounts = {m["mountPath"] for m in container(render(FULL))["volumeMounts"]}
    assert settings.batch.dir in mounts


def test_missing_secrets_are_refused_at_render_time() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"postgres\.existingSecret"):
        render({"batch": {"enabled": True, "persistentVolumeClaim": "files"}})
    with pytest.raises(helm.HelmRenderError, match=r"admin\.existingSecret"):
        render({"admin": {"enabled": True}})


def test_a_changed_config_rolls_the_pods() -> None:
    def checksum(values: dict[str, Any]) -> str:
        annotations = render(values)["Deployment"]["spec"]["template"]["metadata"]["annotations"]
        return str(annotations["checksum/config"])

    other: dict[str, Any] = {"config": {"upstreams": [], "models": []}}
    assert checksum({}) != checksum(other)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"autoscalling": {"enabled": False}}, "autoscalling"),  # a typo is not ignored
        ({"redis": {"url": "http://redis:6379"}}, "/redis/url"),
        ({"replicaCount": "three"}, "/replicaCount"),
        ({"secretEnv": [{"name": "OPENAI_API_KEY", "secretName": "keys"}]}, "key"),
    ],
)
def test_bad_values_are_refused_with_the_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(field)):
        render(values)


def test_the_values_schema_is_a_schema_and_covers_the_defaults() -> None:
    schema = orjson.loads((CHART / "values.schema.json").read_bytes())
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert set(defaults) <= set(schema["properties"])

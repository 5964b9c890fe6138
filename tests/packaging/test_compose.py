"""deploy/compose: validated without a container daemon. compose.yaml against the Compose
specification's JSON schema (the copy check-jsonschema vendors); HAProxy's file by HAProxy
itself (`haproxy -c`, Debian's package, which .ci/run installs); and what ties the files
together: three replicas, each balanced, health-checked on /readyz and scraped, all mounting one
configuration that loads as levergate settings with every shared store on the compose services.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
import yaml

from levergate.config import Settings
from levergate.stores import select
from tests.packaging.files import COMPOSE, DASHBOARD, ROOT, instructions
from tests.required import program

SPEC = COMPOSE / "compose.yaml"
ENV = {"LEVERGATE_ADMIN_TOKEN": "compose-admin-token-0123456789", "POSTGRES_PASSWORD": "pw"}


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR:?error}`."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match[1], match[2] or "", match[3] or ""
        if env.get(name):
            return env[name]
        assert op != ":?", f"{name} must be set: {arg}"
        return arg if op == ":-" else ""

    return re.sub(r"\$\{(\w+)(:[-?])?([^}]*)\}", one, value)


COMPOSE_FILE = load(SPEC)
SERVICES: dict[str, dict[str, Any]] = COMPOSE_FILE["services"]
GATEWAYS = sorted(n for n, s in SERVICES.items() if s.get("image", "").startswith("levergate")
                  and "command" not in s)  # fmt: skip
PORT = next(
    m[1]
    for s in instructions()
    if s.keyword == "ENV"
    for m in [re.search(r"LEVERGATE_SERVER__PORT=(\d+)", s.args)]
    if m
)


def compose_schema() -> dict[str, Any]:
    vendored = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = orjson.loads(vendored.read_bytes())
    assert isinstance(schema, dict)
    return schema


def test_compose_file_follows_the_compose_specification() -> None:
    schema = compose_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(COMPOSE_FILE)]
    assert not errors, errors
    broken = {"services": {"gw": {"image": "levergate", "ports": "8080", "portz": []}}}
    assert len(list(validator.iter_errors(broken))) >= 2  # the schema does refuse things


def test_three_replicas_built_from_the_repository_with_one_configuration() -> None:
    assert GATEWAYS == ["levergate-1", "levergate-2", "levergate-3"]
    first = SERVICES[GATEWAYS[0]]
    assert all(SERVICES[name] == first for name in GATEWAYS)
    assert (SPEC.parent / first["build"]["context"]).resolve() == ROOT
    assert first["build"]["args"]["ENGINE"] == "none"
    assert first["depends_on"]["redis"]["condition"] == "service_healthy"
    assert first["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_a_stopping_replica_has_time_to_drain_and_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker kills a container `stop_grace_period` after SIGTERM: it must cover the drain
    (/readyz at 503 while HAProxy takes the replica out) and the in-flight requests after it."""
    grace = SERVICES[GATEWAYS[0]]["stop_grace_period"]
    assert grace.endswith("s")
    server = gateway_settings(monkeypatch).server
    assert float(grace[:-1]) > server.drain_seconds + server.graceful_shutdown_seconds
    check = re.search(r"inter (\d+)s fall (\d+)", (COMPOSE / "haproxy.cfg").read_text())
    assert check
    assert server.drain_seconds > int(check[1]) * (int(check[2]) + 1)


def test_every_bind_mount_names_a_file_of_the_repository() -> None:
    named_volumes = set(COMPOSE_FILE.get("volumes", {}))
    mounts = 0
    for service in SERVICES.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source in named_volumes:
                continue
            assert (SPEC.parent / source).exists(), f"compose.yaml mounts missing {source}"
            mounts += 1
    assert mounts >= 5


def gateway_settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The replicas' settings: the image's LEVERGATE_* variables, then compose's, then the
    mounted file (as the container's `levergate serve --config` loads them)."""
    for key in [k for k in os.environ if k.startswith("LEVERGATE_")]:
        monkeypatch.delenv(key)
    for step in instructions():
        if step.keyword == "ENV":
            for key, value in re.findall(r"(LEVERGATE_\w+)=(\S+)", step.args):
                monkeypatch.setenv(key, value)
    service = SERVICES[GATEWAYS[0]]
    for key, value in service["environment"].items():
        monkeypatch.setenv(key, interpolate(str(value), ENV))
    mount = next(v for v in service["volumes"] if v.endswith(":/etc/levergate/levergate.yaml:ro"))
    return Settings.load(SPEC.parent / mount.split(":")[0])


def test_the_replicas_configuration_shares_every_store(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = gateway_settings(monkeypatch)
    assert settings.server.host == "0.0.0.0"
    keys = select.key_store(settings)
    shared = [
        select.cache_store(settings),
        select.limits(settings),
        keys,
        select.spend(settings, keys=keys, keys_in_sqlite=False),
        select.responses(settings),
    ]
    for choice in shared:
        assert choice.backend == "redis"
        assert (choice.address or "").startswith("redis://redis:"), choice
    assert "redis" in SERVICES
    assert settings.batch.enabled
    jobs = select.batch_jobs(settings)
    assert jobs.backend == "postgres"
    assert "@postgres:5432/" in (jobs.address or "")
    assert select.deprecations(settings) == []  # one `stores` entry, no per-section URL
    assert settings.admin.enabled
    assert settings.admin.token is not None
    # The upstream is the simulator service, on the port its command gives.
    sim = SERVICES["simulator"]["command"]
    port = sim[sim.index("--port") + 1]
    assert [getattr(u, "base_url", None) for u in settings.upstreams] == [
        f"http://simulator:{port}/v1"
    ]


def test_haproxy_balances_and_health_checks_every_replica() -> None:
    text = (COMPOSE / "haproxy.cfg").read_text(encoding="utf-8")
    servers = re.findall(r"^\s*server (\S+) (\S+)$", text, flags=re.MULTILINE)
    assert servers == [(name, f"{name}:{PORT}") for name in GATEWAYS]
    assert "option httpchk GET /readyz" in text
    published = SERVICES["haproxy"]["ports"]
    assert any(p.endswith(f":{PORT}") for p in published)
    assert f"bind :{PORT}" in text


def test_haproxy_accepts_its_configuration() -> None:
    haproxy = program("haproxy", install="apt-get install haproxy")
    done = subprocess.run([haproxy, "-c", "-f", str(COMPOSE / "haproxy.cfg")],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "[ALERT]" not in output
    # The replicas' names resolve only inside compose's network: any other warning is a fault.
    warnings = [line for line in output.splitlines() if "[WARNING]" in line]
    assert all("could not resolve address" in line for line in warnings), warnings
    broken = COMPOSE / "haproxy.cfg"
    bad = broken.read_text(encoding="utf-8").replace("balance leastconn", "balance sometimes")
    done = subprocess.run([haproxy, "-c", "-f", "/dev/stdin"], input=bad, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode != 0  # the check does refuse a broken file


def promtool() -> str:
    return program("promtool", install="apt-get install prometheus")


def test_promtool_accepts_the_prometheus_configuration(tmp_path: Path) -> None:
    """Prometheus' own checker (Debian's package, which .ci/run installs) on the file compose
    mounts, and on the rule files it names."""
    config = COMPOSE / "prometheus.yml"
    done = subprocess.run([promtool(), "check", "config", str(config)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    broken = tmp_path / "prometheus.yml"  # the check does refuse a broken file
    broken.write_text(config.read_text(encoding="utf-8").replace("15s", "often", 1))
    done = subprocess.run([promtool(), "check", "config", str(broken)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode != 0
    assert "often" in done.stdout + done.stderr


def test_prometheus_scrapes_every_replica() -> None:
    config = load(COMPOSE / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for c in jobs["levergate"]["static_configs"] for t in c["targets"]]
    assert targets == [f"{name}:{PORT}" for name in GATEWAYS]
    assert jobs["levergate"].get("metrics_path", "/metrics") == "/metrics"
    mount = next(v for v in SERVICES["prometheus"]["volumes"] if "prometheus.yml" in v)
    assert mount.split(":")[1] == "/etc/prometheus/prometheus.yml"


def test_grafana_is_provisioned_with_the_dashboard() -> None:
    grafana = SERVICES["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    provisioning = SPEC.parent / next(s for s, t in mounts.items() if t.endswith("provisioning"))
    sources = load(provisioning / "datasources" / "prometheus.yaml")["datasources"]
    providers = load(provisioning / "dashboards" / "levergate.yaml")["providers"]
    dashboards_in = providers[0]["options"]["path"]
    host_dir = next(s for s, t in mounts.items() if t == dashboards_in)
    assert (SPEC.parent / host_dir).resolve() == DASHBOARD.parent
    dashboard = orjson.loads(DASHBOARD.read_bytes())
    uids = {p["datasource"]["uid"] for p in dashboard["panels"]}
    assert uids == {sources[0]["uid"]}
    assert sources[0]["url"] == "http://prometheus:9090"
    assert any(p.endswith(":9090") for p in SERVICES["prometheus"]["ports"])


def test_the_header_commands_name_real_files() -> None:
    """The commands compose.yaml's header shows a user refer to this file by its path."""
    header = [line[1:].strip() for line in SPEC.read_text(encoding="utf-8").splitlines()
              if line.startswith("#")]  # fmt: skip
    up = next(line for line in header if line.startswith("docker compose"))
    words = shlex.split(up)
    assert (ROOT / words[words.index("-f") + 1]) == SPEC

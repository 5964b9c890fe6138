"""The replay features the log keeps of every request (requestlog/features.py): what the
analyzer relies on holds — equal prefixes give equal leading digests, the fingerprint ignores
what does not shape the answer, the digests survive their encoding, an old table gains the
column, and a logged request carries them with bodies off."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from levergate.config.request_log import RequestLogSettings
from levergate.core.call import Call, Context
from levergate.core.controls import AsyncAsk, Controls
from levergate.layers.measure.recorder import Seen
from levergate.policies.fingerprint import canonical_body_bytes
from levergate.redact import Redactor
from levergate.requestlog.features import (
    BLOCK_BYTES,
    decode_blocks,
    encode_blocks,
    features,
    features_of_body,
    replay_of,
    replay_text,
)
from levergate.requestlog.query import LogFilter
from levergate.requestlog.row import COLUMNS, NAMES
from levergate.requestlog.store import TABLE, SqliteLog
from levergate.requestlog.writer import BodyText, LogMetrics, LogWriter
from tests.unit.requestlog.records import record, rows


def chat(text: str, **extra: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_block_digests_survive_their_encoding(blocks: list[int]) -> None:
    assert decode_blocks(encode_blocks(blocks)) == tuple(blocks)


def test_a_damaged_encoding_is_no_digests() -> None:
    assert decode_blocks("not base64!") == ()
    assert decode_blocks("AAAA") == ()  # 3 bytes: not whole digests


@given(st.text(min_size=1, max_size=3000), st.text(max_size=3000), st.text(max_size=3000))
def test_equal_prefixes_share_their_leading_digests(head: str, one: str, two: str) -> None:
    a = decode_blocks(features_of_body(chat(head + one), kind="chat", model="m")["blocks"])
    b = decode_blocks(features_of_body(chat(head + two), kind="chat", model="m")["blocks"])
    shared = 0
    while shared < min(len(a), len(b)) and a[shared] == b[shared]:
        shared += 1
    # The serialised prompt starts `[{"role":"user","content":"` then the text: the blocks
    # wholly inside the common head are equal.
    common = len(b'[{"role":"user","content":"') + len(head.encode())
    assert shared >= min(common // BLOCK_BYTES, len(a), len(b))
    if one == two:
        assert a == b


def test_the_fingerprint_ignores_transport_and_bookkeeping() -> None:
    base = features_of_body(chat("hi", temperature=0), kind="chat", model="m")
    same = features_of_body(chat("hi", temperature=0, stream=True, user="u"), kind="chat",
                            model="m")  # fmt: skip
    other = features_of_body(chat("hi", temperature=0, max_tokens=5), kind="chat", model="m")
    assert base["fp"] == same["fp"] != other["fp"]
    assert base["det"]
    assert not features_of_body(chat("hi"), kind="chat", model="m")["det"]
    assert same["stream"]
    assert not base["stream"]


def test_deadlines_are_kept_relative_to_arrival() -> None:
    controls = Controls(deadline=1010.0, run_async=AsyncAsk(not_after=100_000, defer=True))
    call = Call(kind="chat", body=chat("hi"), ctx=Context(request_id="r", controls=controls))
    found = features(call, now=1002.0, wall=10_000.0, total=2.0)
    assert found is not None
    assert '"timeout_s":10.0' in found
    assert '"not_after_s":90002.0' in found
    assert '"defer":true' in found


def test_the_fingerprint_reuses_the_exact_caches_bytes_of_the_same_body_only() -> None:
    """The canonical bytes the exact cache computed (`Trace.canonical`) are the log's when
    they are of the very body logged; of another body (a call derived below with a changed
    one), or absent, they are computed again."""
    body = chat("hi", temperature=0)
    call = Call(kind="chat", body=body, ctx=Context(request_id="r"))
    fresh = replay_text(body, kind="chat", model="m", controls={})
    assert replay_of(call, {}) == fresh
    call.ctx.trace.canonical = (body, b"planted")
    planted = replay_of(call, {})
    assert planted is not None
    assert planted != fresh
    assert planted == replay_text(body, kind="chat", model="m", controls={}, canonical=b"planted")
    call.ctx.trace.canonical = (dict(body), b"planted")  # equal, not the same body
    assert replay_of(call, {}) == fresh
    call.with_body(temperature=1).canonical_bytes()  # the exact cache below, on another body
    assert replay_of(call, {}) == fresh


def test_an_old_table_gains_the_replay_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    old = ", ".join(f"{name} {kind}" for name, kind in COLUMNS if name != "replay")
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT, {old})")
    store = SqliteLog(str(path), timeout_seconds=1)
    try:
        store.write(rows(3))
        assert store.summary(LogFilter())["requests"] == 3
        assert "replay" in NAMES
    finally:
        store.close()


async def test_a_logged_request_keeps_its_features_with_bodies_off(tmp_path: Path) -> None:
    settings = RequestLogSettings.model_validate({"enabled": True})
    store = SqliteLog(str(tmp_path / "log.db"), timeout_seconds=1)
    writer = LogWriter(store, settings=settings, metrics=LogMetrics(CollectorRegistry()),
                       bodies=BodyText(settings.bodies, Redactor([])))  # fmt: skip
    body = chat("x" * 5000, temperature=0)
    writer.observe(record(1), Call(kind="chat", body=body, ctx=Context(request_id="r")), Seen())
    assert await writer.flush()
    reader = SqliteLog(str(tmp_path / "log.db"), timeout_seconds=1)
    try:
        (got,) = reader.page(LogFilter(), cursor=None, limit=5).records
    finally:
        reader.close()
        await writer.aclose()
    assert got["request_body"] is None
    replay = got["replay"]
    assert replay["fp"] == features_of_body(body, kind="chat", model="m")["fp"]
    assert len(decode_blocks(replay["blocks"])) == replay["pb"] // BLOCK_BYTES


MESSAGES = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                           "content": st.text(max_size=3000)}),
    min_size=1, max_size=3,
)  # fmt: skip
EXTRAS = {
    "tools": st.sampled_from([[], [{"type": "function", "function": {"name": "f"}}]]),
    "response_format": st.just({"type": "json_object"}),
    "n": st.sampled_from([1, 2, True, "3"]),
    "seed": st.sampled_from([7, True]),
    "temperature": st.sampled_from([0, 1]),
    "stream": st.booleans(),
    "prompt_cache_key": st.sampled_from(["k", 5]),
}
CONTROLS = st.sampled_from([{}, {"timeout_s": 1.5}, {"not_after_s": 60.0, "defer": True}])


@given(MESSAGES, st.fixed_dictionaries({}, optional=EXTRAS), CONTROLS)
def test_the_replay_text_is_the_features_json(
    messages: list[dict[str, str]], extra: dict[str, object], controls: dict[str, object]
) -> None:
    """`replay_text` writes the common record's text without a dict: the same text as orjson
    writes of `features_of_body` and the controls, for every shape of body (tools, choices,
    seeds, a prompt cache key, long and multi-turn prompts with breakpoint features)."""
    body = {"model": "m", "messages": messages, **extra}
    found = {**features_of_body(body, kind="chat", model="m"), **controls}
    text = replay_text(body, kind="chat", model="m", controls=controls)
    assert text == orjson.dumps(found).decode()


CHAT_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "temperature": st.sampled_from([0, 0.0, 1, None, False]),
    "max_tokens": st.integers(1, 100),
    "stream": st.booleans(),
    "user": st.just("u"),
    "stop": st.sampled_from(["x", [], None]),
}
# None, one or several of the fields that take a body off the short way.
ONE_UNCOMMON = {k: v for k, v in EXTRAS.items() if k != "stream"}
UNCOMMON: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.just({}),
    st.sampled_from(sorted(ONE_UNCOMMON)).flatmap(
        lambda k: st.fixed_dictionaries({k: ONE_UNCOMMON[k]})
    ),
    st.fixed_dictionaries({}, optional=EXTRAS),
    st.fixed_dictionaries({"messages": st.sampled_from([None, "odd", []])}),
)


@settings(max_examples=300)
@given(st.lists(MESSAGES, min_size=1, max_size=3).map(lambda m: [x for t in m for x in t]),
       st.fixed_dictionaries({}, optional=CHAT_FIELDS), UNCOMMON, CONTROLS,
       st.booleans())  # fmt: skip
def test_the_common_bodys_short_way_gives_the_general_values(
    messages: list[dict[str, str]], extra: dict[str, object], uncommon: dict[str, object],
    controls: dict[str, object], known: bool,
) -> None:  # fmt: skip
    """`replay_text`'s short way for a chat body without tools, choices, a seed or a prompt
    cache key (its values computed in place, the common record's text from constant pieces)
    writes what the general reading of every field does (`features_of_body`, by
    `_any_body_features`, serialised by orjson with the controls), for bodies on both ways
    (multi-turn and long prompts with breakpoint features among them), with deadlines or
    none, and with the canonical bytes given or not."""
    body = {"model": "m", "messages": messages, **extra, **uncommon}
    canonical = canonical_body_bytes(body) if known else None
    general = {**features_of_body(body, kind="chat", model="m", canonical=canonical), **controls}
    text = replay_text(body, kind="chat", model="m", controls=controls, canonical=canonical)
    assert text == orjson.dumps(general).decode()

"""What `levergate analyze` replays, read from any of its inputs into one small value per request
(`Req`): the gateway's request log (records as `levergate log` reads them, from the store or a
`levergate log export` JSONL file), an OpenAI request file (a Batch input file's lines, or bare
chat bodies), or a `levergate bench` trace (Azure, Mooncake).

A malformed line is reported by its number and skipped (`Skipped`); an input with nothing to
replay is a clear message from the CLI. A request the exact cache answered in the log carries no
tokens of its own: it is given those of the latest earlier request with its fingerprint (the one
that filled the entry), so that a candidate without the cache is priced as a miss.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from levergate.bench.traces import MOONCAKE_BLOCK_TOKENS, TraceRecord
from levergate.core.json_bound import parse_json
from levergate.requestlog.features import (
    BLOCK_BYTES,
    MAX_BOUNDARIES,
    REPLAY_VERSION,
    decode_blocks,
    features_of_body,
)
from levergate.simulator.tokens import chat_prompt, count_tokens

__all__ = ["Input", "Req", "Skipped", "from_bodies", "from_records", "from_trace", "read_lines"]

MAX_REPORTED = 20  # malformed lines named one by one; beyond, counted
DEFAULT_OUTPUT_TOKENS = 256  # an OpenAI request file's answer length when max_tokens is unset
MAX_LINE_BYTES = 16 * 1024 * 1024


class Req(NamedTuple):
    """One request to replay. Seconds and tokens; `blocks` are chained prefix digests, each
    `block_tokens` tokens long (0: unknown); `ttft`/`total` None when the input has no timings
    (the latency model's own then)."""

    arrival: float
    tenant: str
    feature: str
    model: str  # the alias asked for
    alias: str  # the alias that answered (priced at)
    upstream: str  # the endpoint that served it ("" unknown)
    fp: str | None  # the exact-cache fingerprint (None: not known)
    det: bool
    n: int
    blocks: tuple[int, ...]
    block_tokens: float
    prompt: int
    cached: int
    written: int
    output: int
    ttft: float | None
    total: float | None
    not_after: float | None  # x-levergate-deadline, seconds after arrival
    defer: bool
    hit: bool  # answered by a cache in the log
    body: bool  # the prompt text is available (bodies logged, or a request file)
    origin: str = "request"  # "request", "batch" (a Batch API line), "async", "deferred"
    # For the levers that need bodies (analyze/bodies.py): the request as sent, when the log kept
    # it whole (not cut at `bodies.max_bytes`) or a request file gave it; the logged answer's
    # text; the prompt tokens the logged run's trim layer left out; the cascade's escalations.
    payload: Mapping[str, Any] | None = None
    answer: str | None = None
    trimmed: int = 0
    escalations: int = 0
    pck: str | None = None  # a digest of the client's own prompt_cache_key
    bp: tuple[tuple[str, int, int], ...] = ()  # breakpoint boundaries (kind, tokens, digest)
    cont: int | None = None  # the prompt this one continues (a conversation's turn before)
    whole: int | None = None  # this prompt, as a later turn's `cont` names it
    cbp: int = 0  # the client's own breakpoints


BOUNDARY_KINDS = frozenset({"tools", "system", "document", "history"})


def _digest64(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 64
    return value if ok else None


def cache_features(replay: Mapping[str, Any]) -> dict[str, Any]:
    """The prompt-cache part of a row's replay features (requestlog/features.py): `Req`'s
    pck, bp, cont, whole, cbp; anything malformed left out."""
    raw = replay.get("bp")
    bp = [
        (str(item[0]), int(item[1]), int(item[2]))
        for item in (raw[:MAX_BOUNDARIES] if isinstance(raw, list) else ())
        if isinstance(item, list) and len(item) == 3 and item[0] in BOUNDARY_KINDS
        and _digest64(item[1]) is not None and _digest64(item[2]) is not None
    ]  # fmt: skip
    pck, cbp = replay.get("pck"), replay.get("cbp")
    return {
        "pck": pck if isinstance(pck, str) else None, "bp": tuple(bp),
        "cont": _digest64(replay.get("cont")), "whole": _digest64(replay.get("whole")),
        "cbp": cbp if isinstance(cbp, int) and not isinstance(cbp, bool) and cbp > 0 else 0,
    }  # fmt: skip


@dataclass
class Skipped:
    """What was left out, and why (line numbers for the first `MAX_REPORTED`)."""

    lines: list[str] = field(default_factory=list)
    malformed: int = 0
    errors: int = 0  # requests that failed in the log (not replayed)
    without_features: int = 0  # logged before the log kept replay features (schema < 4)
    unfilled_hits: int = 0  # cache hits whose filling request is outside the input

    def bad(self, where: str, why: str) -> None:
        self.malformed += 1
        if len(self.lines) < MAX_REPORTED:
            self.lines.append(f"{where}: skipped: {why}")


@dataclass
class Input:
    requests: list[Req]
    source: str
    timings: bool  # the input has measured timings (a log) or not (files, traces)
    skipped: Skipped
    logged_cost: float | None = None  # what the log says the replayed requests cost
    hit_seconds: float | None = None  # the median logged exact-cache hit
    overhead_seconds: float | None = None  # the median gateway's own time
    # The log's shadow labels per route and day (`label_counts`): the routes' live retention.
    labels: list[dict[str, Any]] = field(default_factory=list)


# ---- lines ------------------------------------------------------------------------------------


def read_lines(path: Path, skipped: Skipped) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) of a JSONL file; anything else reported and skipped."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            if len(line) > MAX_LINE_BYTES:
                skipped.bad(f"{path}:{number}", f"longer than {MAX_LINE_BYTES} bytes")
                continue
            try:
                value = parse_json(line)
            except (orjson.JSONDecodeError, ValueError) as exc:
                skipped.bad(f"{path}:{number}", f"not JSON ({str(exc).splitlines()[0][:80]})")
                continue
            if not isinstance(value, dict):
                skipped.bad(f"{path}:{number}", "not a JSON object")
                continue
            yield number, value


# ---- the request log --------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _count(record: Mapping[str, Any], key: str) -> int:
    value = record.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _fingerprint(replay: Mapping[str, Any]) -> str | None:
    """The record's exact-cache fingerprint, scoped by the version of the features that hold it:
    version 1 wrote SHA-256, version 2 XXH3-128 (requestlog/features.py), so one body has two
    fingerprints, and a log that spans the change only matches requests within each side."""
    fp = replay.get("fp")
    if not isinstance(fp, str):
        return None
    version = replay.get("v")
    return fp if version == REPLAY_VERSION else f"v{version}:{fp}"


def record_req(record: Mapping[str, Any]) -> Req | str:
    """The `Req` of one log record (requestlog/row.py's `as_dict` shape), or why it is not one."""
    ts, total_ms = _number(record.get("ts")), _number(record.get("total_ms"))
    if ts is None or total_ms is None or not isinstance(record.get("model"), str):
        return "not a request record (ts, total_ms and model needed)"
    replay = record.get("replay")
    replay = replay if isinstance(replay, dict) else {}
    prompt = (_count(record, "input_tokens") + _count(record, "cached_tokens")
              + _count(record, "cache_write_tokens"))  # fmt: skip
    pb = replay.get("pb")
    blocks = decode_blocks(replay["blocks"]) if isinstance(replay.get("blocks"), str) else ()
    ttft_ms = _number(record.get("ttft_ms"))
    cache = record.get("cache")
    model = str(record["model"])
    return Req(
        arrival=ts - total_ms / 1000.0, tenant=str(record.get("tenant") or ""),
        feature=str(record.get("feature") or ""), model=model,
        alias=str(record.get("alias") or model), upstream=str(record.get("upstream") or ""),
        fp=_fingerprint(replay),
        det=replay.get("det") is True, n=max(1, int(_number(replay.get("n")) or 1)),
        blocks=blocks,
        block_tokens=BLOCK_BYTES * prompt / pb if isinstance(pb, int) and pb > 0 else 0.0,
        prompt=prompt, cached=_count(record, "cached_tokens"),
        written=_count(record, "cache_write_tokens"), output=_count(record, "output_tokens"),
        ttft=None if ttft_ms is None else ttft_ms / 1000.0, total=total_ms / 1000.0,
        not_after=_number(replay.get("not_after_s")), defer=replay.get("defer") is True,
        hit=isinstance(cache, str) and cache.endswith(":hit"),
        body=isinstance(record.get("request_body"), str),
        origin=str(record.get("origin") or "request"), payload=_payload(record),
        answer=record["answer_body"] if isinstance(record.get("answer_body"), str) else None,
        trimmed=_count(record, "trimmed_tokens"), escalations=_count(record, "escalations"),
        **cache_features(replay),
    )  # fmt: skip


def _payload(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The logged request body, parsed; None when it was not logged, or was cut (its JSON then
    ends in the writer's `[truncated: N bytes]` marker and does not parse)."""
    text = record.get("request_body")
    if not isinstance(text, str):
        return None
    try:
        found = parse_json(text)
    except (orjson.JSONDecodeError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def from_records(
    records: Iterable[tuple[str, Mapping[str, Any]]], *, source: str, skipped: Skipped
) -> Input:
    """An input from log records ((where, record): where names it in a message)."""
    found: list[Req] = []
    spent, hits, overheads = 0.0, [], []
    for where, record in records:
        if record.get("outcome") not in (None, "ok"):
            skipped.errors += 1
            continue
        req = record_req(record)
        if isinstance(req, str):
            skipped.bad(where, req)
            continue
        if req.fp is None:
            skipped.without_features += 1
        found.append(req)
        spent += _number(record.get("cost_usd")) or 0.0
        if req.hit and req.total is not None:
            hits.append(req.total)
        overheads.append((_number(record.get("overhead_ms")) or 0.0) / 1000.0)
    found.sort(key=lambda r: r.arrival)
    return Input(
        _filled(found, skipped), source, timings=True, skipped=skipped, logged_cost=spent,
        hit_seconds=statistics.median(hits) if hits else None,
        overhead_seconds=statistics.median(overheads) if overheads else None,
    )  # fmt: skip


def _filled(requests: list[Req], skipped: Skipped) -> list[Req]:
    """Hits given the tokens, alias and timings of the latest earlier miss with their
    fingerprint (module docstring)."""
    last: dict[str, Req] = {}
    out: list[Req] = []
    for given in requests:
        req = given
        if req.fp is not None and not req.hit:
            last[req.fp] = req
        if req.hit:
            filler = last.get(req.fp) if req.fp is not None else None
            if filler is None:
                skipped.unfilled_hits += 1
            else:
                req = req._replace(
                    alias=filler.alias, upstream=filler.upstream, prompt=filler.prompt,
                    cached=filler.cached, written=filler.written, output=filler.output,
                    ttft=filler.ttft, total=filler.total, block_tokens=filler.block_tokens,
                )  # fmt: skip
        out.append(req)
    return out


# ---- OpenAI request files ---------------------------------------------------------------------


def body_req(number: int, value: Mapping[str, Any], *, interval: float) -> Req | str:
    """A request of an OpenAI file: a Batch input line (`body`) or a bare chat body; arrival
    its `timestamp` (seconds) when it has one, else `number x interval`."""
    body = value.get("body", value)
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "not an OpenAI request (no body with a model)"
    if not isinstance(body.get("messages"), list) and body.get("prompt") is None:
        return "not an OpenAI request (no messages or prompt)"
    try:
        found = features_of_body(body, kind="chat", model=body["model"])
        prompt = count_tokens(chat_prompt(body))
    except (TypeError, AttributeError, KeyError):
        return "not an OpenAI request (messages of an unknown shape)"
    stamp = _number(value.get("timestamp"))
    cap = _number(body.get("max_completion_tokens") or body.get("max_tokens"))
    pb = found["pb"]
    return Req(
        arrival=stamp if stamp is not None else number * interval, tenant="", feature="",
        model=body["model"], alias=body["model"], upstream="", fp=found["fp"], det=found["det"],
        n=found["n"], blocks=decode_blocks(found["blocks"]),
        block_tokens=BLOCK_BYTES * prompt / pb if pb else 0.0, prompt=prompt, cached=0,
        written=0, output=int(cap) if cap else DEFAULT_OUTPUT_TOKENS, ttft=None, total=None,
        not_after=None, defer=False, hit=False, body=True, payload=body,
        **cache_features(found),
    )  # fmt: skip


def from_bodies(path: Path, *, interval: float, skipped: Skipped) -> Input:
    found: list[Req] = []
    for number, value in read_lines(path, skipped):
        req = body_req(number, value, interval=interval)
        if isinstance(req, str):
            skipped.bad(f"{path}:{number}", req)
        else:
            found.append(req)
    found.sort(key=lambda r: r.arrival)
    return Input(found, f"OpenAI requests from {path.name}", timings=False, skipped=skipped)


# ---- bench traces -----------------------------------------------------------------------------


def from_trace(records: Iterable[TraceRecord], *, model: str, source: str) -> Input:
    """A trace's requests under one alias: Mooncake's `hash_ids` are its 512-token prefix
    blocks (equal ids, equal prefixes); Azure's rows have sizes and times only."""
    found = [
        Req(
            arrival=r.offset_s,
            tenant="",
            feature="",
            model=model,
            alias=model,
            upstream="",
            fp=None,
            det=False,
            n=1,
            blocks=r.hash_ids,
            block_tokens=float(MOONCAKE_BLOCK_TOKENS) if r.hash_ids else 0.0,
            prompt=r.input_tokens,
            cached=0,
            written=0,
            output=r.output_tokens,
            ttft=None,
            total=None,
            not_after=None,
            defer=False,
            hit=False,
            body=False,
        )
        for r in records
    ]
    found.sort(key=lambda r: r.arrival)
    return Input(found, source, timings=False, skipped=Skipped())

"""`Simulator`: the fake provider's behaviour, independent of any HTTP server.

`handle(method, path, headers, body)` is synchronous and returns a `Reply` plan (what to write,
when, and whether to cut or hang); a server executes the plan. Keeping the decision synchronous
is what makes the zero-latency path fast: the server can answer from inside its parser
callback without creating a task. Order of checks for a generation request, as at a provider:

    route -> parse + validate (service_tier too) -> flex capacity (tiers.py) -> forced fault
          (x-sim-fault) | concurrency -> RPM/TPM -> drawn fault -> prompt cache -> latency plan
          (the tier's) -> words -> reply

All state (limits, prompt cache, counters, the fault/jitter RNG) lives on the instance, and
settings are swapped whole by `configure`/`replace`, so each request sees one configuration.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from levergate.core.clock import Clock, SystemClock
from levergate.simulator import (
    anthropic,
    batch_api,
    embeddings,
    generate,
    isolation,
    responses_api,
    tiers,
)
from levergate.simulator.admission import Request, admit
from levergate.simulator.cache_routing import CacheRouter
from levergate.simulator.control import control_reply
from levergate.simulator.faults import FAULT_HEADER, Fault, malformed_body
from levergate.simulator.isolation import Parsed
from levergate.simulator.latency import ZERO, plan_timing
from levergate.simulator.limits import RateLimiter
from levergate.simulator.prompt_cache import PromptCache
from levergate.simulator.responses import Reply, SimError
from levergate.simulator.settings import SimSettings
from levergate.simulator.stats import Stats, key_label

_log = logging.getLogger(__name__)

# Only these request headers matter; servers may pass just these (lower-case names).
RELEVANT_HEADERS = frozenset(
    {
        "authorization",
        FAULT_HEADER,
        generate.OUTPUT_TOKENS_HEADER,
        anthropic.API_KEY_HEADER,
        anthropic.VERSION_HEADER,
    }
)
_GENERATION = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completion",
    "/v1/embeddings": "embedding",
}
_ROUTES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(_GENERATION, ("POST",)),
    **dict.fromkeys(anthropic.PATHS, ("POST",)),
    "/v1/models": ("GET",),
    "/v1/responses": ("POST",),
    "/sim/stats": ("GET",),
    "/sim/config": ("GET", "POST", "PUT"),
    "/sim/reset": ("POST",),
    "/health": ("GET",),
}


class Simulator:
    def __init__(
        self,
        *,
        settings: SimSettings | None = None,
        clock: Clock | None = None,
        wall: Callable[[], float] = time.time,
        worker: int = 0,
    ) -> None:
        self._settings = settings or SimSettings()
        self.clock: Clock = clock or SystemClock()
        self._wall = wall
        self._worker = worker
        self._started = self.clock.now()
        self._ids = itertools.count(1)
        self.stats = Stats()
        self.tiers = tiers.TierStats()
        self._rebuild(previous=None)

    def _rebuild(self, *, previous: SimSettings | None) -> None:
        """Recreate the state a settings change invalidates, and only that."""
        s = self._settings
        if previous is None:
            self._memory = responses_api.Memory()  # stored responses, for previous_response_id
            self.batch_api = batch_api.BatchApi()  # files and provider batches (batch_api.py)
        if previous is None or previous.seed != s.seed:
            self._rng = random.Random(s.seed * 1_000_003 + self._worker)
            self._id_prefix = f"sim{self._rng.getrandbits(32):08x}"
        if previous is None or previous.limits != s.limits:
            self._limiter = RateLimiter(settings=s.limits) if s.limits.any_rate else None
        if previous is None or previous.prompt_cache != s.prompt_cache:
            self._cache = PromptCache(settings=s.prompt_cache)
            # Anthropic's explicit breakpoints (anthropic_cache.py) keep entries of their own.
            self._anthropic_cache = PromptCache(settings=s.prompt_cache)
            self._router = CacheRouter(settings=s.prompt_cache)  # OpenAI's machines
        # Nothing to check at admission unless a limit or a fault rate is set: the fast path.
        self._open_door = (
            self._limiter is None and s.limits.max_concurrency is None and s.faults.total_rate == 0
        )
        self._cache_from = s.prompt_cache.min_tokens if s.prompt_cache.enabled else None
        self._zero_latency = s.latency.is_zero

    @property
    def settings(self) -> SimSettings:
        return self._settings

    def configure(self, patch: Mapping[str, Any]) -> SimSettings:
        """Deep-merge `patch` into the live settings (raises pydantic's ValidationError)."""
        self.replace(self._settings.patched(patch))
        return self._settings

    def replace(self, settings: SimSettings) -> None:
        """Swap in new settings. State they invalidate (limit windows, the prompt cache, the
        RNG) is rebuilt; counters are kept. The listening address cannot change live."""
        previous = self._settings
        self._settings = settings
        self._rebuild(previous=previous)

    def reset(self) -> None:
        """Forget counters, limit windows and cached prefixes; reseed the RNG. Requests still in
        flight stay counted, so the in-flight gauge never goes negative."""
        in_flight = self.stats.in_flight
        self.stats = Stats(in_flight=in_flight, max_in_flight=in_flight)
        flex_in_flight = self.tiers.flex_in_flight
        self.tiers = tiers.TierStats()
        self.tiers.flex_in_flight = flex_in_flight
        self._rebuild(previous=None)

    def snapshot(self) -> dict[str, Any]:
        """The `GET /sim/stats` document."""
        cache = self._cache.stats
        return self.stats.snapshot(
            extra={
                "prompt_cache": {
                    "lookups": cache.lookups,
                    "hits": cache.hits,
                    "cached_tokens": cache.cached_tokens,
                    "entries": len(self._cache),
                    "overflowed": self._router.overflowed,  # cache_routing.py
                },
                "batch_api": self.batch_api.stats(),
                "tiers": self.tiers.snapshot(),
                "worker": self._worker,
                "uptime_seconds": round(self.clock.now() - self._started, 3),
            }
        )

    def handle(self, *, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """Decide the answer to one request. Never raises: every problem becomes an OpenAI
        error reply, so a malformed request cannot take the simulator down."""
        try:
            reply = self._dispatch(method, path, headers, body)
        except SimError as exc:
            reply = exc.reply()
        except Exception:  # the process edge: log the bug, answer 500, keep serving
            _log.exception("simulator failed on %s %s", method, path)
            reply = SimError(500, "Internal simulator error.", error_type="server_error").reply()
        self.stats.statuses[reply.status] += 1
        return reply

    def finish(self, reply: Reply) -> None:
        """The server is done with `reply` (fully written, cut, or the client left)."""
        if reply.holds_slot:
            reply.holds_slot = False
            self.stats.in_flight -= 1
        if reply.flex:
            reply.flex = False
            self.tiers.flex_in_flight -= 1

    def _dispatch(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        kind = _GENERATION.get(path)
        if kind is not None and method == "POST":  # the hot path: an exact generation route
            self.stats.requests[path] += 1
            return self._generate(kind, headers, body)
        path, _, query = path.partition("?")
        if len(path) > 1 and path.endswith("/"):
            path = path[:-1]
        if path.startswith(batch_api.PREFIXES):  # the provider batch APIs (batch_api.py)
            return batch_api.handle(self, method=method, path=path, headers=headers, body=body)
        methods = _ROUTES.get(path)
        if methods is None and path.startswith("/v1/models/"):
            methods = ("GET",)
        if methods is None and path.startswith("/v1/responses/"):
            methods = ("GET", "DELETE")
        self.stats.requests[path if methods is not None else "(unknown)"] += 1
        if methods is None:
            raise SimError(
                404, f"Invalid URL ({method} {path}) (simulated provider).", code="unknown_url"
            )
        if method not in methods:
            allowed = ", ".join(methods)
            raise SimError(
                405,
                f"Method {method} is not allowed on {path}; allowed: {allowed}.",
                code="method_not_allowed",
                headers=(("allow", allowed),),
            )
        kind = _GENERATION.get(path)
        if kind is not None:
            return self._generate(kind, headers, body)
        if path in anthropic.PATHS:
            return anthropic.handle(self, path=path, headers=headers, raw=body)
        if path == "/v1/responses":
            return self._respond(headers, body)
        if path.startswith("/v1/responses/"):
            return self._stored_response(method, path.removeprefix("/v1/responses/"), headers)
        return control_reply(self, method=method, path=path, query=query, body=body)

    def _generate(self, kind: str, headers: Mapping[str, str], raw: bytes) -> Reply:
        return self.answer_parsed(isolation.parse(kind, headers, raw, self._settings))

    def handle_parsed(self, path: str, parsed: Parsed | BaseException) -> Reply:
        """`handle` for a generation request parsed elsewhere (isolation.py): `parsed`, or what
        preparing it raised. Never raises."""
        self.stats.requests[path] += 1
        try:
            reply = self.answer_parsed(_unless_raised(parsed))
        except SimError as exc:
            reply = exc.reply()
        except Exception:  # the process edge, as `handle`'s
            _log.exception("simulator failed on POST %s", path)
            reply = SimError(500, "Internal simulator error.", error_type="server_error").reply()
        self.stats.statuses[reply.status] += 1
        return reply

    def answer_parsed(self, parsed: Parsed) -> Reply:
        """A parsed generation request through the simulator's state: flex capacity ->
        forced fault | concurrency -> RPM/TPM -> drawn fault -> prompt cache -> latency plan
        -> words -> reply."""
        if parsed.key is not None:
            self.stats.keys[key_label(parsed.key)] += 1
        if parsed.cache_key is not None:
            self.stats.cache_key(parsed.cache_key)
        if parsed.error is not None:
            return parsed.error
        key, forced, spec, tier = parsed.key or "", parsed.forced, parsed.spec, parsed.tier
        if spec is None:
            return self._embed(parsed.body or {}, key=key, forced=forced,
                               embedded=parsed.embedded)  # fmt: skip
        s = self._settings
        if tier is tiers.SimTier.FLEX:
            self._flex_capacity()
        now = self.clock.now()
        fault, limit_headers = self._admit(key, spec.model, spec.reserved_tokens, forced, now)
        flex = tier is tiers.SimTier.FLEX
        if flex:
            self.tiers.flex_in_flight += 1
        if fault is Fault.HANG:
            return Reply(status=200, hang=True, holds_slot=True, flex=flex)
        extra = s.faults.slow_ms / 1000.0 if fault is Fault.SLOW else 0.0
        reply = self._answer(spec=spec, key=key, fault=fault, extra_ttft=extra, now=now,
                             tier=tier, parsed=parsed)  # fmt: skip
        reply.headers = limit_headers
        reply.holds_slot = True
        reply.flex = flex
        return reply

    def _flex_capacity(self) -> None:
        """Refuse a flex request when its capacity is spent (tiers.py)."""
        refused = tiers.refusal(self._settings.tiers.flex,
                                in_flight=self.tiers.flex_in_flight, rng=self._rng)  # fmt: skip
        if refused is not None:
            self.tiers.by_tier[tiers.SimTier.FLEX].refused += 1
            raise refused

    def _admit(
        self, key: str, model: str, tokens: int, forced: Fault | None, now: float
    ) -> tuple[Fault | None, tuple[tuple[str, str], ...]]:
        """Admission (see `admission.py`), skipped when nothing is configured to refuse; then
        the request counts as in flight."""
        if forced is None and self._open_door:
            fault: Fault | None = None
            limit_headers: tuple[tuple[str, str], ...] = ()
        else:
            fault, limit_headers = admit(
                settings=self._settings,
                limiter=self._limiter,
                stats=self.stats,
                rng=self._rng,
                request=Request(key=key, model=model, tokens=tokens, forced=forced, now=now),
            )
        stats = self.stats
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        return fault, limit_headers

    def _embed(
        self,
        body: dict[str, Any],
        *,
        key: str,
        forced: Fault | None,
        embedded: tuple[Reply, int] | None = None,
    ) -> Reply:
        """`embedded`: the reply and its tokens when a worker computed them (isolation.py)."""
        s = self._settings
        reply, tokens = embedded or embeddings.embeddings_reply(body=body, settings=s)
        fault, limit_headers = self._admit(key, body["model"], tokens, forced, self.clock.now())
        if fault is Fault.HANG:
            return Reply(status=200, hang=True, holds_slot=True)
        self.stats.prompt_tokens += tokens
        if fault is not None:
            reply = embeddings.with_fault(reply, fault)
        if not self._zero_latency or fault is Fault.SLOW:
            extra = s.faults.slow_ms / 1000.0 if fault is Fault.SLOW else 0.0
            timing = plan_timing(
                latency=s.latency,
                uncached_tokens=tokens,
                output_tokens=0,
                rng=self._rng,
                extra_ttft=extra,
            )
            reply.delay = timing.total
        reply.headers = limit_headers
        reply.holds_slot = True
        return reply

    def _answer(
        self, *, spec: generate.Spec, key: str, fault: Fault | None, extra_ttft: float,
        now: float, tier: tiers.SimTier, parsed: Parsed,
    ) -> Reply:  # fmt: skip
        """`parsed`'s digests, words and draws when a worker computed them (isolation.py)."""
        s = self._settings
        cached = 0
        if self._cache_from is not None:
            scope = f"{key}\x00{spec.model}"
            for index, (text, count) in enumerate(spec.prompts):
                if count < self._cache_from:
                    continue
                machine = self._router.scope(scope=scope, text=text, key=parsed.cache_key,
                                             now=now)  # fmt: skip
                if parsed.digests is None or machine != scope:  # routed: the machine's digests
                    cached += self._cache.lookup_and_store(scope=machine, text=text, now=now)
                else:
                    digests = parsed.digests[index]
                    cached += self._cache.lookup_and_store_digests(digests, now=now)
        timing = ZERO
        if not self._zero_latency or extra_ttft or tier is not tiers.SimTier.DEFAULT:
            rng = self._rng
            if s.latency.per_request:
                rng = parsed.rng or tiers.request_rng(s.seed, model=spec.model, tier=tier,
                                                      prompt=spec.prompts[0][0])  # fmt: skip
            timing = tiers.request_timing(
                latency=s.latency, tiers=s.tiers, tier=tier,
                uncached_tokens=spec.prompt_tokens - cached, output_tokens=spec.output_tokens,
                rng=rng, extra_ttft=extra_ttft,
            )  # fmt: skip
        prefix = "chatcmpl-" if spec.chat else "cmpl-"
        answer = generate.answer(
            spec=spec,
            seed=s.seed,
            cached_tokens=cached,
            id=f"{prefix}{self._id_prefix}{next(self._ids):010x}",
            created=int(self._wall()),
            choices=parsed.choices,
        )
        if s.reasoning_share:
            answer.reasoning_tokens = int(answer.completion_tokens * s.reasoning_share)
        self.stats.prompt_tokens += answer.prompt_tokens
        self.stats.completion_tokens += answer.completion_tokens
        self.stats.cached_tokens += cached
        answer.service_tier = tier.value if s.tiers.report else None
        if fault is None or fault is Fault.SLOW:
            self.tiers.answered(tier, settings=s.tiers, model=spec.model,
                                prompt=answer.prompt_tokens, cached=cached,
                                completion=answer.completion_tokens)  # fmt: skip
        return generate.generation_reply(
            spec=spec,
            answer=answer,
            timing=timing,
            fault=fault,
            cut_after=s.faults.disconnect_after_chunks,
            spaced_json=s.spaced_json,
        )

    # ---- the Responses API (responses_api.py) --------------------------------------------

    def _respond(self, headers: Mapping[str, str], raw: bytes) -> Reply:
        s = self._settings
        body = responses_api.check(generate.parse_json(raw))
        if s.strict_models and body["model"] not in s.models:
            raise SimError(404, f"The model '{body['model']}' does not exist",
                           code="model_not_found", param="model")  # fmt: skip
        key = generate.bearer_key(headers.get("authorization"))
        self.stats.keys[key_label(key)] += 1
        if "prompt_cache_key" in body:
            self.stats.cache_key(generate.prompt_cache_key(body["prompt_cache_key"]))
        forced = generate.forced_fault(headers[FAULT_HEADER]) if FAULT_HEADER in headers else None
        previous, history = body.get("previous_response_id"), ""
        if previous is not None:
            found = self._memory.get(previous, key=key) if isinstance(previous, str) else None
            if found is None:
                raise responses_api.not_found(str(previous), param="previous_response_id")
            history = found.conversation
        natural = headers.get(generate.OUTPUT_TOKENS_HEADER)
        plan = responses_api.plan(
            body, history=history, default_tokens=s.max_tokens_default,
            max_tokens=s.max_output_tokens, natural=_natural(natural, s.max_output_tokens),
        )  # fmt: skip
        now = self.clock.now()
        reserved = plan.prompt_tokens + plan.output_tokens
        fault, limit_headers = self._admit(key, body["model"], reserved, forced, now)
        if fault is Fault.HANG:
            return Reply(status=200, hang=True, holds_slot=True)
        cached = 0
        if self._cache_from is not None and plan.prompt_tokens >= self._cache_from:
            scope = self._router.scope(scope=f"{key}\x00{body['model']}", text=plan.prompt,
                                       key=body.get("prompt_cache_key"), now=now)  # fmt: skip
            cached = self._cache.lookup_and_store(scope=scope, text=plan.prompt, now=now)
        response_id = f"resp_{self._id_prefix}{next(self._ids):010x}"
        response, deltas = responses_api.respond(
            plan, response_id=response_id, created=int(self._wall()), seed=s.seed, cached=cached,
            previous=previous,
        )  # fmt: skip
        if body.get("store") is not False:
            self._memory.put(response_id, responses_api.remembered(plan, response, key=key))
        usage = response["usage"]
        self.stats.prompt_tokens += usage["input_tokens"]
        self.stats.completion_tokens += usage["output_tokens"]
        self.stats.cached_tokens += cached
        reply = self._responses_reply(response, deltas, plan, cached=cached, fault=fault)
        reply.headers = limit_headers
        reply.holds_slot = True
        return reply

    def _responses_reply(
        self,
        response: dict[str, Any],
        deltas: list[str],
        plan: responses_api.Plan,
        *,
        cached: int,
        fault: Fault | None,
    ) -> Reply:
        s = self._settings
        stream = plan.body.get("stream") is True
        timing = ZERO
        extra = s.faults.slow_ms / 1000.0 if fault is Fault.SLOW else 0.0
        if not self._zero_latency or extra:
            uncached = plan.prompt_tokens - cached
            timing = plan_timing(
                latency=s.latency, uncached_tokens=uncached, output_tokens=len(deltas),
                rng=self._rng, extra_ttft=extra,
            )  # fmt: skip
        if fault is Fault.MALFORMED:
            return Reply(status=200, body=malformed_body(stream=False), delay=timing.total)
        delays = None if timing.is_zero else [timing.ttft, *timing.gaps]
        reply = responses_api.layout(response, deltas, stream=stream, delays=delays)
        if not stream:
            reply.delay = timing.total
            if fault is Fault.DISCONNECT:
                reply.cut_after = len(reply.body) // 2
        elif fault is Fault.DISCONNECT and reply.events:
            reply.cut_after = min(s.faults.disconnect_after_chunks, len(reply.events) - 1)
        return reply

    def _stored_response(self, method: str, response_id: str, headers: Mapping[str, str]) -> Reply:
        key = generate.bearer_key(headers.get("authorization"))
        if method == "DELETE":
            if not self._memory.pop(response_id, key=key):
                raise responses_api.not_found(response_id)
            body = {"id": response_id, "object": "response", "deleted": True}
            return Reply(status=200, body=orjson.dumps(body))
        found = self._memory.get(response_id, key=key)
        if found is None:
            raise responses_api.not_found(response_id)
        return Reply(status=200, body=orjson.dumps(found.response))


def _unless_raised(parsed: Parsed | BaseException) -> Parsed:
    if isinstance(parsed, BaseException):
        raise parsed
    return parsed


def _natural(value: str | None, highest: int) -> int | None:
    """The `x-sim-output-tokens` header: the answer's natural length."""
    if value is None:
        return None
    try:
        return min(max(1, int(value)), highest)
    except ValueError:
        raise SimError(400, f"{generate.OUTPUT_TOKENS_HEADER} must be an integer.") from None

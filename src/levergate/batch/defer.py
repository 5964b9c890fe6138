"""Deferral: a job's lines packed into the provider's own batch API for its discount (~50%),
instead of run one by one through the pipeline. A job-level step of the batch runner
(`Runner.advance` asks `Deferral.step` first), so it runs under the Supervisor with the
runner, on the runner's clock, under the job's lease, and survives crashes through the store.

Which jobs: an async single request marked deferrable (batch/async_requests.py puts a
`defer` entry in its `extra`), or a Batch-API batch whose lines all name aliases with a
`defer.routes` policy (or whose metadata says `levergate_defer: "true"`). Async requests with
the same target are packed into one provider batch (batch/defer_pack.py): the one whose step
sends the pack carries it (its part lists the `members`), the others wait for it
(`carrier`). A deferred job stays `validating` while the provider has it: its lines are
loaded but never claimed (the runner claims lines of `in_progress` jobs only). Its state is
`extra["defer"]["parts"]`, one part per upstream, each walking:

    new ──upload──> uploaded ──create──> submitted ──poll (backoff)──> ended ──results──> done
      └───────────── a 4xx, or `defer.max_failures` failures in a row ──────────────> failed

Each arrow is saved before the next is taken, and the provider's batch id is saved the moment
it is known: a gateway killed mid-deferral resumes polling the same provider batch, never
submits it again. The one window left — killed after the provider accepted a batch but
before its id was written — is closed for OpenAI by tagging the batch in `metadata` and looking
for the tag before creating; Anthropic's Message Batches carry no metadata, so there that
window (milliseconds) can submit a second batch: said in the docs. Results are written with
`LineStore.finish` (only over pending lines: one result per line however often a rerun
writes them) and priced as batched (`trace.batch`, the ledger's `batch` lever) through
`Measure`. Once every part is done or failed the job moves to `in_progress`: lines a failed
part left pending then run the ordinary way, and the runner finalizes the job as any other.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from levergate.batch.defer_pack import Packer, PackKey
from levergate.batch.defer_results import LineRecords, result_line
from levergate.batch.defer_wire import ProviderBatches, ProviderDown, ProviderRefused, provider_for
from levergate.batch.lines import FileBounds, error_line, read_rows
from levergate.batch.model import Job, LineRow
from levergate.config import WILDCARD, AnthropicUpstreamSettings, DeferSettings, UpstreamSettings
from levergate.core.json_bound import parse_json
from levergate.errors import LevergateError
from levergate.policies.tiers import Tier
from levergate.protocol.anthropic.upstream_request import to_messages_request
from levergate.webhooks import backoff

if TYPE_CHECKING:
    from levergate.batch.files import Disk
    from levergate.batch.runner import Runner
    from levergate.batch.store import Store
    from levergate.core.clock import Clock
    from levergate.extension import Host

log = logging.getLogger("levergate.batch.defer")
PAGE = 1000
OPEN = ("new", "uploaded", "submitted", "ended")


@dataclass(frozen=True, slots=True)
class BatchTarget:
    """Where a deferred line goes: an upstream's batch API, under its model name."""

    upstream: str
    api: str  # "openai" | "anthropic"
    model: str


class Deferral:
    def __init__(self, host: Host, *, store: Store, clock: Clock, disk: Disk) -> None:
        self.settings: DeferSettings = host.settings.defer
        self._host = host
        self._store = store
        self._clock = clock
        self._disk = disk
        self._root = disk.root / "defer"
        batch = host.settings.batch
        self._bounds = FileBounds(batch.max_lines, batch.max_line_bytes, batch.max_custom_id_chars)
        self._upstreams = {u.name: u for u in host.settings.upstreams}
        self._http = httpx.AsyncClient()
        self._providers: dict[str, ProviderBatches] = {}
        self._records = LineRecords(host)
        self._packer = Packer(max_lines=self.settings.max_lines,
                              max_wait=self.settings.pack_max_wait_seconds)  # fmt: skip

    async def aclose(self) -> None:
        await self._http.aclose()

    # ---- which requests may be deferred ---------------------------------------------------

    def target(self, body: Any, *, endpoint: str) -> BatchTarget | None:
        """The batch API a request would go to, or None when it cannot be deferred."""
        if not isinstance(body, dict) or not isinstance(model := body.get("model"), str):
            return None
        models = self._host.models
        alias = models.get(model) or models.get(WILDCARD)
        if alias is None:
            return None
        target = alias.endpoints[0]
        upstream = self._upstreams.get(target.upstream)
        kind = getattr(upstream, "kind", None)
        if upstream is None or kind not in ("openai", "anthropic"):
            return None
        if kind == "anthropic" and endpoint != "/v1/chat/completions":
            return None  # Anthropic batches Messages only
        name = target.upstream_model or alias.upstream_model or model
        return BatchTarget(upstream.name, str(kind), model if name == WILDCARD else name)

    def routed(self, model: Any) -> bool:
        """The alias's route policy sends its Batch-API lines to the provider."""
        policy = self.settings.routes.get(model) if isinstance(model, str) else None
        return policy is not None and policy.batch_lines

    def wants_batch(self, job: Job) -> bool:
        if not self.settings.enabled or job.kind != "batch" or "defer" in job.extra:
            return False
        asked = (job.metadata or {}).get("levergate_defer") == "true"
        return asked or bool(self.settings.routes)

    # ---- the runner's job-level step ------------------------------------------------------

    async def step(self, job: Job, runner: Runner) -> bool | None:
        """One step of a deferred job; None when `job` is not deferral's to advance."""
        if job.status == "validating" and self.wants_batch(job):
            return await self._plan_batch(job)
        state = job.extra.get("defer")
        if not isinstance(state, dict):
            return None
        if job.status == "cancelling" and "in_progress_at" not in job.times:
            self._packer.withdraw(job.id)
            await self._cancel(job, state)
            return await runner.finalize(job)
        if job.status != "validating":
            return None
        if state.get("carrier"):
            return await self._await_carrier(job, state)
        if state.get("parts") is None:
            return await self._plan_single(job, state)
        return await self._advance(job, state)

    async def _plan_batch(self, job: Job) -> bool:
        """Load the batch's lines and write one provider file per upstream; a batch with a
        line that cannot be deferred runs the ordinary way."""
        record = await self._store.get_file(job.input_file_id, tenant=job.tenant)
        path = self._disk.path(job.input_file_id)
        if record is None or not await asyncio.to_thread(path.exists):
            return await self._save(job, extra={**job.extra, "defer": None}, moved=None)
        await self._store.clear_lines(job.id)
        rows = read_rows(path, endpoint=job.endpoint, bounds=self._bounds,
                         limits=self._host.settings.limits, chunk=PAGE)  # fmt: skip
        asked = (job.metadata or {}).get("levergate_defer") == "true"
        writer = _Writer(self, job)
        try:
            while (page := await asyncio.to_thread(next, rows, None)) is not None:
                await self._store.add_lines(job.id, page)
                if writer.parts is not None:
                    await asyncio.to_thread(writer.add, page, need_policy=not asked)
        finally:
            writer.close()
        if writer.parts is None or not writer.parts:
            # Not deferrable: the lines are loaded, the runner runs them as any batch's.
            await asyncio.to_thread(writer.discard)
            return await self._save(job, extra={**job.extra, "defer": None}, moved="in_progress")
        return await self._save(job, extra={**job.extra, "defer": {"parts": writer.parts}})

    async def _plan_single(self, job: Job, state: dict[str, Any]) -> bool:
        """An async request's line into its target's pack (batch/defer_pack.py); sent with the
        pack's other requests once the pack is due."""
        body = job.extra["request"]
        target = self.target(body, endpoint=job.endpoint)
        if target is None:  # the route changed since (a config reload): run it here
            self._packer.withdraw(job.id)
            return await self._save(job, extra={**job.extra, "defer": None}, moved="in_progress")
        key = PackKey(target.upstream, target.model, job.endpoint, str(body.get("model")))
        members = self._packer.offer(job, key, due=self._due(job, key.alias),
                                     now=self._clock.now())  # fmt: skip
        if members is None:
            return False
        return await self._send_pack(job, state, members)

    def _due(self, job: Job, alias: str) -> float:
        """When the batch must go for `job`'s deadline (its own, else its window's end) to be
        met at the batch tier's estimated latency."""
        deadline = job.extra.get("not_after") or job.expires_at
        return float(deadline) - self._host.tiers.seconds(alias, Tier.BATCH)

    async def _send_pack(self, carrier: Job, state: dict[str, Any], members: list[Job]) -> bool:
        """One provider file for every member; the carrier saved first, then the others."""
        writer = _Writer(self, carrier)
        try:
            writer.add([LineRow(n, "request", orjson.dumps(m.extra["request"]))
                        for n, m in enumerate(members)], need_policy=False)  # fmt: skip
        finally:
            writer.close()
        ids = [m.id for m in members]
        if not writer.parts:  # a member cannot go in a provider batch: each runs here
            await asyncio.to_thread(writer.discard)
            self._packer.sent(ids)
            for member in members:
                await self._unpack(member.id)
            return True
        parts = [{**writer.parts[0], "members": ids}]
        if not await self._save(
            carrier, extra={**carrier.extra, "defer": {**state, "parts": parts}}
        ):
            self._packer.sent(ids)
            return False
        for member_id in ids[1:]:
            fresh = await self._store.get_job(member_id, tenant=None)
            if fresh is not None and fresh.status == "validating":
                marked = {**fresh.extra, "defer": {"parts": [], "carrier": carrier.id}}
                await self._save(fresh, extra=marked)
        self._packer.sent(ids)
        return True

    async def _unpack(self, job_id: str) -> None:
        found = await self._store.get_job(job_id, tenant=None)
        if found is not None and found.status == "validating":
            await self._save(found, extra={**found.extra, "defer": None}, moved="in_progress")

    async def _await_carrier(self, job: Job, state: dict[str, Any]) -> bool:
        """A packed request waits while its carrier's batch is open, then moves on: its line
        answered by the carrier, or run the ordinary way when the batch did not answer it."""
        carrier = await self._store.get_job(state["carrier"], tenant=None)
        found = (carrier.extra.get("defer") or {}) if carrier is not None else {}
        parts = found.get("parts") or []
        if (
            carrier is not None
            and carrier.status == "validating"
            and any(p.get("state") in OPEN for p in parts)
        ):
            return False
        return await self._save(job, extra=job.extra, moved="in_progress")

    async def _advance(self, job: Job, state: dict[str, Any]) -> bool:
        now = self._clock.now()
        parts: list[dict[str, Any]] = [dict(p) for p in state["parts"]]
        for n, part in enumerate(parts):
            if part["state"] not in OPEN or part.get("next_at", 0.0) > now:
                continue
            changed = await self._part(job, part)
            parts[n] = changed
            return await self._save(job, extra={**job.extra, "defer": {**state, "parts": parts}})
        if any(p["state"] in OPEN for p in parts):
            return False  # every open part waits for its next poll
        if all(p["state"] == "done" for p in parts):
            for member in _members(job, parts):
                await self._close_missing(member)
        return await self._save(job, extra=job.extra, moved="in_progress")

    async def _part(self, job: Job, part: dict[str, Any]) -> dict[str, Any]:
        """One arrow of one part; the part as it is afterwards (saved by the caller)."""
        provider = self._provider(part["upstream"])
        path = Path(part["path"])
        try:
            if part["state"] == "new":
                return {**part, "state": "uploaded", "file": await provider.upload(path),
                        "failures": 0}  # fmt: skip
            if part["state"] == "uploaded":
                found = await provider.find(part["tag"])
                batch_id = found or await provider.create(
                    path=path, file_id=part["file"], endpoint=job.endpoint, tag=part["tag"]
                )
                return {**part, "state": "submitted", "batch": batch_id, "polls": 0,
                        "failures": 0, "next_at": self._clock.now() + self._poll(0),
                        "submitted_at": self._clock.now()}  # fmt: skip
            if part["state"] == "submitted":
                polled = await provider.poll(part["batch"])
                polls = part.get("polls", 0) + 1
                if not polled.ended:
                    return {**part, "polls": polls, "failures": 0,
                            "next_at": self._clock.now() + self._poll(polls)}  # fmt: skip
                self._turnaround(part)
                return {**part, "state": "ended", "outputs": list(polled.outputs),
                        "provider_status": polled.status, "failures": 0}  # fmt: skip
            if "members" in part:
                await self._collect_pack(part, provider)
            else:
                await self._collect(job, part, provider)
        except ProviderRefused as exc:
            log.warning("defer %s: %s refused: %s (its lines run here)", job.id, part["upstream"],
                        exc)  # fmt: skip
            return {**part, "state": "failed", "reason": str(exc)[:300]}
        except ProviderDown as exc:
            failures = part.get("failures", 0) + 1
            log.warning("defer %s: %s (attempt %d)", job.id, exc, failures)
            if failures >= self.settings.max_failures and part["state"] in ("new", "uploaded"):
                return {**part, "state": "failed", "reason": str(exc)[:300]}
            return {**part, "failures": failures,
                    "next_at": self._clock.now() + self._poll(failures)}  # fmt: skip
        await asyncio.to_thread(path.unlink, missing_ok=True)
        return {**part, "state": "done"}

    def _turnaround(self, part: dict[str, Any]) -> None:
        """The provider's batch took this long: the batch tier's latency for the model."""
        started, alias = part.get("submitted_at"), part.get("alias")
        if isinstance(started, int | float) and isinstance(alias, str):
            seconds = max(0.0, self._clock.now() - started)
            self._host.tiers.observe(alias, Tier.BATCH, seconds=seconds, prompt=0, output=0)

    async def _collect_pack(self, part: dict[str, Any], provider: ProviderBatches) -> None:
        """A pack's results, each into its own request's line (idx 0) and record."""
        members: list[str] = list(part["members"])
        names = dict.fromkeys(range(len(members)), "request")
        request_ids = {n: f"{member}-0" for n, member in enumerate(members)}
        redact = self._host.redactor
        async for line in provider.results(tuple(part["outputs"])):
            found = result_line(redact.scrub(line), api=part["api"], job_id="", names=names,
                                now=int(self._clock.now()), request_ids=request_ids)  # fmt: skip
            if found is None:
                continue
            n, ok, text, body = found
            job = await self._store.get_job(members[n], tenant=None)
            if job is None:
                continue
            written = await self._store.finish(job.id, [(0, ok, text)])
            if written and ok and body is not None:
                self._records.record(job, idx=0, body=body, upstream=part["upstream"],
                                     upstream_model=part["model"])  # fmt: skip

    def _poll(self, n: int) -> float:
        s = self.settings
        return backoff(n + 1, base=s.poll_first_seconds, factor=s.poll_factor,
                       cap=s.poll_max_seconds)  # fmt: skip

    async def _collect(self, job: Job, part: dict[str, Any], provider: ProviderBatches) -> None:
        """The ended batch's results into the job's lines, a page at a time."""
        names = await self._custom_ids(job)
        page: list[tuple[int, bool, bytes]] = []
        priced: list[tuple[int, dict[str, Any]]] = []
        redact = self._host.redactor  # an answer may echo the key, as a live one may
        async for line in provider.results(tuple(part["outputs"])):
            found = result_line(redact.scrub(line), api=part["api"], job_id=job.id, names=names,
                                now=int(self._clock.now()))  # fmt: skip
            if found is None:
                continue
            idx, ok, text, body = found
            page.append((idx, ok, text))
            if ok and body is not None:
                priced.append((idx, body))
            if len(page) >= PAGE:
                await self._finish(job, part, page, priced)
                page, priced = [], []
        if page:
            await self._finish(job, part, page, priced)

    async def _finish(self, job: Job, part: dict[str, Any], page: list[tuple[int, bool, bytes]],
                      priced: list[tuple[int, dict[str, Any]]]) -> None:  # fmt: skip
        written = await self._store.finish(job.id, page)
        if written:  # a rerun after a crash writes nothing again, and prices nothing again
            for idx, body in priced:
                self._records.record(job, idx=idx, body=body, upstream=part["upstream"],
                                     upstream_model=part["model"])  # fmt: skip

    async def _custom_ids(self, job: Job) -> dict[int, str]:
        """idx -> the client's custom_id, for the lines still open."""
        found = await self._store.unleased(job.id, now=self._clock.now(), limit=10**9)
        return dict(found)

    async def _close_missing(self, job_id: str) -> None:
        """Lines every provider batch ended without answering: error lines, never dropped."""
        found = await self._store.unleased(job_id, now=self._clock.now(), limit=PAGE * 100)
        why = "The provider's batch ended without a result for this request."
        rows = [(idx, False, error_line(cid, code="deferral_no_result", message=why))
                for idx, cid in found]  # fmt: skip
        if rows:
            await self._store.finish(job_id, rows)

    async def _cancel(self, job: Job, state: dict[str, Any]) -> None:
        for part in state.get("parts") or ():
            if part.get("state") == "submitted" and part.get("batch"):
                try:
                    await self._provider(part["upstream"]).cancel(part["batch"])
                except (ProviderDown, ProviderRefused) as exc:
                    log.warning("defer %s: cannot cancel %s: %s", job.id, part["batch"], exc)

    def _provider(self, upstream: str) -> ProviderBatches:
        if upstream not in self._providers:
            s = self.settings
            settings = self._upstreams[upstream]
            if not isinstance(settings, UpstreamSettings):  # route() admits HTTP upstreams only
                raise ProviderRefused(f"upstream {upstream!r} has no batch API")
            self._providers[upstream] = provider_for(
                settings, http=self._http,
                max_result_bytes=s.max_result_bytes, timeout=s.timeout_seconds)  # fmt: skip
        return self._providers[upstream]

    async def _save(self, job: Job, *, extra: dict[str, Any], moved: str | None = None) -> bool:
        now = self._clock.now()
        changed = dataclasses.replace(job, extra=extra)
        if moved is not None:
            changed = changed.moved(moved, now=now)
        return await self._store.save(changed, expect=job.status)


def _members(job: Job, parts: list[dict[str, Any]]) -> list[str]:
    """The ids of the jobs whose lines `parts` answered: a pack's members, else the job's."""
    ids = [m for p in parts for m in p.get("members", ())]
    return list(dict.fromkeys(ids)) if ids else [job.id]


class _Writer:
    """Provider input files being written, one per upstream; `parts` None once a line turns
    out not deferrable (then the whole job runs the ordinary way)."""

    def __init__(self, deferral: Deferral, job: Job) -> None:
        self._d = deferral
        self._job = job
        self.parts: list[dict[str, Any]] | None = []
        self._files: dict[str, Any] = {}

    def add(self, rows: Iterable[LineRow], *, need_policy: bool) -> None:
        for row in rows:
            if row.request is None or self.parts is None:
                continue
            body = parse_json(row.request)
            target = self._d.target(body, endpoint=self._job.endpoint)
            if target is None or (need_policy and not self._d.routed(body.get("model"))):
                self.parts = None
                return
            line = self._line(target, row.idx, body)
            if line is None:
                self.parts = None
                return
            part = self._part(target)
            part.setdefault("alias", str(body.get("model")))
            if part["lines"] >= self._d.settings.max_lines:
                self.parts = None  # more than one provider batch holds: run it here
                return
            self._files[target.upstream].write(line + b"\n")
            part["lines"] += 1

    def _line(self, target: BatchTarget, idx: int, body: dict[str, Any]) -> bytes | None:
        body = {**body, "model": target.model}
        if target.api == "openai":
            return orjson.dumps({"custom_id": f"l{idx}", "method": "POST",
                                 "url": self._job.endpoint, "body": body})  # fmt: skip
        upstream = self._d._upstreams[target.upstream]
        most = (
            upstream.default_max_tokens if isinstance(upstream, AnthropicUpstreamSettings) else 4096
        )
        try:
            params = to_messages_request(body, default_max_tokens=most)
        except LevergateError:  # what Messages cannot say runs here, and gets its error there
            return None
        return orjson.dumps({"custom_id": f"l{idx}", "params": params})

    def _part(self, target: BatchTarget) -> dict[str, Any]:
        parts = self.parts if self.parts is not None else []
        for part in parts:
            if part["upstream"] == target.upstream:
                return part
        path = self._d._root / f"{self._job.id}-{target.upstream}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._files[target.upstream] = path.open("wb")
        part = {"upstream": target.upstream, "api": target.api, "model": target.model,
                "path": str(path), "lines": 0, "state": "new",
                "tag": f"{self._job.id}:{len(parts)}"}  # fmt: skip
        parts.append(part)
        return part

    def discard(self) -> None:
        """Remove the provider files begun for a job that runs the ordinary way after all."""
        for handle in self._files.values():
            Path(handle.name).unlink(missing_ok=True)

    def close(self) -> None:
        for handle in self._files.values():
            handle.flush()
            os.fsync(handle.fileno())  # the part is saved as written only after this
            handle.close()

"""Packing deferred single requests: async requests bound for the same provider batch target go
out as one provider batch instead of one one-line batch each (batch/defer.py uses it).

A deferred async request waits in an open pack of its target (upstream, model name, endpoint,
alias) until the pack is due: `defer.max_lines` requests in it (size), or the time its earliest
deadline still allows (the deadline minus the batch tier's latency estimate at the configured
confidence: layers/tiers/book.py), or `defer.pack_max_wait_seconds` after its first request
came, whichever is first. The step of a request that finds its pack due makes it the carrier:
its job holds the provider batch (one part, `members` listing every request's job, custom ids
`l<n>` for the n-th), the others are marked with `carrier` and wait for it. The carrier collects
each answer into its own request's line and record; when the provider's batch is over, a
member whose line is still open runs the ordinary way.

Packs are in memory, per process: a crash loses nothing but the waiting (the requests are
still `validating` with no parts and are packed again). The carrier is saved before its
members are marked; a crash between the two lets a member be packed a second time (its line
keeps one answer, `LineStore.finish` writes only a pending line, but the provider may answer
and bill it twice): said in the README (Service tiers), as defer.py says Anthropic's own
window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from levergate.batch.model import Job


@dataclass(frozen=True, slots=True)
class PackKey:
    upstream: str
    model: str  # the name the provider batch is sent under
    endpoint: str
    alias: str  # the model the requests named (the batch tier's latency is kept by it)


@dataclass(slots=True)
class _Pack:
    opened: float
    due: float
    members: dict[str, Job] = field(default_factory=dict)  # job id -> the job as offered


class Packer:
    """The open packs of this process, by target."""

    def __init__(self, *, max_lines: int, max_wait: float) -> None:
        self._max_lines = max_lines
        self._max_wait = max_wait
        self._packs: dict[PackKey, _Pack] = {}
        self._taken: dict[str, str] = {}  # job id -> its carrier, once its pack went out

    def offer(self, job: Job, key: PackKey, *, due: float, now: float) -> list[Job] | None:
        """Put `job` in its target's pack (`due`: when its deadline wants the batch out, or
        inf); the members to send now (`job` first, it carries them), or None to wait."""
        if job.id in self._taken:
            return None  # packed already: it waits for its carrier (defer.py)
        pack = self._packs.get(key)
        if pack is None:
            pack = self._packs[key] = _Pack(opened=now, due=now + self._max_wait)
        pack.members[job.id] = job
        pack.due = min(pack.due, due)
        if len(pack.members) < self._max_lines and now < pack.due:
            return None
        del self._packs[key]
        members = [job, *(m for m in pack.members.values() if m.id != job.id)]
        for member in members:
            self._taken[member.id] = job.id
        return members

    def sent(self, job_ids: list[str]) -> None:
        """The members are marked in the store: nothing here needs to remember them."""
        for job_id in job_ids:
            self._taken.pop(job_id, None)

    def withdraw(self, job_id: str) -> None:
        """A job that left its pack (cancelled, or no longer deferrable)."""
        for pack in self._packs.values():
            pack.members.pop(job_id, None)
        self._taken.pop(job_id, None)

    @property
    def waiting(self) -> int:
        return sum(len(p.members) for p in self._packs.values())

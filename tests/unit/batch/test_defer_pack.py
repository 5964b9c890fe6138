"""Packing deferred requests (batch/defer_pack.py): a pack goes out when full, when its earliest
deadline needs it, or when its first request has waited long enough; the request whose step
finds it due carries the others, and a packed request is not packed again."""

from __future__ import annotations

import math

from levergate.batch.defer_pack import Packer, PackKey
from levergate.batch.model import Job

KEY = PackKey("sim", "gpt-4o-mini", "/v1/chat/completions", "mini")
OTHER = PackKey("sim", "gpt-4.1", "/v1/chat/completions", "big")


def job(n: int) -> Job:
    return Job(id=f"areq_{n}", tenant="t", status="validating", endpoint=KEY.endpoint,
               input_file_id="", created_at=0, expires_at=86400, kind="async")  # fmt: skip


def test_a_pack_waits_for_company_then_goes_at_its_longest_wait() -> None:
    packer = Packer(max_lines=100, max_wait=60.0)
    assert packer.offer(job(1), KEY, due=math.inf, now=0.0) is None
    assert packer.offer(job(2), KEY, due=math.inf, now=10.0) is None
    assert packer.offer(job(3), OTHER, due=math.inf, now=10.0) is None  # another target
    assert packer.offer(job(1), KEY, due=math.inf, now=59.0) is None
    sent = packer.offer(job(2), KEY, due=math.inf, now=60.0)
    assert sent is not None
    assert [j.id for j in sent] == ["areq_2", "areq_1"]
    assert packer.offer(job(1), KEY, due=math.inf, now=61.0) is None  # packed: it waits
    packer.sent([j.id for j in sent])
    assert packer.waiting == 1  # job 3, alone in its own pack


def test_a_full_pack_or_a_near_deadline_sends_it_at_once() -> None:
    packer = Packer(max_lines=3, max_wait=3600.0)
    for n in (1, 2):
        assert packer.offer(job(n), KEY, due=math.inf, now=0.0) is None
    full = packer.offer(job(3), KEY, due=math.inf, now=1.0)
    assert full is not None
    assert len(full) == 3
    assert packer.offer(job(4), KEY, due=500.0, now=2.0) is None
    assert packer.offer(job(5), KEY, due=math.inf, now=3.0) is None
    urgent = packer.offer(job(5), KEY, due=math.inf, now=500.0)  # job 4's deadline needs it
    assert urgent is not None
    assert {j.id for j in urgent} == {"areq_4", "areq_5"}


def test_a_withdrawn_request_leaves_its_pack() -> None:
    packer = Packer(max_lines=10, max_wait=60.0)
    packer.offer(job(1), KEY, due=math.inf, now=0.0)
    packer.offer(job(2), KEY, due=math.inf, now=0.0)
    packer.withdraw("areq_1")
    sent = packer.offer(job(2), KEY, due=math.inf, now=60.0)
    assert sent is not None
    assert [j.id for j in sent] == ["areq_2"]

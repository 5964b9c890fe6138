"""The status machine and the batch object's wire shape."""

from __future__ import annotations

import pytest
from openai.types import Batch as SdkBatch

from levergate.batch.model import NEXT, TERMINAL, Counts, Job, TransitionError

JOB = Job(
    id="batch_1",
    tenant="t",
    status="validating",
    endpoint="/v1/chat/completions",
    input_file_id="file-1",
    created_at=100,
    expires_at=100 + 86400,
)


def test_the_happy_path_stamps_each_status() -> None:
    job = JOB.moved("in_progress", now=101).moved("finalizing", now=102, end="completed")
    job = job.moved("completed", now=103)
    assert job.times == {"in_progress_at": 101, "finalizing_at": 102, "completed_at": 103}


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_terminal_statuses_go_nowhere(status: str) -> None:
    terminal = Job(
        id="b",
        tenant="t",
        status=status,
        endpoint="e",
        input_file_id="f",
        created_at=0,
        expires_at=0,
    )
    for to in ("validating", "in_progress", "finalizing", "cancelling", *TERMINAL):
        with pytest.raises(TransitionError):
            terminal.moved(to, now=1)


def test_completed_is_reached_only_through_finalizing() -> None:
    with pytest.raises(TransitionError):
        JOB.moved("completed", now=1)
    with pytest.raises(TransitionError):
        JOB.moved("in_progress", now=1).moved("completed", now=2)
    assert "completed" in NEXT["finalizing"]


def test_the_wire_object_parses_as_the_sdks_batch() -> None:
    job = JOB.moved("in_progress", now=101)
    parsed = SdkBatch.model_validate(job.wire(Counts(total=3, ok=1, failed=1)))
    assert parsed.status == "in_progress"
    assert parsed.in_progress_at == 101
    assert parsed.request_counts is not None
    assert (parsed.request_counts.total, parsed.request_counts.completed) == (3, 1)


def test_a_job_survives_its_row() -> None:
    job = JOB.moved("cancelling", now=5)
    back = Job.from_row(
        id=job.id,
        tenant=job.tenant,
        status=job.status,
        kind=job.kind,
        created_at=job.created_at,
        expires_at=job.expires_at,
        data=job.data(),
    )
    assert back == job

"""`levergate serve`'s process tuning: CPU affinity is applied or refused with a clear error."""

from __future__ import annotations

import os

import pytest

from levergate.config import Server
from levergate.errors import ConfigError
from levergate.server.run import tune_process

NO_GC = {"gc_freeze": False, "gc_gen0_threshold": 0}


def test_pinning_to_the_cpus_already_allowed_keeps_them() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    tune_process(Server(cpus=allowed, **NO_GC))
    assert sorted(os.sched_getaffinity(0)) == allowed


def test_cpus_that_do_not_exist_are_a_config_error() -> None:
    allowed = os.sched_getaffinity(0)
    with pytest.raises(ConfigError, match=r"server\.cpus"):
        tune_process(Server(cpus=[100_000], **NO_GC))
    assert os.sched_getaffinity(0) == allowed

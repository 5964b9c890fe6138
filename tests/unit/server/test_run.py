"""`levergate serve`'s process tuning: CPU affinity is applied or refused with a clear error; the
open-files limit is raised and the connection cap fitted to it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from levergate.config import ServerSettings
from levergate.errors import ConfigError
from levergate.server.run import connection_cap, tune_process


def test_pinning_to_the_cpus_already_allowed_keeps_them() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    tune_process(ServerSettings(cpus=allowed, gc_freeze=False, gc_gen0_threshold=0))
    assert sorted(os.sched_getaffinity(0)) == allowed


def test_cpus_that_do_not_exist_are_a_config_error() -> None:
    allowed = os.sched_getaffinity(0)
    with pytest.raises(ConfigError, match=r"server\.cpus"):
        tune_process(ServerSettings(cpus=[100_000], gc_freeze=False, gc_gen0_threshold=0))
    assert os.sched_getaffinity(0) == allowed


def test_the_connection_cap_leaves_a_descriptor_for_each_upstream_connection() -> None:
    assert connection_cap(configured=4096, open_files=1_048_576) == 4096
    assert connection_cap(configured=4096, open_files=1024) == (1024 - 64) // 2
    assert connection_cap(configured=4096, open_files=10) == 1


_RAISE = """
import logging, resource, sys
from levergate.server.run import raise_open_files_limit
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))  # lowering is allowed to anyone
raise_open_files_limit()
print("now", *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def test_the_open_files_soft_limit_is_raised_to_the_hard_one_and_logged() -> None:
    # In a child process with limits of its own: the test never depends on this machine's
    # limits (an unlimited hard limit used to make it skip) nor changes the test process's.
    done = subprocess.run(
        [sys.executable, "-c", _RAISE], capture_output=True, text=True, timeout=60, check=True
    )
    assert "open-files limit raised from 256 to 4096" in done.stdout
    assert "now 4096 4096" in done.stdout

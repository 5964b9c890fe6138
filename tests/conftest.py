"""Every test: Hypothesis without its per-example deadline. The deadline (200 ms by default) is a
timing assertion, and on a shared, loaded machine an example that is slow only because the
other core is busy failed a property test that holds (seen: the batch summary's cached-token
property, under `make test`'s parallel workers). And each test in its turn: a test marked `alone`
runs with no other test beside it (tests/alone.py)."""

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests import alone
from tests.alone import ALONE, BEHIND, turn

settings.register_profile("levergate", deadline=None)
settings.load_profile("levergate")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Each test in its turn (tests/alone.py): outside pytest-timeout's clock, which starts in
    its own wrapper of this hook, inside this one."""
    if item.get_closest_marker(BEHIND) is not None:
        yield
        return
    with turn(item.get_closest_marker(ALONE) is not None):
        yield


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist the run's id is chosen here, on the controller, so that it can remove the
    run's lock files at the end (xdist would make one up otherwise, and hand it only to the
    workers)."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        config.option.testrunuid = config.option.testrunuid or uuid.uuid4().hex


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config.option, "testrunuid", None) and not hasattr(config, "workerinput"):
        alone.remove(config.option.testrunuid)

"""Fixtures shared by the test suite."""

from __future__ import annotations

import pytest
from trio.testing import MockClock


@pytest.fixture
def virtual_clock() -> MockClock:
    """Trio's virtual clock, jumping ahead whenever every task is blocked.

    pytest-trio runs a test on this clock when the test takes it as an argument. Sleeps and
    timeouts then cost no real time and tests can assert exact durations. The jump waits
    for 20 ms of real idleness rather than pytest-trio's 0 (``autojump_clock``): on a busy
    machine the kernel may deliver a loopback packet a moment late, and with a threshold
    of 0 the clock would leap past a request's timeout in that moment.
    """
    return MockClock(autojump_threshold=0.02)

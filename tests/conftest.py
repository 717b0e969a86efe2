"""Fixtures shared by the test suite."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from redis_server import RedisServer, running_redis
from trio.testing import MockClock

from trio_crawler._cli import ENGINES, engine_class
from trio_crawler._crawler import CrawlerBase

# Real seconds of idleness before the virtual clock jumps to the next deadline. Not 0 (as
# pytest-trio's ``autojump_clock``): on a busy machine a loopback packet can arrive a moment
# late, and AnyIO's Trio test runner uses guest mode, where each I/O wait is a hop through
# a thread; a clock that jumped in that moment would leap past a request's timeout.
AUTOJUMP_THRESHOLD = 0.1


@pytest.fixture
def virtual_clock() -> MockClock:
    """Trio's virtual clock, jumping ahead whenever every task is blocked.

    pytest-trio runs a test on this clock when the test takes it as an argument. Sleeps and
    timeouts then cost no real time and tests can assert exact durations. See
    :data:`AUTOJUMP_THRESHOLD` for why the clock waits before it jumps.
    """
    return MockClock(autojump_threshold=AUTOJUMP_THRESHOLD)


@dataclass(frozen=True, slots=True)
class Engine:
    """One of the CLI's ``--engine`` choices, as the behaviour tests run it.

    Attributes:
        name: The ``--engine`` name.
        crawler: The engine's ``Crawler`` class.
        backend: The AnyIO backend it runs on.
    """

    name: str
    crawler: Callable[..., CrawlerBase]
    backend: str

    @property
    def virtual_time(self) -> bool:
        """Trio's virtual clock runs the Trio-backend engines; asyncio has none."""
        return self.backend == "trio"

    def seconds(self, virtual: float) -> float:
        """A duration for a scenario: as written on virtual time, a tenth of it on asyncio.

        Scenarios are written in comfortable virtual seconds; on the real clock a tenth is
        still far longer than a local request, and keeps the suite quick.
        """
        return virtual if self.virtual_time else virtual / 10

    def assert_duration(self, measured: float, expected: float) -> None:
        """Exact on virtual time; on the real clock, no less and not absurdly more."""
        if self.virtual_time:
            assert measured == pytest.approx(expected)
        else:
            assert expected <= measured < expected + 5


@pytest.fixture(params=list(ENGINES))
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each engine in turn: a behaviour test taking this runs once per engine."""
    return Engine(request.param, engine_class(request.param), ENGINES[request.param][1])


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest, engine: Engine) -> tuple[str, dict[str, Any]]:
    """The engine's backend, on Trio with the virtual clock unless marked ``real_time``."""
    if engine.virtual_time and request.node.get_closest_marker("real_time") is None:
        return ("trio", {"clock": MockClock(autojump_threshold=AUTOJUMP_THRESHOLD)})
    return (engine.backend, {})


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    """A test certificate authority, for HTTPS test servers (one per test module)."""
    return trustme.CA()


@pytest.fixture(scope="module")
def server_context(ca: trustme.CA) -> ssl.SSLContext:
    """A server's SSL context with a certificate for 127.0.0.1 from :func:`ca`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server on a free port, one per test module that asks for it."""
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server of the test's own, for a test that needs one nothing else
    touched (a fresh crawl id on ``redis_server`` serves most others)."""
    with running_redis(tmp_path / "redis") as server:
        yield server

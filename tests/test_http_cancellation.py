"""The crawler's HTTP clients keep serving after hundreds of cancellations at random points.

Cancelling an httpx request mid-flight has leaked connection-pool slots in httpcore
releases (encode/httpcore#1093, #785). The crawler cancels requests all the time (every
``--timeout``, the deadline, Ctrl-C), and its clients have no pool timeout, so a leaked slot
would not fail: the next request would wait for it until its own timeout, every time.

Each worker's client has one connection and makes one request at a time, so its requests
never queue inside the pool. That matters with httpcore 1.0.9: a request that is *queued*
behind a busy connection and gets a new connection at the moment its own cancellation
lands leaves that connection "CONNECTING" for good (seen here with two concurrent requests
on a one-connection pool: after 52 batches on asyncio). These tests cancel a worker-style
client's requests at random moments (connecting, sending, waiting for the headers, reading
the body) against a real server, then show the pool still serves, within a hang detector.
A client you share with ``client=`` should have at least ``max_tasks`` connections, so that
its requests never queue either.
"""

from __future__ import annotations

import random

import anyio
import pytest

from trio_crawler._clients import choose_http_library, open_client
from trio_crawler._events import Response
from trio_crawler._fetch import fetch

from httpserver import Reply, Request, open_test_server
from support import HANG_LIMIT

pytestmark = pytest.mark.anyio

CANCELLATIONS = 400
# Cancel after a random delay up to this many seconds: a loopback request takes about a
# millisecond, so cancellations land at every stage of it, and some after it completed.
MAX_DELAY = 0.003
BODY = b"x" * 200_000  # several reads, so some cancellations land mid-body


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real time on both backends: the cancellations must race real I/O."""
    return str(request.param)


async def test_worker_client_serves_after_hundreds_of_random_cancellations() -> None:
    rng = random.Random(1093)

    async def jittery(request: Request) -> Reply:
        await anyio.sleep(rng.uniform(0, MAX_DELAY))
        return Reply(headers=[("content-type", "text/plain")], body=BODY)

    completed = 0
    async with (
        open_test_server() as server,
        open_client(library=choose_http_library(), max_connections=1) as client,
    ):
        server.fallback(jittery)
        with anyio.fail_after(HANG_LIMIT):
            for n in range(CANCELLATIONS):
                with anyio.move_on_after(rng.uniform(0, MAX_DELAY)):
                    outcome = await fetch(client, server.url(f"/p{n}"))
                    assert isinstance(outcome, Response), outcome
                    completed += 1
        assert CANCELLATIONS - completed >= CANCELLATIONS // 4, "too few were cancelled"

        # A leaked slot would leave these waiting for a connection forever.
        with anyio.fail_after(HANG_LIMIT):
            for n in range(5):
                outcome = await fetch(client, server.url(f"/after/{n}"))
                assert isinstance(outcome, Response)
                assert (outcome.status, outcome.body) == (200, BODY)
    assert server.connections > 1  # cancelled exchanges really did cost connections

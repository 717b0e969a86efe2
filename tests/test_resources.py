"""Resources: a crawl of thousands of failures leaks no descriptor, connection or memory.

A crawler that fails a URL is where leaks hide: the happy path closes its response in a
``with`` block, while a reset, a hang-up or a refused connect leaves an exception, maybe a
half-open socket, and a worker's client to use again for its next URL. So the test here
crawls a site built to fail, in-process on every engine (the ``engine`` fixture; on the
real clock, since nothing sleeps and a big crawl is slower under the virtual clock's idle
checks), and counts three things:

* file descriptors, from ``/proc/self/fd``, before the crawl and after it, once the test
  server is closed and the garbage collector has run: they must be equal. Both counts are
  taken inside the running event loop, so the loop's own descriptors (Trio's epoll and
  wake-up socket, asyncio's selector and self-pipe) are in both;
* connections, as the server sees them: once ``crawl()`` returns, every connection the
  crawler opened must be closed from its side, so the server's count of open connections
  drops to 0 (it would stay above 0, and the wait for that would time out, if a worker's
  client were left open);
* memory, sampled after every ``SAMPLE_EVERY`` records: the crawler keeps a record per URL
  on purpose (``crawler.done``, ``seen_urls``), a few hundred bytes each, so memory grows
  linearly with the records, and the test bounds the slope from the second sample to the
  last: live memory blocks per record (``sys.getallocatedblocks``, free to read) and, over
  one window of ``SAMPLE_EVERY`` records, bytes per record (``tracemalloc``, which is on
  only for that window because it makes allocation 3-4 times slower).

One crawl serves all three, and it is 2000-odd failing URLs, not more: on the 2-core
machine this was written on, with other tests running, a failing URL costs 2-5 ms of the
process's time (httpx's connect and error path, and the test server, all in one process),
so this crawl takes 5-20 s per engine. A second crawl twice the size for memory alone
would triple that; the window and the block counts above find a per-URL leak of a socket,
a client, a response or an exception's traceback in 2000 URLs as surely as in 4000.

How a URL fails, by its path (the site is :func:`failing_site`):

* ``http://127.0.0.1:PORT/refused/N``: a port that is bound but not listening, so every
  connect is refused at once (``ConnectError``). It is in scope, since scope ignores
  ports. The cheapest failure (no server work), so 13 in 16 links are these;
* ``/drop/N``: the server reads the request and closes the connection (FIN), which httpx
  reports as ``RemoteProtocolError``;
* ``/reset/N``: the server sets ``SO_LINGER`` to 0 and closes, so the client gets a TCP
  reset (``ReadError``);
* ``/missing/N``: a 404, answered on a kept-alive connection, so that workers do hold
  connections to the server between requests (which the connection count checks).

Each URL gets one try (``max_tries=1``): a retry reuses the worker's client after a
failure, and so does the worker's next URL, so retries would add time and no new path.
"""

from __future__ import annotations

import gc
import logging
import socket
import struct
import sys
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import pytest

from trio_crawler import FetchStatistic

from conftest import Engine
from httpserver import DropConnection, Reply, Request, TestServer
from support import HANG_LIMIT, open_descriptors

pytestmark = [pytest.mark.anyio, pytest.mark.real_time]

CLOSE_LIMIT = 10  # real seconds for the server to see the crawler's connections closed
# Links on each hub page, one of them the next hub. The crawler takes batches of links in
# the order pages were fetched, so the frontier never holds more than two hubs' links,
# and memory samples taken anywhere in the crawl are comparable.
LINKS_PER_HUB = 256
FAILING_PER_HUB = LINKS_PER_HUB * 15 // 16  # all but the /missing/ ones
HUBS = 9  # 2160 failing URLs
MAX_TASKS = 20
# The crawl ends with a tail: a page of 404s, enough for every worker to end the crawl with
# a kept-alive connection to the server, which only closing its client closes.
TAIL_LINKS = 2 * MAX_TASKS
RECORDS = HUBS * LINKS_PER_HUB + 1 + TAIL_LINKS  # the hubs and their links, the tail's
SAMPLE_EVERY = 250  # records between two memory samples
TRACED = (1000, 1250, 1500)  # the samples between which tracemalloc is on
# Measured per record, on every engine: 0.7-3.3 live blocks (the FetchStatistic, its URL
# and exception strings, less the frontier's share of them) and 350-600 traced bytes.
# A leaked socket, client, response or traceback costs tens of blocks and kilobytes.
MAX_BLOCKS_PER_RECORD = 8
MAX_BYTES_PER_RECORD = 2048


@contextmanager
def refusing_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound (so nothing else takes it
    during the test) but not listening, so the kernel answers every SYN with a reset."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


@dataclass
class ConnectionCount:
    """Connections the server has accepted and not yet closed."""

    open: int = 0
    all_closed: anyio.Event = field(default_factory=anyio.Event)
    # The raw socket of each open connection, by the id of the task serving it: a handler
    # runs in its connection's task, so it can find the socket to reset.
    sockets: dict[int, socket.socket] = field(default_factory=dict)

    async def wait_all_closed(self) -> None:
        """Wait until every accepted connection is closed; fail after ``CLOSE_LIMIT``."""
        with anyio.move_on_after(CLOSE_LIMIT):
            while self.open:
                await self.all_closed.wait()
        if self.open:
            pytest.fail(f"{self.open} connections to the server still open after the crawl")


@asynccontextmanager
async def open_counting_server() -> AsyncIterator[tuple[TestServer, ConnectionCount]]:
    """``httpserver.open_test_server``, also counting the connections open right now.

    ``TestServer`` counts connections accepted, not closed, so this serves each connection
    with its ``_serve_connection`` wrapped in a count (``httpserver.py`` is shared by the
    suite; a test module that needs one more figure wraps it rather than edits it).
    """
    count = ConnectionCount()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as task_group:
        server = TestServer(listener.extra(anyio.abc.SocketAttribute.local_port), {})

        async def serve(stream: anyio.abc.SocketStream) -> None:
            task_id = anyio.get_current_task().id
            count.open += 1
            count.sockets[task_id] = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            try:
                await server._serve_connection(stream)
            finally:
                del count.sockets[task_id]
                count.open -= 1
                if count.open == 0:
                    count.all_closed.set()
                    count.all_closed = anyio.Event()

        task_group.start_soon(listener.serve, serve, task_group)
        try:
            yield server, count
        finally:
            task_group.cancel_scope.cancel("test server closed")


def failing_site(
    count: ConnectionCount, refused_port: int
) -> Callable[[Request], Awaitable[Reply]]:
    """The handler of a site of ``HUBS`` hub pages, each with ``LINKS_PER_HUB`` links.

    A hub's links cycle through the kinds of URL in the module docstring, so every stretch
    of the crawl has the same mix; its last link is the next hub, and the last hub's is
    the tail (``TAIL_LINKS`` 404s).
    """
    refused = f"http://127.0.0.1:{refused_port}/refused/"
    kinds = [refused] * 13 + ["/drop/", "/reset/", "/missing/"]

    async def handle(request: Request) -> Reply:
        kind, _, number = request.target.rpartition("/")
        if request.target == "/hub/tail":
            links = [f"/missing/tail-{n}" for n in range(TAIL_LINKS)]
            return Reply.html("".join(f'<a href="{link}">x</a>\n' for link in links))
        if kind == "/hub":
            hub = int(number)
            links = [f"{kinds[n % len(kinds)]}{hub}-{n}" for n in range(LINKS_PER_HUB - 1)]
            links.append(f"/hub/{hub + 1}" if hub + 1 < HUBS else "/hub/tail")
            return Reply.html("".join(f'<a href="{link}">x</a>\n' for link in links))
        if kind == "/drop":
            raise DropConnection
        if kind == "/reset":
            raw_socket = count.sockets[anyio.get_current_task().id]
            # SO_LINGER on with a zero timeout: close() sends RST instead of FIN.
            raw_socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raise DropConnection
        return Reply.html("not found", status=404)

    return handle


@dataclass
class MemorySamples:
    """``on_record`` for the crawl: memory after every ``SAMPLE_EVERY`` records.

    Each sample is (records, live blocks, traced bytes or None). ``tracemalloc`` traces
    from ``TRACED[0]`` records to ``TRACED[-1]``; the bytes per record are measured over
    the second half of that, when the URLs being finished (and freed from the frontier)
    were almost all queued after tracing began, so their frees offset their allocations
    (tracemalloc ignores the freeing of what it did not see allocated).
    """

    records: int = 0
    samples: list[tuple[int, int, int | None]] = field(default_factory=list)

    def on_record(self, stat: FetchStatistic) -> None:
        self.records += 1
        if self.records % SAMPLE_EVERY:
            return
        gc.collect()  # count what is alive, not garbage in cycles waiting to be collected
        traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else None
        self.samples.append((self.records, sys.getallocatedblocks(), traced))
        if self.records == TRACED[0]:
            tracemalloc.start()
        elif self.records == TRACED[-1]:
            tracemalloc.stop()

    def blocks_per_record(self) -> float:
        """The slope from the second sample to the last (the first may hold warm-up)."""
        records_from, blocks_from, _ = self.samples[1]
        records_to, blocks_to, _ = self.samples[-1]
        return (blocks_to - blocks_from) / (records_to - records_from)

    def bytes_per_record(self) -> float:
        traced = {records: traced for records, _, traced in self.samples}
        return (traced[TRACED[2]] - traced[TRACED[1]]) / (TRACED[2] - TRACED[1])


@pytest.fixture(autouse=True)
def quiet_crawler_log(caplog: pytest.LogCaptureFixture) -> None:
    """Errors only: pytest's log capture would keep each of 2000 "failed" warnings, which
    costs time, and memory that the memory samples would count against the crawler."""
    caplog.set_level(logging.ERROR, logger="trio_crawler")


def check_records(records: list[FetchStatistic]) -> None:
    """One record per URL of the site, each failed the way its path says."""
    assert len(records) == RECORDS
    assert len({record.url for record in records}) == len(records)
    failed = [record for record in records if record.exception is not None]
    assert len(failed) == HUBS * FAILING_PER_HUB
    exceptions = {
        kind: {
            str(record.exception).split(":")[0] for record in failed if f"/{kind}/" in record.url
        }
        for kind in ("refused", "drop", "reset")
    }
    assert exceptions == {
        "refused": {"ConnectError"},
        "drop": {"RemoteProtocolError"},
        "reset": {"ReadError"},
    }


async def test_thousands_of_failures_leak_no_descriptor_connection_or_memory(
    engine: Engine,
) -> None:
    memory = MemorySamples()
    before = open_descriptors()
    try:
        with refusing_port() as refused_port:
            async with open_counting_server() as (server, count):
                server.fallback(failing_site(count, refused_port))
                crawler = engine.crawler(
                    [server.url("/hub/0")],
                    obey_robots=False,
                    max_tries=1,
                    max_tasks=MAX_TASKS,
                    # No attempt should time out; on a loaded machine one might wait long.
                    timeout=HANG_LIMIT,
                    # Thousands of failed connections would slow the origin's pace to a
                    # crawl (as they should, docs/manners.md): this test is about leaks.
                    adapt=False,
                    on_record=memory.on_record,
                )
                with anyio.fail_after(HANG_LIMIT):
                    await crawler.crawl()
                assert crawler.finish_reason == "finished"
                await count.wait_all_closed()
    finally:
        tracemalloc.stop()  # if the crawl ended inside the window; a no-op otherwise
    after = open_descriptors()
    check_records(crawler.done)
    assert server.connections >= HUBS * LINKS_PER_HUB // 8  # one per drop and per reset
    assert after == before, f"{after - before} file descriptors leaked"
    assert memory.blocks_per_record() < MAX_BLOCKS_PER_RECORD, memory.samples
    assert memory.bytes_per_record() < MAX_BYTES_PER_RECORD, memory.samples

"""A host's delay runs from when its request was written, not from when the attempt began.

With more than one request at a time to a host (``--max-per-host 2``), a request that has
to open a connection reaches the server only after the connection is made: over HTTPS,
after a handshake that a far or busy server makes slow. Timed from the attempt's start,
the next request, on a connection already open, would reach the server that much less
than the delay after it. So the crawler times the delay from the moment its transport
reports the request's head written (the ``trace`` event httpx's transports send, and
ours), and holds the host's next request until then (docs/manners.md, "When the delay's
clock starts").

The scenario, on a real TLS server: every handshake waits 0.6 of the delay and every page
takes 1.6 delays to answer, so a page's request goes out while the one before it still
holds the connection, on a new connection, and the next one finds the first connection
free. The server notes when each request's head arrives; every gap is checked against
the delay, on every engine and store. Timed from the attempts' starts, one gap was 0.4
of the delay.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from itertools import pairwise
from pathlib import Path

import anyio
import anyio.abc
import httpcore
import httpx
import pytest
import trustme
from thread_server import ThreadServer, busy_for, response, thread_server

from trio_crawler._clients import choose_http_library, default_ssl_context, open_client
from trio_crawler._connections import RECEIVE_STAMP
from trio_crawler._events import FetchError, Response
from trio_crawler._fetch import _SentTrace, fetch
from trio_crawler._transport import choose_transport

from conftest import Engine
from httpserver import Reply, Request, open_test_server
from mock_http import streaming_transport
from support import HANG_LIMIT, crawl, page, store_options

pytestmark = pytest.mark.anyio

PAGES = 4


@pytest.fixture
def trusting_crawler(
    ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """The crawler's own clients trust the test CA: OpenSSL reads ``SSL_CERT_FILE`` when
    the crawl's shared context is made, so it is made afresh here, and after."""
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    monkeypatch.setenv("SSL_CERT_DIR", "")
    default_ssl_context.cache_clear()
    yield
    default_ssl_context.cache_clear()


@pytest.mark.usefixtures("trusting_crawler")
@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
async def test_a_slow_connection_takes_nothing_from_the_next_gap(
    engine: Engine,
    store: str,
    server_context: ssl.SSLContext,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    # On the virtual clock in whole delays; on asyncio's real clock a fifth of a second,
    # long beside the scheduling of one loaded process.
    delay = 1.0 if engine.virtual_time else 0.2
    options = store_options(store, tmp_path, request, f"sent-{engine.name}")

    async def answer(request: Request) -> Reply:
        if request.target == "/robots.txt":
            return Reply(status=404, body=b"")
        await anyio.sleep(1.6 * delay)
        number = 0 if request.target == "/" else int(request.target.removeprefix("/p"))
        return page(*(f"/p{n}" for n in range(1, PAGES + 1))) if number == 0 else page()

    async with open_test_server(ssl_context=server_context, handshake_delay=0.6 * delay) as server:
        server.fallback(answer)
        crawler = await crawl(
            engine, server.url(), delay=delay, max_per_host=2, max_tasks=4, adapt=False, **options
        )
    assert sorted(record.url for record in crawler.done) == sorted(
        [server.url(), *(server.url(f"/p{n}") for n in range(1, PAGES + 1))]
    )
    assert all(record.status == 200 for record in crawler.done)

    assert server.connections >= 2  # the scenario happened: a page went on a new connection
    gaps = [later - earlier for earlier, later in pairwise(server.arrivals)]
    # Exact on the virtual clock; on the real one a server task may read a request a few
    # milliseconds late, which can make the next gap look that much shorter.
    slack = 1e-6 if engine.virtual_time else 0.02
    assert min(gaps) >= delay - slack, list(zip(server.requests[1:], gaps, strict=True))


@pytest.mark.real_time  # the kernel's receive times are real ones
@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
async def test_an_answer_read_late_takes_nothing_from_the_next_gap(
    engine: Engine, store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """With one request at a time, a host's delay runs from its last answer's end. The
    crawler's loop is kept busy (0.4 s, a process reading hundreds of other hosts' pages)
    from just before the end of the root's answer reaches the machine: on Trio on Linux
    the kernel's receive time says when it came, and the next request goes the delay after
    that; elsewhere (asyncio, httpx's own transport), the delay after the late read. Never
    sooner than the delay, as the server sees it (a server in a thread, which the blocked
    loop does not stop)."""
    delay, busy = 0.5, 0.4
    options = store_options(store, tmp_path, request, f"late-read-{engine.name}")

    def root(server: ThreadServer, connection: socket.socket) -> None:
        whole = response(b'<a href="/next">next</a>' + b" " * 5000)
        server.hold(connection, whole[:100], whole[100:])

    def following(server: ThreadServer, connection: socket.socket) -> None:
        connection.sendall(response(b"<p>last</p>"))

    async def keep_the_loop_busy(server: ThreadServer) -> None:
        await anyio.to_thread.run_sync(server.held.wait, HANG_LIMIT)
        server.release()  # the rest arrives while the loop cannot read it
        busy_for(busy)

    with thread_server({"/": root, "/next": following}) as server:
        async with anyio.create_task_group() as beside:
            beside.start_soon(keep_the_loop_busy, server)
            crawler = await crawl(
                engine,
                server.url(),
                delay=delay,
                max_per_host=1,
                max_tasks=2,
                adapt=False,
                **options,
            )
    assert sorted(record.url for record in crawler.done) == [server.url(), server.url("/next")]
    times = {target: at for at, target in server.arrivals}
    assert [target for _, target in server.arrivals] == ["/robots.txt", "/", "/next"]
    gap = times["/next"] - times["/"]
    assert gap >= delay - 0.02  # the server's view: never sooner
    if engine.backend == "trio" and RECEIVE_STAMP is not None and choose_transport() == "lean":
        assert gap < delay + busy - 0.15, gap  # timed from the arrival, not the read
    else:
        assert gap >= delay + busy - 0.02, gap  # timed from the read


@pytest.mark.usefixtures("trusting_crawler")
async def test_a_request_that_never_went_holds_its_host_only_until_its_attempt_ends(
    engine: Engine, server_context: ssl.SSLContext
) -> None:
    """Every handshake outlasts the attempt's timeout: no request is ever written, so
    none starts its host's delay, and each attempt's end lets the next URL go (a held
    host would stop the crawl there for good)."""
    if choose_transport() == "httpx":
        pytest.skip(
            "httpcore closes a connection whose TLS handshake fails, not one cancelled in"
            " it: the socket is left to the garbage collector (a ResourceWarning)"
        )
    timeout = engine.seconds(1.0)
    async with open_test_server(
        {"/": page("/a", "/b"), "/a": page(), "/b": page()},
        ssl_context=server_context,
        handshake_delay=3 * timeout,
    ) as slow:
        roots = [slow.url(), slow.url("/a"), slow.url("/b")]
        crawler = await crawl(
            engine,
            roots,
            delay=timeout / 2,
            max_per_host=2,
            timeout=timeout,
            max_tries=2,
            obey_robots=False,
        )
    records = {record.url: record for record in crawler.done}
    assert sorted(records) == sorted(roots)
    for record in records.values():
        assert record.status is None
        assert record.exception is not None
        assert record.exception.startswith("TimeoutError"), record.exception
    assert slow.requests == []


@pytest.mark.usefixtures("trusting_crawler")
@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
async def test_a_request_whose_origin_is_told_to_wait_while_it_connects_waits_too(
    engine: Engine,
    store: str,
    server_context: ssl.SSLContext,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Two pages go out at once: one on the connection robots.txt and the root page used,
    the other on a new connection whose handshake is slow. The first is answered 503 with
    a ``Retry-After`` while the second's connection is still being made. Asked again as
    its head is about to be written, the second request is withdrawn, and reaches the
    server only once the wait is over; checked before the connection alone, it went
    inside the wait, as soon as its handshake ended."""
    if choose_transport() == "httpx":
        pytest.skip(
            "httpx's own transport keeps a pool per worker: whether a page goes on a new"
            " connection depends on which worker takes it (the withdrawal itself is tested"
            " on both transports below)"
        )
    # On the virtual clock any wait is exact; on the real one, the shortest Retry-After.
    wait = 5 if engine.virtual_time else 1
    options = store_options(store, tmp_path, request, f"withdrawn-{engine.name}")
    pushed_back: list[str] = []

    async def answer(request: Request) -> Reply:
        if request.target == "/robots.txt":
            return Reply(status=404, body=b"")
        if request.target == "/":
            return page("/p1", "/p2")
        if not pushed_back:
            pushed_back.append(request.target)
            # Answered once the other page is on its way (on a shared frontier its lease
            # comes from Redis after this one's), and well before its handshake ends.
            await anyio.sleep(0.1 * wait)
            return Reply(status=503, headers=(("retry-after", str(wait)),))
        return page()

    async with open_test_server(ssl_context=server_context, handshake_delay=0.3 * wait) as server:
        server.fallback(answer)
        crawler = await crawl(
            engine, server.url(), delay=0, max_per_host=2, max_tasks=4, adapt=False, **options
        )
    assert sorted(record.url for record in crawler.done) == sorted(
        [server.url(), server.url("/p1"), server.url("/p2")]
    )
    assert all(record.status == 200 for record in crawler.done)
    assert server.connections >= 2  # a page's request had a connection of its own to make
    told = server.requests.index(pushed_back[0])
    since_the_wait = [later - server.arrivals[told] for later in server.arrivals[told + 1 :]]
    # The wait runs from the 503's end as the crawler read it, after its arrival here.
    slack = 1e-6 if engine.virtual_time else 0.02
    assert since_the_wait, server.requests
    assert min(since_the_wait) >= wait - slack, list(
        zip(server.requests[told + 1 :], since_the_wait, strict=True)
    )


# -- the event, from each transport --------------------------------------------------------


@pytest.mark.parametrize("transport", ["lean", "httpx"])
async def test_the_written_head_is_reported_once_before_the_answer_is_read(
    transport: str,
) -> None:
    """Both transports, ours and httpx's own (``TRIO_CRAWLER_TRANSPORT=httpx``), send the
    event ``http11.send_request_headers.complete`` once per request, after the connection
    is made and before the answer is read."""
    events: list[str] = []

    async def answer(request: Request) -> Reply:
        events.append("arrived")
        return Reply.html("page")

    async def on_sent() -> None:
        events.append("sent")

    async with open_test_server({"/": answer}) as server:
        client = open_client(library=choose_http_library(), max_connections=1, transport=transport)
        try:
            with anyio.fail_after(HANG_LIMIT):
                for _ in range(2):  # a new connection, then the same one again
                    outcome = await fetch(client, server.url(), on_sent=on_sent)
                    assert isinstance(outcome, Response)
                    events.append("answered")
        finally:
            await client.aclose()
    assert server.connections == 1
    # "sent" comes after the request was written: the server may read it first, or not.
    assert sorted(events[:2]) == ["arrived", "sent"]
    assert events[2] == "answered"
    assert sorted(events[3:5]) == ["arrived", "sent"]
    assert events[5] == "answered"
    assert len(events) == 6, events


@pytest.mark.parametrize("transport", ["lean", "httpx"])
async def test_a_request_withdrawn_as_its_head_is_about_to_go_sends_nothing(
    transport: str,
) -> None:
    """``may_send`` is asked once the connection is made, before the request's head is
    written, on both transports: a False withdraws the request, the server gets nothing of
    it, ``on_sent`` is not awaited, and the client goes on to the next request. Ours keeps
    the withdrawn request's connection for the next one; httpcore closes it."""
    calls: list[str] = []

    async def on_sent() -> None:
        calls.append("sent")

    answers = iter([False, True])

    def may_send() -> bool:
        calls.append("asked")
        return next(answers)

    async with open_test_server({"/": page()}) as server:
        client = open_client(library=choose_http_library(), max_connections=1, transport=transport)
        try:
            with anyio.fail_after(HANG_LIMIT):
                withdrawn = await fetch(client, server.url(), on_sent=on_sent, may_send=may_send)
                answered = await fetch(client, server.url(), on_sent=on_sent, may_send=may_send)
        finally:
            await client.aclose()
    assert isinstance(withdrawn, FetchError)
    assert withdrawn.withdrawn
    assert withdrawn.retryable
    assert isinstance(answered, Response)
    assert answered.status == 200
    assert not getattr(answered, "withdrawn", False)
    assert server.requests == ["/"]  # the answered one alone
    # The withdrawn request's connection had been made: nothing was written on it, so
    # ours sends the next request on it, where httpcore closed it and made another.
    assert server.connections == (1 if transport == "lean" else 2)
    assert calls == ["asked", "asked", "sent"]


@pytest.mark.parametrize("transport", ["lean", "httpx"])
async def test_a_request_that_never_went_reports_nothing(transport: str) -> None:
    calls: list[str] = []

    async def on_sent() -> None:
        calls.append("sent")

    async with open_test_server() as server:
        port = server.port  # closed now: nothing listens there
    client = open_client(library=choose_http_library(), max_connections=1, transport=transport)
    try:
        with anyio.fail_after(HANG_LIMIT):
            outcome = await fetch(client, f"http://127.0.0.1:{port}/", on_sent=on_sent)
    finally:
        await client.aclose()
    assert isinstance(outcome, FetchError)
    assert outcome.error.startswith("ConnectError")
    assert calls == []


async def test_a_callers_client_is_trusted_to_report_once_it_has(engine: Engine) -> None:
    """A caller's ``AsyncClient`` on httpx's own transport reports its writes; a test's
    ``MockTransport`` never does, and its crawl times each delay from the attempt's start,
    as before."""
    async with (
        open_test_server({"/": Reply.html("page")}) as server,
        httpx.AsyncClient() as client,
    ):
        crawler = engine.crawler([server.url()], client=client, obey_robots=False)
        assert not crawler._fetcher.reports_sending
        with anyio.fail_after(HANG_LIMIT):
            await crawler.crawl()
        assert crawler._fetcher.reports_sending

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, html="page")

    async with httpx.AsyncClient(transport=streaming_transport(handler)) as mock:
        crawler = engine.crawler(["http://example.com/"], client=mock, obey_robots=False)
        with anyio.fail_after(HANG_LIMIT):
            await crawler.crawl()
        assert not crawler._fetcher.reports_sending
    assert [record.status for record in crawler.done] == [200]


async def test_of_the_trace_events_only_a_written_head_counts() -> None:
    """HTTP/1.1's and (a caller's client may speak it) HTTP/2's; not the connection's, not
    the head's start, not the body's, and not a proxy tunnel's CONNECT."""
    heard: list[str] = []

    async def on_sent() -> None:
        heard.append("sent")

    connect = httpcore.Request(b"CONNECT", "http://proxy.test:3128/")
    get = httpcore.Request(b"GET", "https://site.test/")
    trace = _SentTrace(on_sent)
    for event, info in (
        ("connection.connect_tcp.complete", {}),
        ("http11.send_request_headers.started", {"request": connect}),
        ("http11.send_request_headers.complete", {"return_value": None}),
        ("connection.start_tls.complete", {}),
        ("http11.send_request_headers.started", {"request": get}),
        ("http11.send_request_headers.complete", {"return_value": None}),
        ("http11.send_request_body.complete", {}),
        ("http11.receive_response_headers.complete", {}),
    ):
        await trace(event, info)
    assert heard == ["sent"]
    await _SentTrace(on_sent)("http2.send_request_headers.complete", {})
    assert heard == ["sent", "sent"]


@asynccontextmanager
async def open_tunnel_proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """An HTTPS proxy on 127.0.0.1: it answers each ``CONNECT host:port`` by connecting
    there and passing bytes both ways. Yields its URL and the CONNECT lines it read."""
    connects: list[str] = []

    async def pipe(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for data in source:
                await sink.send(data)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await sink.send_eof()  # type: ignore[attr-defined]

    async def serve(client: anyio.abc.SocketStream) -> None:
        async with client:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await client.receive()
            line = head.split(b"\r\n", 1)[0].decode("ascii")
            connects.append(line)
            host, port = line.split()[1].rsplit(":", 1)
            async with await anyio.connect_tcp(host, int(port)) as upstream:
                await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
                async with anyio.create_task_group() as pipes:
                    pipes.start_soon(pipe, client, upstream)
                    pipes.start_soon(pipe, upstream, client)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as task_group:
        task_group.start_soon(listener.serve, serve, task_group)
        yield f"http://127.0.0.1:{port}", connects
        task_group.cancel_scope.cancel()


@pytest.mark.usefixtures("trusting_crawler")
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_through_a_proxy_tunnel_the_request_not_the_connect_starts_the_clock(
    server_context: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a proxy in the environment the crawler's clients are httpx's own, which send
    the tunnel's CONNECT with the request's ``trace``: the one report comes once the
    request itself is written, after the site's slow handshake through the tunnel."""
    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    handshake = 0.3
    sent: list[float] = []

    async def on_sent() -> None:
        sent.append(anyio.current_time())

    async with (
        open_test_server(
            {"/": Reply.html("page")}, ssl_context=server_context, handshake_delay=handshake
        ) as site,
        open_tunnel_proxy() as (proxy, connects),
    ):
        monkeypatch.setenv("HTTPS_PROXY", proxy)
        client = open_client(library=choose_http_library(), max_connections=1)
        try:
            with anyio.fail_after(HANG_LIMIT):
                began = anyio.current_time()
                outcome = await fetch(client, site.url(), on_sent=on_sent)
        finally:
            await client.aclose()
    assert isinstance(outcome, Response), outcome
    assert outcome.status == 200
    assert connects == [f"CONNECT 127.0.0.1:{site.port} HTTP/1.1"]
    assert len(sent) == 1
    assert sent[0] - began >= handshake
    assert sent[0] <= site.arrivals[0] + 0.05  # not long after the site read it

"""The crawler's own transport (``_transport.py``): keep-alive, what it refuses to reuse,
and arbitrary bytes from a server.

The behaviour tests of the rest of the suite (hostile servers, TLS, random cancellations,
every engine) run through this transport, the default; CI runs the HTTP-facing ones again
with ``TRIO_CRAWLER_TRANSPORT=httpx``. Here is what only this transport promises.

The fuzz test sends seeded random bytes (some of them a valid response cut or spliced with
junk) and checks that ``fetch()`` always comes back, within its bound, with a Response or
a FetchError, and that no socket is left open: the process's open file descriptors are
counted before and after. ``TRANSPORT_FUZZ_SEED`` and ``TRANSPORT_FUZZ_COUNT`` choose
other and more rounds.
"""

from __future__ import annotations

import base64
import os
import random
import socket
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import pytest
from thread_server import ThreadServer, busy_for, response, thread_server

from trio_crawler._clients import (
    DEFAULT_USER_AGENT,
    TransportClient,
    choose_http_library,
    open_client,
)
from trio_crawler._connections import RECEIVE_STAMP, CrawlConnections
from trio_crawler._events import FetchError, Response
from trio_crawler._fetch import fetch
from trio_crawler._options import ConfigError
from trio_crawler._transport import (
    HEAD_STARTED,
    Unanswered,
    _Connection,
    choose_transport,
    lean_transport_class,
)

from hostile_server import RawRequest, open_hostile_server, page, reset, send_and_close
from httpserver import Reply, Request, open_test_server
from support import HANG_LIMIT, open_descriptors

if TYPE_CHECKING:
    from trio_crawler._clients import Client

pytestmark = pytest.mark.anyio

SEED = int(os.environ.get("TRANSPORT_FUZZ_SEED", "31337"))
COUNT = int(os.environ.get("TRANSPORT_FUZZ_COUNT", "150"))


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def lean_client() -> Client:
    return open_client(library=choose_http_library(), max_connections=1, transport="lean")


async def test_one_connection_carries_every_request_to_an_origin() -> None:
    async with (
        open_test_server({"/": Reply.html("x" * 100_000)}) as server,
        lean_client() as client,
    ):
        with anyio.fail_after(HANG_LIMIT):
            for _ in range(5):
                outcome = await fetch(client, server.url("/"))
                assert isinstance(outcome, Response)
                assert outcome.body == b"x" * 100_000
    assert server.connections == 1


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async with open_hostile_server() as server, lean_client() as client:
        server.routes["/close"] = page(keep_alive=False)
        server.routes["/next"] = page()
        with anyio.fail_after(HANG_LIMIT):
            first = await fetch(client, server.url("/close"))
            assert isinstance(first, Response)
            second = await fetch(client, server.url("/next"))
    assert isinstance(second, Response), second
    assert server.hits["/next"] == 1  # not sent on the dead connection first


async def test_an_unread_body_closes_its_connection() -> None:
    async with (
        open_test_server({"/": Reply.html("y" * 500_000)}) as server,
        lean_client() as client,
    ):
        with anyio.fail_after(HANG_LIMIT):
            too_large = await fetch(client, server.url("/"), max_size=1000)
            assert isinstance(too_large, FetchError)
            again = await fetch(client, server.url("/"))
    assert isinstance(again, Response)
    assert server.connections == 2  # the cut-off body's connection was not reused


async def test_a_connection_closed_in_a_cancelled_scope_is_closed_at_once() -> None:
    """A plain connection is closed with its stream's own aclose(), not forcefully: the
    peer still sees it end, even when the closing task's scope is already cancelled (a
    worker's client closed as a crawl is cut short), and the close neither raises nor waits.
    """
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        with anyio.fail_after(HANG_LIMIT):
            connection = _Connection(await anyio.connect_tcp("127.0.0.1", port))
            peer = await listener.listeners[0].accept()
            with anyio.CancelScope() as scope:
                scope.cancel()
                with anyio.CancelScope(shield=True):  # as the transport's _close() does
                    await connection.close()
            assert not scope.cancelled_caught  # nothing inside it raised Cancelled
            with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                await peer.receive()  # the peer sees the end, not a connection left open
            await peer.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await connection.stream.send(b"GET / HTTP/1.1\r\n\r\n")


async def test_a_request_cancelled_as_its_head_is_about_to_go_closes_its_connection() -> None:
    """A withdrawal there keeps the connection, nothing having been written on it
    (``test_sent_clock.py``); a cancellation there is the end of the attempt, as anywhere
    else: the connection is closed, not kept idle, and the next request makes another."""
    library = choose_http_library()
    connections = CrawlConnections(idle_limit=None)
    transport = lean_transport_class(library)(ssl.create_default_context, connections)

    async def stall(event: str, info: object) -> None:
        if event == HEAD_STARTED:
            await anyio.sleep_forever()

    async with open_test_server({"/": Reply.html("page")}) as server:
        try:
            with anyio.fail_after(HANG_LIMIT):
                with anyio.move_on_after(0.05) as scope:
                    request = library.Request("GET", server.url(), extensions={"trace": stall})
                    await transport.handle_async_request(request)
                assert scope.cancelled_caught
                assert len(connections.idle) == 0
                again = library.Request("GET", server.url())
                response = await transport.handle_async_request(again)
                await response.aread()
        finally:
            await transport.aclose()
    assert response.status_code == 200
    assert server.requests == ["/"]
    assert server.connections == 2


async def block_loop_when_held(server: ThreadServer, seconds: float) -> None:
    """Once the server has sent the first part of its answer, keep the event loop from
    running for ``seconds`` (a process busy with other pages), letting the rest go."""
    await anyio.to_thread.run_sync(server.held.wait, HANG_LIMIT)
    server.release()  # the rest reaches the machine while the loop cannot read it
    busy_for(seconds)


def split_page(server: ThreadServer, connection: socket.socket) -> None:
    whole = response(b"<p>" + b"x" * 5000 + b"</p>")
    server.hold(connection, whole[:200], whole[200:])


async def test_an_answer_read_late_says_when_it_arrived(anyio_backend: str) -> None:
    """On Trio on Linux the transport reads with the kernel's receive times, and a
    response says when its last bytes reached the machine, however late it was read: the
    moment a host's delay runs from (docs/manners.md, "When the delay's clock starts").
    Elsewhere (asyncio does its own reading) it says nothing, and the read's time counts."""
    with thread_server({"/": split_page}) as server:
        async with lean_client() as client, anyio.create_task_group() as busy:
            busy.start_soon(block_loop_when_held, server, 0.3)
            with anyio.fail_after(HANG_LIMIT):
                before = anyio.current_time()
                outcome = await fetch(client, server.url("/"))
                read = anyio.current_time()
    assert isinstance(outcome, Response)
    assert outcome.body == b"<p>" + b"x" * 5000 + b"</p>"
    if anyio_backend == "trio" and RECEIVE_STAMP is not None:
        assert outcome.arrived is not None
        # It came right after the release, before the loop's 0.3 s away; read after.
        assert before <= outcome.arrived <= read - 0.2, (before, outcome.arrived, read)
    else:
        assert outcome.arrived is None


async def test_a_request_cut_short_unanswered_leaves_its_connection_to_the_server() -> None:
    """Cancelled once its request was written and before any byte of an answer, an attempt
    leaves its connection open in its Unanswered: the server is still working on the
    request, and the connection is how the crawler learns when it is done. ``wait()``
    returns when the late answer comes; ``aclose()`` closes the connection, which is never
    reused (the next request makes another)."""
    arrived, answer = anyio.Event(), anyio.Event()

    async def late(request: Request) -> Reply:
        arrived.set()
        await answer.wait()
        return Reply.html("late")

    routes = {"/late": late, "/": Reply.html("page")}
    async with open_test_server(routes) as server, lean_client() as client:
        unanswered = Unanswered()
        with anyio.fail_after(HANG_LIMIT):
            with anyio.move_on_after(0.2) as bound:
                await fetch(client, server.url("/late"), unanswered=unanswered)
            assert bound.cancelled_caught
            assert unanswered.parked
            assert server.in_flight == 1  # the server still has it
            await arrived.wait()
            async with anyio.create_task_group() as waiting:
                waiting.start_soon(unanswered.wait)
                await anyio.wait_all_tasks_blocked()
                answer.set()  # wait() returns on the answer's first byte
            await unanswered.aclose()
            assert not unanswered.parked
            assert isinstance(await fetch(client, server.url("/")), Response)
    assert server.connections == 2
    assert server.requests == ["/late", "/"]


async def test_an_unanswered_connection_ends_its_wait_when_the_server_closes_it() -> None:
    async def close_later(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
        await anyio.sleep(0.3)
        await reset(stream)
        return False

    async def close_later_quietly(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
        await anyio.sleep(0.3)
        return False  # the server closes the connection without a word

    before = open_descriptors()
    routes = {"/reset": close_later, "/close": close_later_quietly}
    async with open_hostile_server(routes) as server, lean_client() as client:
        for target in routes:
            unanswered = Unanswered()
            with anyio.fail_after(HANG_LIMIT):
                with anyio.move_on_after(0.1):
                    await fetch(client, server.url(target), unanswered=unanswered)
                assert unanswered.parked, target
                await unanswered.wait()
                await unanswered.aclose()
    assert open_descriptors() == before


async def test_a_request_cut_short_unsent_or_answered_closes_its_connection() -> None:
    """Nothing to wait for: a request cancelled before its head was written never reached
    the server, and one whose answer has begun is being answered. Both close at once, as
    any cancellation did."""

    async def stall(event: str, info: object) -> None:
        if event == HEAD_STARTED:
            await anyio.sleep_forever()

    async def half(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nabc")
        await anyio.sleep_forever()
        return False  # pragma: no cover

    library = choose_http_library()
    connections = CrawlConnections(idle_limit=None)
    transport = lean_transport_class(library)(ssl.create_default_context, connections)
    before = open_descriptors()
    async with open_hostile_server({"/half": half}) as server:
        try:
            unsent, answered = Unanswered(), Unanswered()
            with anyio.fail_after(HANG_LIMIT):
                with anyio.move_on_after(0.1):
                    extensions = {"trace": stall, "trio_crawler.unanswered": unsent}
                    request = library.Request("GET", server.url("/"), extensions=extensions)
                    await transport.handle_async_request(request)
            async with lean_client() as client:
                with anyio.fail_after(HANG_LIMIT), anyio.move_on_after(0.2):
                    await fetch(client, server.url("/half"), unanswered=answered)
        finally:
            await transport.aclose()
    assert not unsent.parked
    assert not answered.parked
    assert open_descriptors() == before


@pytest.mark.parametrize("transport", ["lean", "httpx"])
async def test_both_transports_send_the_same_request_and_no_cookie(transport: str) -> None:
    """Whichever transport carries them, the crawler's clients send the same header lines
    (credentials in a URL as Basic auth, as httpx sends them), and never a cookie: what a
    server sees must not depend on which worker's client fetched a URL before."""
    seen: list[dict[str, str]] = []

    async def record(request: Request) -> Reply:
        seen.append(dict(request.headers))
        return Reply(headers=[("set-cookie", "session=1; Path=/")], body=b"ok")

    async with open_test_server() as server:
        server.fallback(record)
        library = choose_http_library()
        async with open_client(library=library, max_connections=1, transport=transport) as client:
            assert isinstance(client, TransportClient) == (transport == "lean")
            with anyio.fail_after(HANG_LIMIT):
                for path in ("/a", "/b"):
                    assert isinstance(await fetch(client, server.url(path)), Response)
                credentials = server.url("/c").replace("://", "://us%20er:p%40ss@")
                assert isinstance(await fetch(client, credentials), Response)
    host = server.url("/").split("/")[2]
    expected = {
        "host": host,
        "user-agent": DEFAULT_USER_AGENT,
        "accept": "*/*",
        "accept-encoding": "gzip, deflate",
    }
    assert {name: seen[0][name] for name in expected} == expected
    assert set(seen[0]) <= {*expected, "connection"}, seen[0]
    assert "cookie" not in seen[1], "a cookie the server set was sent back"
    assert seen[2]["authorization"] == "Basic " + base64.b64encode(b"us er:p@ss").decode()


def test_an_unknown_transport_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIO_CRAWLER_TRANSPORT", "carrier-pigeon")
    with pytest.raises(ConfigError, match="TRIO_CRAWLER_TRANSPORT must be one of lean, httpx"):
        choose_transport()
    monkeypatch.setenv("TRIO_CRAWLER_TRANSPORT", "HTTPX")
    assert choose_transport() == "httpx"


# --- arbitrary bytes -------------------------------------------------------------------------

VALID = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 12\r\n\r\n<p>hello</p>",
    b"HTTP/1.1 301 Moved\r\nlocation: /x\r\ncontent-length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.0 404 Not Found\r\n\r\ngone",
)


def junk(rng: random.Random) -> bytes:
    """A response, cut, spliced, flipped or replaced by noise."""
    base = rng.choice(VALID)
    shape = rng.randrange(5)
    if shape == 0:
        return base[: rng.randrange(len(base))]
    if shape == 1:
        at = rng.randrange(len(base))
        return base[:at] + rng.randbytes(rng.randrange(1, 40)) + base[at:]
    if shape == 2:
        data = bytearray(base)
        for _ in range(rng.randrange(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if shape == 3:
        return rng.randbytes(rng.randrange(0, 300))
    return base


async def test_arbitrary_bytes_never_crash_hang_or_leak(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    replies = [junk(rng) for _ in range(COUNT)]
    before = open_descriptors()
    outcomes: dict[str, int] = {}
    async with open_hostile_server() as server:
        for number, data in enumerate(replies):
            server.routes[f"/{number}"] = send_and_close(data)
        async with lean_client() as client:
            for number, data in enumerate(replies):
                with anyio.fail_after(HANG_LIMIT):
                    with anyio.move_on_after(2) as bound:
                        outcome = await fetch(client, server.url(f"/{number}"))
                assert not bound.cancelled_caught, f"seed {SEED}, reply {number}: {data!r}"
                assert isinstance(outcome, Response | FetchError), (number, data, outcome)
                kind = type(outcome).__name__
                outcomes[kind] = outcomes.get(kind, 0) + 1
    assert outcomes.get("Response", 0) > 0
    assert outcomes.get("FetchError", 0) > 0
    assert open_descriptors() == before, "a socket was left open"


async def test_replies_that_never_end_are_cut_by_the_callers_bound() -> None:
    async def stall(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nabc")
        await anyio.sleep_forever()
        return False  # pragma: no cover

    before = open_descriptors()
    async with open_hostile_server({"/": stall}) as server, lean_client() as client:
        with anyio.fail_after(HANG_LIMIT):
            with anyio.move_on_after(0.2) as bound:
                await fetch(client, server.url("/"))
        assert bound.cancelled_caught
    assert open_descriptors() == before

"""Self-tests for the test server: it must be right before it can judge the crawler.

Each test talks to the server over a real socket with httpx. Trio tests run under
pytest-trio; those using the ``virtual_clock`` fixture (conftest.py) run on virtual time,
so a handler's ``anyio.sleep(5)`` takes no real time and the tests can assert exact
durations.
"""

from __future__ import annotations

import anyio
import httpx
import pytest
import trio
import trio.testing

from httpserver import DropConnection, Reply, Request, open_test_server
from support import HANG_LIMIT


def open_client(**options: object) -> httpx.AsyncClient:
    # trust_env=False: a proxy configured in the environment must not reroute 127.0.0.1.
    return httpx.AsyncClient(trust_env=False, **options)  # type: ignore[arg-type]


@pytest.mark.trio
async def test_routes_answer_and_unknown_targets_get_404() -> None:
    with trio.fail_after(HANG_LIMIT):
        async with (
            open_test_server({"/": Reply.html("<p>home</p>")}) as server,
            open_client() as client,
        ):
            home = await client.get(server.url("/"))
            missing = await client.get(server.url("/missing?x=1"))
            head = await client.head(server.url("/"))

    assert (home.status_code, home.text) == (200, "<p>home</p>")
    assert home.headers["content-type"] == "text/html; charset=utf-8"
    assert (missing.status_code, missing.text) == (404, "not found")
    assert (head.status_code, head.headers["content-length"], head.content) == (200, "11", b"")
    assert server.requests == ["/", "/missing?x=1", "/"]
    assert server.hits == {"/": 2, "/missing?x=1": 1}
    assert (server.in_flight, server.max_in_flight) == (0, 1)


@pytest.mark.trio
async def test_keep_alive_serves_many_requests_on_one_connection() -> None:
    routes = {"/a": Reply.html("a"), "/b": Reply.html("b")}
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server, open_client() as client:
            for target in ["/a", "/b", "/a"]:
                assert (await client.get(server.url(target))).status_code == 200

    assert server.requests == ["/a", "/b", "/a"]
    assert server.connections == 1


@pytest.mark.trio
async def test_connection_close_from_the_client_is_honoured() -> None:
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": Reply.html("x")}) as server, open_client() as client:
            for _ in range(2):
                response = await client.get(server.url(), headers={"connection": "close"})
                assert response.headers["connection"] == "close"

    assert server.connections == 2


# Alike by design: each server behaviour is checked with the same guard-and-client steps.
@pytest.mark.trio
async def test_drop_first_hangs_up_without_a_response_then_answers() -> None:
    with trio.fail_after(HANG_LIMIT):
        async with (
            open_test_server({"/flaky": Reply.html("ok")}) as server,
            open_client() as client,
        ):
            server.drop_first("/flaky", 2)
            for _ in range(2):
                with pytest.raises(httpx.RemoteProtocolError, match="without sending"):
                    await client.get(server.url("/flaky"))
            response = await client.get(server.url("/flaky"))

    assert (response.status_code, response.text) == (200, "ok")
    assert server.hits["/flaky"] == 3  # dropped requests are counted too
    assert server.connections == 3
    assert server.in_flight == 0


@pytest.mark.trio
async def test_async_handler_sees_the_request_and_may_be_slow(
    virtual_clock: trio.testing.MockClock,
) -> None:
    seen: list[Request] = []

    async def slow_echo(request: Request) -> Reply:
        seen.append(request)
        await anyio.sleep(4)
        return Reply(status=201, headers=(("x-method", request.method),), body=b"made")

    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/make?id=7": slow_echo}) as server, open_client() as client:
            start = trio.current_time()
            response = await client.post(server.url("/make?id=7"), content=b"payload")
            elapsed = trio.current_time() - start

    assert elapsed == 4  # virtual seconds: the handler's sleep, and nothing else
    assert (response.status_code, response.headers["x-method"], response.content) == (
        201,
        "POST",
        b"made",
    )
    [request] = seen
    assert (request.method, request.target) == ("POST", "/make?id=7")
    assert request.headers["content-length"] == "7"
    assert request.headers["host"] == f"127.0.0.1:{server.port}"


@pytest.mark.trio
async def test_redirect_and_fallback_replies() -> None:
    async def generated_site(request: Request) -> Reply:
        if request.target == "/broken":
            raise DropConnection
        return Reply.html(f"page {request.target}", charset=None)

    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/old": Reply.redirect("/new", status=301)}) as server:
            server.fallback(generated_site)
            async with open_client(follow_redirects=True) as client:
                response = await client.get(server.url("/old"))
                with pytest.raises(httpx.RemoteProtocolError):
                    await client.get(server.url("/broken"))

    assert [(r.status_code, r.headers["location"]) for r in response.history] == [(301, "/new")]
    assert (response.status_code, response.text) == (200, "page /new")
    assert response.headers["content-type"] == "text/html"
    assert server.requests == ["/old", "/new", "/broken"]


@pytest.mark.trio
async def test_in_flight_counts_concurrent_requests_on_virtual_time(
    virtual_clock: trio.testing.MockClock,
) -> None:
    async def slow(request: Request) -> Reply:
        await anyio.sleep(10)
        return Reply.html("slow")

    statuses: list[int] = []

    async def fetch(client: httpx.AsyncClient, url: str) -> None:
        statuses.append((await client.get(url)).status_code)

    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.fallback(slow)
            # httpx's default 5 s timeout is virtual time too: a 10 s handler needs more.
            async with open_client(timeout=60) as client, trio.open_nursery() as nursery:
                start = trio.current_time()
                for page in range(5):
                    nursery.start_soon(fetch, client, server.url(f"/{page}"))
                await trio.sleep(5)
                assert server.in_flight == 5
            elapsed = trio.current_time() - start

    assert elapsed == 10  # all five were served at once
    assert statuses == [200] * 5
    assert (server.in_flight, server.max_in_flight, server.connections) == (0, 5, 5)


@pytest.mark.trio
async def test_exit_cancels_a_handler_that_never_answers(
    virtual_clock: trio.testing.MockClock,
) -> None:
    async def never(request: Request) -> Reply:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/hang": never}) as server, open_client(timeout=3) as client:
            start = trio.current_time()
            with pytest.raises(httpx.ReadTimeout):
                await client.get(server.url("/hang"))
            assert trio.current_time() - start == 3  # httpx's own read timeout, virtually
            assert server.in_flight == 1  # still waiting; leaving the block cancels it


@pytest.mark.trio
async def test_an_error_in_the_body_propagates_unwrapped() -> None:
    with trio.fail_after(HANG_LIMIT), pytest.raises(KeyError, match="oops"):
        async with open_test_server():
            raise KeyError("oops")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_same_server_runs_on_asyncio() -> None:
    routes = {"/": Reply.html("home"), "/flaky": Reply.html("ok")}
    with anyio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server, open_client() as client:
            server.drop_first("/flaky", 1)
            assert (await client.get(server.url("/"))).text == "home"
            assert (await client.get(server.url("/nowhere"))).status_code == 404
            with pytest.raises(httpx.RemoteProtocolError):
                await client.get(server.url("/flaky"))
            assert (await client.get(server.url("/flaky"))).text == "ok"

    assert server.requests == ["/", "/nowhere", "/flaky", "/flaky"]
    assert server.connections == 2  # keep-alive until the dropped request

"""fetch() and open_client() on their own, through a mock transport of each installed library.

Fast unit tests of the boundary with httpx: which exceptions are worth a retry (the table
in ``_fetch.py``'s docstring), what a response's headers become, and the robots.txt limit.
The crawl-level behaviour of the same (records, retries, a real server) is tested in
test_hostile.py and test_manners.py. Every mock response reaches fetch() unread, as a
server's does (see mock_http.py).
"""

from __future__ import annotations

import email.utils
import functools
import gzip
import sys
import time
from types import ModuleType, SimpleNamespace

import httpx
import pytest
import trio

from trio_crawler import Crawler
from trio_crawler._clients import (
    ACCEPT_ENCODING,
    DEFAULT_USER_AGENT,
    choose_http_library,
    imported_http_libraries,
    installed_http_libraries,
    open_client,
)
from trio_crawler._events import FetchError, Outcome, Response
from trio_crawler._fetch import ROBOTS_MAX_SIZE, fetch
from trio_crawler._options import ConfigError
from trio_crawler._robots import PRODUCT_TOKEN

from mock_http import Handler, streamed, streaming_transport

pytestmark = pytest.mark.anyio

URL = "http://example.com/page"


@pytest.fixture(params=[library.__name__ for library in installed_http_libraries()])
def library(request: pytest.FixtureRequest) -> ModuleType:
    """Each installed HTTP library in turn: a caller's own client may be of either."""
    [chosen] = [lib for lib in installed_http_libraries() if lib.__name__ == request.param]
    return chosen


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


def mocked(library: ModuleType, handler: Handler) -> ModuleType:
    """``library`` as open_client() uses it, with every client it makes talking to
    ``handler`` instead of the network."""
    transport = streaming_transport(handler, library=library)
    stand_in: ModuleType = SimpleNamespace(
        AsyncClient=functools.partial(library.AsyncClient, transport=transport),
        Timeout=library.Timeout,
        Limits=library.Limits,
    )
    return stand_in


async def fetch_with(
    library: ModuleType, handler: Handler, url: str = URL, **options: object
) -> Outcome:
    """fetch() once through a client made by open_client() for ``library``."""
    # The stand-in's clients carry their mock transport: the crawler's own is not wanted.
    stand_in = mocked(library, handler)
    async with open_client(library=stand_in, max_connections=1, transport="httpx") as client:
        return await fetch(client, url, **options)


# -- choosing the library -------------------------------------------------------------------


def test_the_default_library_is_the_last_installed_and_the_setting_picks_one() -> None:
    installed = installed_http_libraries()
    assert installed[0] is httpx
    assert choose_http_library({}) is installed[-1]
    assert choose_http_library({"TRIO_CRAWLER_HTTP": ""}) is installed[-1]
    for library in installed:
        assert choose_http_library({"TRIO_CRAWLER_HTTP": library.__name__}) is library


def test_the_errors_mapped_are_those_of_the_libraries_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A library not imported has no client to raise its errors; a name a program blocked
    (``sys.modules[name] = None``) is not a library."""
    assert httpx in imported_http_libraries()
    monkeypatch.delitem(sys.modules, "httpx2", raising=False)
    assert imported_http_libraries() == (httpx,)
    monkeypatch.setitem(sys.modules, "httpx2", None)
    assert imported_http_libraries() == (httpx,)


def test_a_library_not_installed_is_a_config_error_naming_the_installed_ones() -> None:
    names = ", ".join(library.__name__ for library in installed_http_libraries())
    with pytest.raises(ConfigError) as raised:
        choose_http_library({"TRIO_CRAWLER_HTTP": "x"})
    assert raised.value.option == "TRIO_CRAWLER_HTTP"
    assert raised.value.problem == f"must name an installed library ({names}), not 'x'"


def test_an_http_library_not_installed_stops_a_crawler_that_makes_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRIO_CRAWLER_HTTP", "urllib3")
    with pytest.raises(ConfigError, match=r"^TRIO_CRAWLER_HTTP must name"):
        Crawler(["http://127.0.0.1/"])
    # Given a client, the crawler makes none, and the setting does not matter.
    client = httpx.AsyncClient()
    Crawler(["http://127.0.0.1/"], client=client)
    trio.run(client.aclose)


def test_the_user_agent_starts_with_the_robots_product_token() -> None:
    assert DEFAULT_USER_AGENT.startswith(f"{PRODUCT_TOKEN}/")


async def test_open_client_sends_our_user_agent_and_the_encodings_we_decode(
    library: ModuleType,
) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return library.Response(200, text="ok")

    outcome = await fetch_with(library, handler)
    assert isinstance(outcome, Response)
    assert outcome.body == b"ok"
    assert sent[0].headers["user-agent"] == DEFAULT_USER_AGENT
    assert sent[0].headers["accept-encoding"] == ACCEPT_ENCODING
    outcome = await fetch_with(library, handler, user_agent="other/1")
    assert sent[1].headers["user-agent"] == "other/1"


# -- the exception table --------------------------------------------------------------------

RETRYABLE = [
    "ConnectTimeout",
    "ReadTimeout",
    "WriteTimeout",
    "PoolTimeout",
    "ConnectError",
    "ReadError",
    "WriteError",
    "CloseError",
    "RemoteProtocolError",
    "ProxyError",
]
NOT_RETRYABLE = ["LocalProtocolError", "UnsupportedProtocol", "DecodingError", "InvalidURL"]


@pytest.mark.parametrize(
    ("name", "retryable"),
    [(name, True) for name in RETRYABLE] + [(name, False) for name in NOT_RETRYABLE],
)
async def test_each_library_exception_is_retryable_or_not_as_the_table_says(
    library: ModuleType, name: str, retryable: bool
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise getattr(library, name)("the message")

    outcome = await fetch_with(library, handler)
    assert outcome == FetchError(error=f"{name}: the message", retryable=retryable)


async def test_an_exception_outside_the_table_escapes(library: ModuleType) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise ZeroDivisionError("a bug")

    with pytest.raises(ZeroDivisionError, match="a bug"):
        await fetch_with(library, handler)


async def test_the_other_librarys_errors_are_mapped_too(library: ModuleType) -> None:
    """A caller's client may be of any installed library, whatever TRIO_CRAWLER_HTTP says."""
    for other in installed_http_libraries():

        def handler(request: httpx.Request, other: ModuleType = other) -> httpx.Response:
            raise other.ReadTimeout("slow")

        outcome = await fetch_with(library, handler)
        assert outcome == FetchError(error="ReadTimeout: slow", retryable=True)


# -- bodies and headers ---------------------------------------------------------------------


async def test_a_body_over_max_size_fails_keeping_status_and_content_type(
    library: ModuleType,
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return streamed(200, b"x" * 11, [("content-type", "text/html")], library=library)

    outcome = await fetch_with(library, handler, max_size=10)
    assert outcome == FetchError(
        error="ResponseTooLarge: body exceeds 10 bytes",
        retryable=False,
        status=200,
        content_type="text/html",
    )
    outcome = await fetch_with(library, handler, max_size=11)
    assert isinstance(outcome, Response)
    assert outcome.body == b"x" * 11


async def test_a_gzip_body_is_decoded_by_us(library: ModuleType) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        headers = [("content-encoding", "gzip")]
        return streamed(200, gzip.compress(b"hello" * 100), headers, library=library)

    outcome = await fetch_with(library, handler, keep_exchange=True)
    assert isinstance(outcome, Response)
    assert outcome.body == b"hello" * 100
    assert outcome.exchange is not None
    assert outcome.exchange.body == gzip.compress(b"hello" * 100)  # as it came


@pytest.mark.parametrize("location", ["http://[::1", "javascript:x", "/next"])
async def test_a_location_httpx_cannot_follow_is_kept_for_the_core(
    library: ModuleType, location: str
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return streamed(302, headers=[("location", location)], library=library)

    outcome = await fetch_with(library, handler, keep_exchange=True)
    assert isinstance(outcome, Response)
    assert (outcome.status, outcome.location) == (302, location)
    assert outcome.exchange is not None
    assert ("location", location) in outcome.exchange.response_headers


def http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 5 ", 5.0),
        ("0", 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date passed: no wait
        ("Wed, 21 Oct 2015 07:28:00", None),  # a date without a zone is no date
        ("soon", None),
        ("-1", None),
        ("1.5", None),
        ("\u0661\u0662".encode(), None),  # Arabic-Indic "12": digits to str.isdigit()
        (b"\xb2", None),  # "²" once httpx reads the byte as latin-1
        ("", None),
    ],
)
async def test_retry_after(library: ModuleType, value: str | bytes, seconds: float | None) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return streamed(503, headers=[("retry-after", value)], library=library)

    outcome = await fetch_with(library, handler)
    assert isinstance(outcome, Response)
    assert outcome.retry_after == seconds


async def test_retry_after_as_a_date_to_come(library: ModuleType) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return streamed(503, headers=[("retry-after", http_date(600))], library=library)

    outcome = await fetch_with(library, handler)
    assert isinstance(outcome, Response)
    assert outcome.retry_after is not None
    assert 590 < outcome.retry_after <= 600  # a date has whole seconds


# -- robots.txt -----------------------------------------------------------------------------


def robots_handler(library: ModuleType, body: bytes, encoding: str | None = None) -> Handler:
    headers = [("content-type", "text/plain")]
    if encoding is not None:
        headers.append(("content-encoding", encoding))

    def handler(request: httpx.Request) -> httpx.Response:
        return streamed(200, body, headers, library=library)

    return handler


async def test_robots_txt_is_read_to_its_own_limit_whatever_max_size_says(
    library: ModuleType,
) -> None:
    body = b"User-agent: *\nDisallow: /private\n"
    outcome = await fetch_with(library, robots_handler(library, body), robots=True, max_size=10)
    assert isinstance(outcome, Response)
    assert outcome.body == body


@pytest.mark.parametrize("encoding", [None, "gzip"])
async def test_a_long_robots_txt_is_cut_at_its_last_whole_line(
    library: ModuleType, encoding: str | None
) -> None:
    line = b"Disallow: /a-path-of-some-length\n"
    whole_lines = ROBOTS_MAX_SIZE // len(line)
    body = line * (whole_lines + 10)
    sent = gzip.compress(body) if encoding == "gzip" else body
    handler = robots_handler(library, sent, encoding)
    outcome = await fetch_with(library, handler, robots=True, keep_exchange=True)
    assert isinstance(outcome, Response)
    assert outcome.status == 200
    assert outcome.body == line * whole_lines
    assert outcome.exchange is not None
    assert (outcome.exchange.robots, outcome.exchange.truncated) == (True, True)


async def test_a_robots_txt_exactly_at_the_limit_is_whole(library: ModuleType) -> None:
    body = b"#" * (ROBOTS_MAX_SIZE - 1) + b"\n"
    handler = robots_handler(library, body + b"no newline after this")
    outcome = await fetch_with(library, handler, robots=True)
    assert isinstance(outcome, Response)
    assert outcome.body == body
    handler = robots_handler(library, body)
    outcome = await fetch_with(library, handler, robots=True, keep_exchange=True)
    assert isinstance(outcome, Response)
    assert outcome.body == body
    assert outcome.exchange is not None
    assert outcome.exchange.truncated is False


async def test_a_long_robots_txt_without_a_line_end_is_empty(library: ModuleType) -> None:
    handler = robots_handler(library, b"x" * (ROBOTS_MAX_SIZE + 1))
    outcome = await fetch_with(library, handler, robots=True)
    assert isinstance(outcome, Response)
    assert outcome.body == b""

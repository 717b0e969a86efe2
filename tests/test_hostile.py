"""Every engine against servers that misbehave: each hostile URL gets one correct record.

The issue's rule: for every hostile behaviour, the crawl ends with a correct record for the
URL, no crash, no hang, and the rest of the crawl unaffected. So almost every test crawls
the same small site (:func:`site`): ``/`` links to the hostile URLs and to ``/ok``, which
links to ``/ok2``. The test then checks each hostile URL's record, that ``/ok`` and ``/ok2``
were crawled as usual (:func:`assert_rest_of_crawl_fine`), and that the crawl finished.
``anyio.fail_after`` turns a hang into a failure.

Where several behaviours expect the same kind of record, a table (path: behaviour) puts
them all in one crawl: that also shows they do not disturb each other, and keeps the file
quick. Such a test compares whole tables, so one failure names every path that went wrong.

The misbehaving server is tests/hostile_server.py, which writes raw bytes because HTTP
libraries refuse to send broken responses. Network errors are retried, up to ``max_tries``
attempts (docs/usage.md, "Limits and failure handling"), so the tests crawl with ``max_tries=2``
and check that the server saw exactly two tries.

Each test runs once per engine (the ``engine`` fixture in conftest.py); on the Trio
backend under Trio's virtual clock, so a server that drips for minutes costs no real time,
and on asyncio with durations scaled down by ``engine.seconds``.
"""

from __future__ import annotations

import functools
import logging
import re
import tracemalloc
from collections.abc import Callable, Mapping
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.abc
import pytest

from trio_crawler import FetchStatistic
from trio_crawler._crawler import CrawlerBase

import support
from conftest import Engine
from hostile_server import (
    Behaviour,
    HostileServer,
    RawRequest,
    closed_port,
    drip_body,
    endless_headers,
    gzip_bomb,
    gzip_bomb_bytes,
    header_flood,
    huge_body,
    open_hostile_server,
    page,
    redirect,
    reset_before_response,
    reset_mid_body,
    response,
    send_and_close,
    short_body,
)
from support import HANG_LIMIT, by_url, untimed

pytestmark = pytest.mark.anyio

HOSTILE = "/hostile"
MIB = 2**20


# robots.txt is not what these tests are about; a network error is tried twice (see above).
crawl = functools.partial(support.crawl, obey_robots=False, max_tries=2)


def site(hostiles: Mapping[str, Behaviour]) -> dict[str, Behaviour]:
    """The site every test crawls: ``/`` links to each hostile path and to ``/ok``."""
    return {"/": page(*hostiles, "/ok"), "/ok": page("/ok2"), "/ok2": page(), **hostiles}


def assert_rest_of_crawl_fine(crawler: CrawlerBase, server: HostileServer) -> None:
    """The hostile URLs changed nothing else: ``/ok`` and ``/ok2`` crawled, crawl finished."""
    records = by_url(crawler)
    for path in ("/", "/ok", "/ok2"):
        assert records[server.url(path)].status == 200
        assert records[server.url(path)].exception is None
        assert server.hits[path] == 1
    assert crawler.finish_reason == "finished"


def failure(record: FetchStatistic) -> tuple[str | None, ...]:
    """What a failure record says, with the exception cut to its class name."""
    exception = record.exception and record.exception.split(":")[0]
    return (exception, record.status, record.next_url, record.size, record.num_urls)


def failed(name: str, *, status: int | None = None) -> tuple[str | None, ...]:
    """:func:`failure` of a record whose last try raised ``name``."""
    return (name, status, None, 0, 0)


# -- the network and the protocol ------------------------------------------------------


async def test_connection_refused(engine: Engine) -> None:
    dead = f"http://127.0.0.1:{closed_port()}/"
    async with open_hostile_server(site({})) as server:
        crawler = await crawl(engine, [dead, server.url()])
    assert failure(by_url(crawler)[dead]) == failed("ConnectError")
    assert_rest_of_crawl_fine(crawler, server)


async def test_a_proxy_named_by_the_environment_carries_the_requests(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The workers' clients skip httpx's look at the environment when the crawler found no
    # proxy there (it costs 0.5 ms per client); with one, every request must go through it.
    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    async with open_hostile_server() as proxy:
        proxy.fallback = page("/next")
        monkeypatch.setenv("http_proxy", proxy.url())
        crawler = await crawl(engine, "http://site.invalid/")
    assert proxy.requests == ["http://site.invalid/", "http://site.invalid/next"]
    assert {stat.status for stat in crawler.done} == {200}


# Each of these breaks HTTP after the request was sent; httpx raises a network error, which
# is retried. The messages differ between backends ("ReadError: socket connection broken:
# [Errno 104] Connection reset by peer" on Trio, a bare "ReadError" on asyncio), the class
# names do not.
NETWORK_FAILURES: dict[str, tuple[Behaviour, str]] = {
    "/reset-before-response": (reset_before_response, "ReadError"),
    "/reset-mid-body": (reset_mid_body(), "ReadError"),
    "/content-length-larger-than-body": (short_body(), "RemoteProtocolError"),
    "/binary-junk": (send_and_close(bytes(range(256)) * 4), "RemoteProtocolError"),
    "/ssh-banner": (send_and_close(b"SSH-2.0-OpenSSH_9.6\r\n"), "RemoteProtocolError"),
    "/smtp-greeting": (
        send_and_close(b"220 mail.example.com ESMTP\r\n\r\n"),
        "RemoteProtocolError",
    ),
    "/http-0.9-body": (
        send_and_close(b'<html>\n\n<a href="/ok">ok</a></html>\n'),
        "RemoteProtocolError",
    ),
    "/status-line-only": (send_and_close(b"HTTP/1.1 200 OK\r\n"), "RemoteProtocolError"),
    "/header-without-colon": (
        send_and_close(b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"),
        "RemoteProtocolError",
    ),
    "/nul-in-header": (
        send_and_close(b"HTTP/1.1 200 OK\r\nx-a: b\x00c\r\ncontent-length: 0\r\n\r\n"),
        "RemoteProtocolError",
    ),
    "/conflicting-content-lengths": (
        send_and_close(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 5\r\n\r\nab"),
        "RemoteProtocolError",
    ),
    "/bad-chunk-size": (
        send_and_close(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"
        ),
        "RemoteProtocolError",
    ),
    "/header-flood": (header_flood, "RemoteProtocolError"),
}


async def test_network_failures_are_retried_then_recorded(engine: Engine) -> None:
    hostiles = {path: behaviour for path, (behaviour, _) in NETWORK_FAILURES.items()}
    async with open_hostile_server(site(hostiles)) as server:
        crawler = await crawl(engine, server.url())
    records = by_url(crawler)
    got = {path: failure(records[server.url(path)]) for path in NETWORK_FAILURES}
    assert got == {path: failed(name) for path, (_, name) in NETWORK_FAILURES.items()}
    assert {path: server.hits[path] for path in NETWORK_FAILURES} == dict.fromkeys(
        NETWORK_FAILURES, 2
    )
    assert_rest_of_crawl_fine(crawler, server)


async def test_a_server_that_hangs_up_on_every_second_request_loses_no_page(
    engine: Engine,
) -> None:
    """A server that answers one request per connection without saying ``Connection:
    close``, then reads the next one and hangs up: each connection the crawler keeps idle
    and reuses loses its request before any byte of an answer. That is a failed attempt
    (the server saw it), and its retry goes on a new connection, so two tries always
    suffice; with the retry free to take another idle connection, it could meet the same
    end and the page would be lost."""
    answered: set[anyio.abc.SocketStream] = set()

    def once_per_connection(behaviour: Behaviour) -> Behaviour:
        async def answer_once(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
            if stream in answered:
                return False  # hang up, unanswered
            answered.add(stream)
            return await behaviour(stream, request)

        return answer_once

    pages = [f"/p{number}" for number in range(10)]
    routes = {"/": page(*pages), **{path: page() for path in pages}}
    async with open_hostile_server(
        {path: once_per_connection(behaviour) for path, behaviour in routes.items()}
    ) as server:
        crawler = await crawl(engine, server.url(), max_tasks=3)
    records = by_url(crawler)
    assert {path: records[server.url(path)].status for path in routes} == dict.fromkeys(routes, 200)
    assert max(server.hits.values()) <= 2  # no page asked for more than its two tries
    assert sum(server.hits.values()) > len(routes)  # connections were reused, and lost
    assert crawler.finish_reason == "finished"


# Servers that keep the connection busy but never finish a response: only the timeout of
# the whole attempt ends them, since each drip would reset a per-read timeout. (A server
# that never answers at all is test_engines.py's test_per_attempt_timeout_...)
@pytest.mark.parametrize(
    "endless", [endless_headers, drip_body], ids=["header section never ends", "body drips"]
)
async def test_endless_response_is_cut_by_the_timeout_of_the_whole_attempt(
    engine: Engine, endless: Callable[[float], Behaviour]
) -> None:
    # A drip every 2 s: a per-read timeout of 5 s would never fire.
    timeout = engine.seconds(5)
    async with open_hostile_server(site({HOSTILE: endless(engine.seconds(2))})) as server:
        start = anyio.current_time()
        crawler = await crawl(engine, server.url(), timeout=timeout)
        elapsed = anyio.current_time() - start
    record = by_url(crawler)[server.url(HOSTILE)]
    assert failure(record) == failed("TimeoutError")
    assert record.exception == f"TimeoutError: attempt took longer than {timeout:g} s"
    assert server.hits[HOSTILE] == 2
    engine.assert_duration(elapsed, 2 * timeout)
    assert_rest_of_crawl_fine(crawler, server)


async def test_odd_but_parseable_responses_are_records(engine: Engine) -> None:
    link = b'<a href="/found">found</a>'
    html_head = b"content-type: text/html\r\ncontent-length: %d\r\n\r\n" % len(link)
    odd = {
        "/status-999": send_and_close(b"HTTP/1.1 999 Odd\r\ncontent-length: 0\r\n\r\n"),
        "/no-reason-phrase": send_and_close(b"HTTP/1.1 200\r\n" + html_head + link),
        "/bare-newlines": send_and_close(
            b"HTTP/1.1 200 OK\n" + html_head.replace(b"\r\n", b"\n") + link
        ),
        "/http-1.0-body-ended-by-close": send_and_close(
            b"HTTP/1.0 200 OK\r\ncontent-type: text/html\r\n\r\n" + link
        ),
        "/100-continue-first": send_and_close(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n" + html_head + link
        ),
    }
    async with open_hostile_server({**site(odd), "/found": page()}) as server:
        crawler = await crawl(engine, server.url())
    records = by_url(crawler)
    got = {
        path: (records[server.url(path)].status, records[server.url(path)].num_urls) for path in odd
    }
    assert got == {path: (999, 0) if path == "/status-999" else (200, 1) for path in odd}
    assert all(records[server.url(path)].exception is None for path in odd)
    assert records[server.url("/found")].status == 200
    assert_rest_of_crawl_fine(crawler, server)


# -- bodies that cannot be kept ------------------------------------------------------------

OVERSIZED = {
    "/exactly-max-size": huge_body(MIB),
    "/one-byte-over": huge_body(MIB + 1),
    "/8-mib": huge_body(8 * MIB),
    "/endless-body-until-close": huge_body(None),
}


async def test_bodies_larger_than_max_size_are_not_read(engine: Engine) -> None:
    async with open_hostile_server(site(OVERSIZED)) as server:
        crawler = await crawl(engine, server.url(), max_size=MIB)
    records = by_url(crawler)
    got = {path: failure(records[server.url(path)]) for path in OVERSIZED}
    too_large = failed("ResponseTooLarge", status=200)
    assert got == {
        "/exactly-max-size": (None, 200, None, MIB, 0),
        "/one-byte-over": too_large,
        "/8-mib": too_large,
        "/endless-body-until-close": too_large,
    }
    assert records[server.url("/8-mib")].exception == (
        f"ResponseTooLarge: body exceeds {MIB} bytes"
    )
    # A status-200 record has a type and an encoding, read or not: the encoding is the
    # Content-Type charset, else utf-8 (docs/usage.md, "Limits and failure handling").
    assert {(stat.content_type, stat.encoding) for stat in crawler.done} == {("text/html", "utf-8")}
    # Not retried: the next try would be as large.
    assert {path: server.hits[path] for path in OVERSIZED} == dict.fromkeys(OVERSIZED, 1)
    assert_rest_of_crawl_fine(crawler, server)


async def test_gzip_bomb_is_stopped_at_max_size_with_bounded_memory(engine: Engine) -> None:
    gzip_bomb_bytes()  # made before measuring: it is the server's, not the crawler's
    async with open_hostile_server(site({HOSTILE: gzip_bomb})) as server:
        tracemalloc.start()
        try:
            crawler = await crawl(engine, server.url(), max_size=MIB)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    record = by_url(crawler)[server.url(HOSTILE)]
    assert failure(record) == failed("ResponseTooLarge", status=200)
    assert server.hits[HOSTILE] == 1
    # A decoder that inflates each 64 KiB read whole makes about 64 MiB at once; a bounded
    # one needs little more than max_size (2.5-5 MiB peak measured, on every engine).
    assert peak < 16 * MIB, f"peak traced memory {peak / MIB:.0f} MiB"
    assert_rest_of_crawl_fine(crawler, server)


async def test_body_that_is_not_the_gzip_it_claims(engine: Engine) -> None:
    not_gzip = send_and_close(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-encoding: gzip\r\n"
        b"content-length: 10\r\n\r\nnot gzip!!"
    )
    async with open_hostile_server(site({HOSTILE: not_gzip})) as server:
        crawler = await crawl(engine, server.url())
    record = by_url(crawler)[server.url(HOSTILE)]
    assert failure(record) == failed("DecodingError", status=200)
    assert (record.content_type, record.encoding) == ("text/html", "utf-8")
    assert server.hits[HOSTILE] == 1  # not retried: the same bytes would come again
    assert_rest_of_crawl_fine(crawler, server)


# -- redirects -----------------------------------------------------------------------------

# Each Location the crawler cannot use; the record must be like a 404's: the status, no
# next_url (docs/usage.md, "Limits and failure handling").
UNUSABLE_LOCATIONS = {
    "/no-location": None,
    "/empty-location": b"",
    "/unclosed-ipv6": b"http://[::1",
    "/junk-after-ipv6": b"http://[::1]x/",
    "/port-99999": b"http://127.0.0.1:99999/",
}


async def test_redirects_without_a_usable_location_are_records_like_a_404(
    engine: Engine,
) -> None:
    hostiles = {path: redirect(location) for path, location in UNUSABLE_LOCATIONS.items()}
    async with open_hostile_server(site(hostiles)) as server:
        crawler = await crawl(engine, server.url())
    records = by_url(crawler)
    got = {path: untimed(records[server.url(path)]) for path in UNUSABLE_LOCATIONS}
    assert got == {
        path: FetchStatistic(url=server.url(path), status=302, depth=1, referrer=server.url())
        for path in UNUSABLE_LOCATIONS
    }
    assert len(records) == len(UNUSABLE_LOCATIONS) + 3  # and /, /ok, /ok2
    assert {path: server.hits[path] for path in UNUSABLE_LOCATIONS} == dict.fromkeys(
        UNUSABLE_LOCATIONS, 1
    )
    assert_rest_of_crawl_fine(crawler, server)


OTHER_SCHEMES = {
    "/to-ftp": "ftp://127.0.0.1/f",
    "/to-javascript": "javascript:alert(1)",
    "/to-mailto": "mailto:a@example.com",
}


async def test_redirects_to_other_schemes_are_recorded_not_followed(engine: Engine) -> None:
    hostiles = {path: redirect(target.encode()) for path, target in OTHER_SCHEMES.items()}
    async with open_hostile_server(site(hostiles)) as server:
        crawler = await crawl(engine, server.url())
    records = by_url(crawler)
    got = {path: untimed(records[server.url(path)]) for path in OTHER_SCHEMES}
    assert got == {
        path: FetchStatistic(
            url=server.url(path), next_url=target, status=302, depth=1, referrer=server.url()
        )
        for path, target in OTHER_SCHEMES.items()
    }
    assert crawler.seen_urls.isdisjoint(OTHER_SCHEMES.values())
    assert len(records) == len(OTHER_SCHEMES) + 3
    assert_rest_of_crawl_fine(crawler, server)


async def test_redirect_to_itself_is_fetched_once(engine: Engine) -> None:
    async with open_hostile_server(site({HOSTILE: redirect(b"/hostile#again")})) as server:
        crawler = await crawl(engine, server.url())
    record = untimed(by_url(crawler)[server.url(HOSTILE)])
    assert record == FetchStatistic(
        url=server.url(HOSTILE), next_url=record.url, status=302, depth=1, referrer=server.url()
    )
    assert server.hits[HOSTILE] == 1
    assert_rest_of_crawl_fine(crawler, server)


async def test_redirect_with_a_raw_non_ascii_location(engine: Engine) -> None:
    # RFC 9110 allows obs-text (bytes 0x80-0xFF) in a field value; httpx decodes it, and
    # the crawler percent-encodes the result as UTF-8 like any other URL.
    async with open_hostile_server(site({HOSTILE: redirect(b"/caf\xe9")})) as server:
        crawler = await crawl(engine, server.url())
    records = by_url(crawler)
    assert records[server.url(HOSTILE)].next_url == server.url("/caf%C3%A9")
    assert records[server.url("/caf%C3%A9")].status == 404
    assert_rest_of_crawl_fine(crawler, server)


async def test_chain_of_50_redirects_stops_at_max_redirect(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    chain = {f"/r/{n}": redirect(f"/r/{n + 1}".encode()) for n in range(50)}
    async with open_hostile_server({**site({HOSTILE: redirect(b"/r/0")}), **chain}) as server:
        with caplog.at_level(logging.WARNING, logger="trio_crawler"):
            crawler = await crawl(engine, server.url())
    records = by_url(crawler)
    # The link to /hostile starts a chain with 10 redirects to follow: 11 redirect records,
    # each at the link's depth, each the referrer of the next.
    followed = [HOSTILE, *(f"/r/{n}" for n in range(10))]
    referrers = ["/", *followed[:-1]]
    for path, target, referrer in zip(followed, [*followed[1:], "/r/10"], referrers, strict=True):
        assert untimed(records[server.url(path)]) == FetchStatistic(
            url=server.url(path),
            next_url=server.url(target),
            status=302,
            depth=1,
            referrer=server.url(referrer),
        )
    assert set(records) == {server.url(p) for p in ["/", "/ok", "/ok2", *followed]}
    assert "/r/10" not in server.hits
    assert "redirect limit reached" in caplog.text
    assert_rest_of_crawl_fine(crawler, server)


# -- pages that are hard to parse ----------------------------------------------------------

MANY_LINKS = 100_000


@functools.cache
def page_of_many_links() -> Behaviour:
    return page(*(f"/many/{n}" for n in range(MANY_LINKS)))


async def test_page_of_100000_links(engine: Engine) -> None:
    # The links would be 100 000 fetches, so they are kept one hop beyond max_depth: the
    # page is at depth 2 (/ -> /hop -> /hostile), as /ok2 is, and its links at depth 3.
    routes = {
        **site({HOSTILE: page_of_many_links()}),
        "/": page("/hop", "/ok"),
        "/hop": page(HOSTILE),
    }
    async with open_hostile_server(routes) as server:
        # Parsing 100 000 links blocks the event loop for seconds (about 70 us a link on a
        # 2-core machine): no request may time out on asyncio's real clock meanwhile.
        crawler = await crawl(engine, server.url(), max_depth=2, timeout=HANG_LIMIT)
    record = by_url(crawler)[server.url(HOSTILE)]
    assert record.status == 200
    assert (record.num_urls, record.num_new_urls) == (MANY_LINKS, MANY_LINKS)
    assert crawler.limit_counts["beyond_max_depth"] == MANY_LINKS
    assert not any(target.startswith("/many/") for target in server.hits)
    assert len(crawler.seen_urls) == 5
    assert_rest_of_crawl_fine(crawler, server)


INVALID_HREFS = [
    "http://[::1",  # unclosed IPv6 literal
    "http://[::1]x/",  # junk after it
    "http://127.0.0.1:99999/",  # port out of range
    "http://127.0.0.1:port/",  # port not a number
    "http://",  # no host
    "http:///no-host",
    "http://127.0.0.1\x01/control-in-host",
    "/control\x01char",
    "/with space",
    "  /padded  ",
    "/tab\tand\nnewline",
    "/lone-surrogate-&#xD800;",  # the HTML parser makes it U+FFFD
    "/" + "a" * 10_000,
    "http://bücher.example/",  # IDN host: out of scope
    "http://xn--bcher-kva.example/",
    "http://a..b/",
    "/bad-escape-%zz",
    "/bad-escape-%",
    "/bad-utf8-%e9",
    "/encoded-surrogate-%ED%A0%80",
    "javascript:void(0)",
    "mailto:someone@example.com",
    "data:text/html,<a href=x>",
]
# UTF-7 is the one document charset Python decodes to a lone surrogate: "+2AA-" is U+D800.
UTF7_PAGE = response(
    headers=[b"content-type: text/html; charset=utf-7"],
    body=b'<a href="/utf7-surrogate-+2AA-">s</a><a href="/utf7-ok">ok</a>',
)


def assert_well_formed(url: str, *, max_length: int = 2083) -> None:
    """An absolute http(s) URL, printable ASCII, no fragment, not too long."""
    parts = urlsplit(url)
    assert parts.scheme in ("http", "https"), url
    assert parts.hostname, url
    assert "#" not in url, url
    assert re.fullmatch(r"[!-~]+", url), url
    assert len(url) <= max_length, url


async def test_invalid_hrefs_are_skipped_or_repaired(engine: Engine) -> None:
    hostile = page(*INVALID_HREFS, "/valid")
    routes = {
        **site({HOSTILE: hostile}),
        "/": page(HOSTILE, "/ok", "/utf7"),
        "/utf7": UTF7_PAGE,
        "/valid": page(),
        "/utf7-ok": page(),
    }
    async with open_hostile_server(routes) as server:
        crawler = await crawl(engine, server.url())
    for url in crawler.seen_urls:
        assert_well_formed(url)
    records = by_url(crawler)
    assert records[server.url("/valid")].status == 200
    assert records[server.url("/utf7-ok")].status == 200
    assert records[server.url("/utf7")].encoding == "utf-7"
    assert crawler.limit_counts["links_too_long"] == 1
    # What the crawler makes of the rest, pinned: each repairable href is percent-encoded
    # or stripped as a browser would; the others are skipped.
    repaired = {
        "/control%01char",
        "/with%20space",
        "/padded",
        "/tabandnewline",
        "/lone-surrogate-%EF%BF%BD",
        "/bad-escape-%zz",
        "/bad-escape-%",
        "/bad-utf8-%e9",
        "/encoded-surrogate-%ED%A0%80",
    }
    # Plus /valid. As in a browser, "http:///no-host" is the host "no-host" (out of scope)
    # and "http://" is refused for lack of a host.
    assert records[server.url(HOSTILE)].num_urls == len(repaired) + 1
    # selectolax drops the lone surrogate that UTF-7 decodes to when it hands the text to
    # Lexbor, so the link loses it rather than being skipped.
    utf7_links = {"/utf7-ok", "/utf7-surrogate-"}
    assert records[server.url("/utf7")].num_urls == len(utf7_links)
    assert set(records) == {
        server.url(path)
        for path in {"/", "/ok", "/ok2", "/utf7", HOSTILE, "/valid", *repaired, *utf7_links}
    }
    for stat in crawler.done:
        assert stat.exception is None, stat
    assert_rest_of_crawl_fine(crawler, server)


# -- charsets ------------------------------------------------------------------------------


# Path: (Content-Type, bytes before the link, the encoding the record must name).
BAD_CHARSETS = {
    "/unknown-charset": (b"text/html; charset=bogus-xyz", b"", "utf-8"),
    "/rot13": (b"text/html; charset=rot13", b"", "utf-8"),  # a codec, but bytes to bytes
    "/idna": (b"text/html; charset=idna", b"", "utf-8"),  # a codec, not for documents
    "/empty-quoted-charset": (b'text/html; charset="', b"", "utf-8"),
    "/bad-utf-8": (b"text/html; charset=utf-8", b"\xff\xfe\xe2\x82 \xc0\xaf \xed\xa0\x80", "utf-8"),
    "/bad-ascii": (b"text/html; charset=ascii", b"caf\xe9 \x80\xff", "ascii"),
    "/bad-shift-jis": (b"text/html; charset=shift_jis", b"\x81\x7f\xa0\xfd\xfe\xff", "shift_jis"),
    "/bad-euc-jp": (b"text/html; charset=euc-jp", b"\x8e\xff\xa1", "euc-jp"),
}


def charset_page(content_type: bytes, body_start: bytes) -> tuple[Behaviour, bytes]:
    body = b"<html><body>" + body_start + b'<a href="/found">found</a></body></html>'
    return response(headers=[b"content-type: " + content_type], body=body), body


async def test_bad_charsets_and_bad_bytes_still_yield_the_links(engine: Engine) -> None:
    pages = {path: charset_page(type_, start) for path, (type_, start, _) in BAD_CHARSETS.items()}
    hostiles = {path: behaviour for path, (behaviour, _) in pages.items()}
    async with open_hostile_server({**site(hostiles), "/found": page()}) as server:
        crawler = await crawl(engine, server.url())
    records = by_url(crawler)
    got = {
        path: (
            records[server.url(path)].status,
            records[server.url(path)].exception,
            records[server.url(path)].content_type,
            records[server.url(path)].encoding,
            records[server.url(path)].size,
            records[server.url(path)].num_urls,
        )
        for path in BAD_CHARSETS
    }
    assert got == {
        path: (200, None, "text/html", encoding, len(pages[path][1]), 1)
        for path, (_, _, encoding) in BAD_CHARSETS.items()
    }
    assert records[server.url("/found")].status == 200
    assert_rest_of_crawl_fine(crawler, server)


# -- an endless URL space ------------------------------------------------------------------


async def endless_space(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
    """``/n/<k>?s=<s>`` (no query: s = 0) links to ``/n/<k+1>`` and ``/n/<k>?s=<s+1>``.

    Every page leads somewhere new, and page (k, s) is first found at depth k + s + 1 from
    ``/``: (k, 0) is finished before (k, 1) is even found, and (k, 0) links to (k + 1, 0).
    """
    parts = urlsplit(request.target)
    k = int(parts.path.removeprefix("/n/"))
    s = int(parse_qs(parts.query).get("s", ["0"])[0])
    return await page(f"/n/{k + 1}", f"/n/{k}?s={s + 1}")(stream, request)


def endless_site() -> dict[str, Behaviour]:
    return {**site({}), "/": page("/n/0", "/ok")}


async def test_endless_url_space_is_bounded_by_max_pages(engine: Engine) -> None:
    async with open_hostile_server(endless_site()) as server:
        server.fallback = endless_space
        crawler = await crawl(engine, server.url(), max_pages=50)
    assert len(by_url(crawler)) == 50
    assert len(server.requests) == 50
    assert all(stat.status == 200 for stat in crawler.done)
    assert crawler.finish_reason == "max-pages"
    for path in ("/ok", "/ok2"):  # found early, so among the first 50
        assert by_url(crawler)[server.url(path)].status == 200


async def test_endless_url_space_is_bounded_by_max_depth(engine: Engine) -> None:
    async with open_hostile_server(endless_site()) as server:
        server.fallback = endless_space
        crawler = await crawl(engine, server.url(), max_depth=5)
    # Depth k + s + 1 <= 5, with / at depth 0, /ok at 1 and /ok2 at 2.
    grid = {f"/n/{k}" + (f"?s={s}" if s else "") for k in range(5) for s in range(5 - k)}
    assert set(by_url(crawler)) == {server.url(p) for p in {"/", "/ok", "/ok2", *grid}}
    assert set(server.hits.values()) == {1}
    # The depth-5 pages (k + s = 4) link to six pages at depth 6.
    assert crawler.limit_counts["beyond_max_depth"] == 6
    assert_rest_of_crawl_fine(crawler, server)

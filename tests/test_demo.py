"""The bundled demo site: its content as data, then the real server on both event loops.

The first half needs no event loop: it walks ``build_demo_site().pages`` the way a correct
crawler would (its own small link extractor, independent of ``trio_crawler._links``) and
checks that the walk reaches exactly what ``demo_expectations.expected_urls`` says, and that
each feature the demo advertises is really there. The second half starts :func:`serve_demo`
on 127.0.0.1 in the test's own nursery or task group, on Trio and on asyncio, and talks to
it with httpx.
"""

from __future__ import annotations

import functools
import gc
import gzip
import logging
import re
import socket
from collections import deque
from urllib.parse import quote, urlsplit

import ada_url
import anyio
import httpx
import pytest
import trio
import trio.testing
from hypercorn.typing import ASGIReceiveEvent, ASGISendEvent, LifespanScope
from selectolax.lexbor import LexborHTMLParser

from trio_crawler._demo import (
    NOT_FOUND,
    DemoPage,
    DemoSite,
    build_demo_site,
    demo_app,
    serve_demo,
)

from demo_expectations import (
    error_paths,
    expected_statuses,
    expected_urls,
    failing_paths,
    file_paths,
    html_paths,
    is_redirect,
    media_type,
    redirect_paths,
)
from support import HANG_LIMIT

ROOT = "http://demo.test/"
PARSED_TYPES = {"text/html", "application/xhtml+xml"}
WEBSOCKET_HANDSHAKE = (
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
META_CHARSET = re.compile(rb"<meta\s+charset=[\"']?([\w-]+)", re.IGNORECASE)


@pytest.fixture(scope="module")
def site() -> DemoSite:
    return build_demo_site()


# --- a tiny reference crawler over the page table ---------------------------------------------


def decoded_body(page: DemoPage) -> bytes:
    if page.header("content-encoding") == "gzip":
        return gzip.decompress(page.body)
    return page.body


def page_charset(page: DemoPage) -> str:
    content_type = page.header("content-type") or ""
    match = re.search(r"charset=([\w-]+)", content_type)
    if match:
        return match.group(1)
    meta = META_CHARSET.search(decoded_body(page))
    return meta.group(1).decode("ascii") if meta else "utf-8"


def links_of(page: DemoPage, url: str) -> list[str]:
    """The href of every a, area and link element, resolved against <base href> or the URL."""
    tree = LexborHTMLParser(decoded_body(page).decode(page_charset(page), "replace"))
    base = tree.css_first("base[href]")
    base_url = join(url, base.attributes["href"] or "") if base else url
    hrefs = [node.attributes["href"] or "" for node in tree.css("a[href], area[href], link[href]")]
    return [join(base_url, href) for href in hrefs]


def join(base: str, href: str) -> str:
    """``href`` resolved against ``base`` as a browser's ``a.href`` does (the WHATWG URL
    Standard, by ada-url directly), or "" where a browser refuses it."""
    try:
        return str(ada_url.join_url(base, href))
    except ValueError:
        return ""


def normalise(url: str) -> str | None:
    """The URL a browser requests: http(s) only, without its fragment."""
    if not url.startswith(("http://", "https://")):
        return None
    return url.partition("#")[0]


def page_for(site: DemoSite, url: str) -> DemoPage:
    parts = urlsplit(url)
    return site.lookup(parts.path + (f"?{parts.query}" if parts.query else ""))


def walk(site: DemoSite, root: str = ROOT) -> dict[str, DemoPage]:
    """Every in-scope URL reachable from ``root`` through links and redirects, with its page."""
    host = urlsplit(root).netloc
    found: dict[str, DemoPage] = {}
    frontier = deque([root])
    while frontier:
        url = frontier.popleft()
        if url in found:
            continue
        page = found[url] = page_for(site, url)
        if is_redirect(page):
            targets = [join(url, page.header("location") or "")]
        elif page.status == 200 and media_type(page) in PARSED_TYPES and not page.is_truncated:
            targets = links_of(page, url)
        else:
            targets = []
        for target in targets:
            normalised = normalise(target)
            if normalised is not None and urlsplit(normalised).netloc == host:
                frontier.append(normalised)
    return found


def features_links(site: DemoSite) -> list[str]:
    return links_of(site.pages["/features/"], ROOT + "features/")


# --- the site as data -------------------------------------------------------------------------


def test_build_is_deterministic() -> None:
    first, second = build_demo_site(), build_demo_site()
    assert first == second
    assert dict(first.pages) == dict(second.pages)
    other_seed = build_demo_site(seed=1)
    assert other_seed.pages.keys() == first.pages.keys(), "the seed must not change the layout"
    assert other_seed.pages["/"].body != first.pages["/"].body


def test_walk_reaches_exactly_the_expected_urls(site: DemoSite) -> None:
    found = walk(site)
    assert set(found) == expected_urls(site, ROOT)
    statuses = expected_statuses(site, ROOT)
    for url, page in found.items():
        status = None if page.is_truncated else page.status
        assert statuses[url] == status, url


def test_every_html_page_is_reachable_and_sized_like_a_page(site: DemoSite) -> None:
    found = walk(site)
    assert {ROOT.rstrip("/") + path for path in html_paths(site)} <= set(found)
    assert len(html_paths(site)) >= 300
    for path in html_paths(site):
        size = len(decoded_body(site.pages[path]))
        assert 1024 <= size <= 10 * 1024, (path, size)


def test_counts(site: DemoSite) -> None:
    assert len(html_paths(site)) == 318
    assert len(redirect_paths(site)) == 8
    assert error_paths(site) == {"/missing.html", "/redirect/nowhere"}
    assert failing_paths(site) == {"/broken/truncated.html"}
    assert len(file_paths(site)) == 4
    assert len(expected_urls(site, ROOT)) == 333


def test_expected_urls_use_the_roots_origin_only(site: DemoSite) -> None:
    urls = expected_urls(site, "http://127.0.0.1:54321/some/where?x=1")
    assert "http://127.0.0.1:54321/" in urls
    assert "http://127.0.0.1:54321/intl/caf%C3%A9.html" in urls
    assert all(url.startswith("http://127.0.0.1:54321/") for url in urls)
    assert not any("#" in url for url in urls)


def test_redirect_chain(site: DemoSite) -> None:
    url, statuses, locations = ROOT + "redirect/start", [], []
    while is_redirect(page := page_for(site, url)):
        location = page.header("location") or ""
        statuses.append(page.status)
        locations.append(location)
        url = normalise(join(url, location)) or ""
    assert page.status == 200
    assert media_type(page) == "text/html"
    assert url == ROOT + "redirect/landing.html"
    assert len(statuses) >= 3
    assert set(statuses) == {301, 302, 303, 307, 308}
    assert any(not location.startswith(("/", "http")) for location in locations)
    assert any("#" in location for location in locations)


def test_two_redirects_share_one_target(site: DemoSite) -> None:
    assert site.pages["/foo"].header("location") == "/baz"
    assert site.pages["/bar"].header("location") == "/baz"
    assert site.pages["/baz"].status == 200
    links = features_links(site)
    assert ROOT + "foo" in links
    assert ROOT + "bar" in links


def test_offsite_redirect_and_redirect_without_location(site: DemoSite) -> None:
    assert site.pages["/redirect/offsite"].header("location") == "https://www.python.org/"
    assert "https://www.python.org/" not in expected_urls(site, ROOT)
    nowhere = site.pages["/redirect/nowhere"]
    assert nowhere.status == 302
    assert nowhere.header("location") is None
    assert not is_redirect(nowhere)


def test_missing_page_is_linked_and_answers_404(site: DemoSite) -> None:
    assert ROOT + "missing.html" in features_links(site)
    assert "/missing.html" not in site.pages
    assert site.lookup("/missing.html") is NOT_FOUND
    assert media_type(NOT_FOUND) == "text/html"
    assert 0 < len(NOT_FOUND.body) < 1024


def test_no_robots_txt(site: DemoSite) -> None:
    assert site.lookup("/robots.txt").status == 404


@pytest.mark.parametrize(
    ("path", "expected_type"),
    [
        ("/files/data.csv", "text/csv"),
        ("/files/readme.txt", "text/plain"),
        ("/files/logo.png", "image/png"),
        ("/static/style.css", "text/css"),
    ],
)
def test_non_html_files(site: DemoSite, path: str, expected_type: str) -> None:
    page = site.pages[path]
    assert page.status == 200
    assert media_type(page) == expected_type
    assert path in file_paths(site)
    if expected_type == "image/png":
        assert page.body.startswith(b"\x89PNG\r\n\x1a\n")
        assert page.body.endswith(b"IEND\xaeB`\x82")


def test_markup_in_a_text_file_is_not_followed(site: DemoSite) -> None:
    assert b'href="/files/never-fetched.html"' in site.pages["/files/readme.txt"].body
    assert ROOT + "files/never-fetched.html" not in expected_urls(site, ROOT)


def test_links_that_are_never_fetched(site: DemoSite) -> None:
    links = features_links(site)
    for link in (
        "http://example.com/",
        "https://www.python.org/",
        "mailto:crawler@example.com",
        "javascript:void(0)",
    ):
        assert link in links
        assert link not in expected_urls(site, ROOT)


def test_fragments(site: DemoSite) -> None:
    links = features_links(site)
    assert ROOT + "features/#top" in links
    assert ROOT + "baz#details" in links
    assert ROOT + "coroutines/#intro" in links
    assert b'id="details"' in site.pages["/baz"].body
    assert b'id="intro"' in site.pages["/coroutines/"].body


def test_charset_from_the_content_type_header(site: DemoSite) -> None:
    page = site.pages["/intl/latin1.html"]
    assert page.header("content-type") == "text/html; charset=iso-8859-1"
    assert b"<meta" not in page.body
    assert "Café".encode("iso-8859-1") in page.body
    with pytest.raises(UnicodeDecodeError):
        page.body.decode("utf-8")
    assert "/intl/caf%C3%A9.html" in site.pages
    assert ROOT + "intl/caf%C3%A9.html" in {normalise(link) for link in links_of(page, ROOT)}


def test_charset_from_meta_only(site: DemoSite) -> None:
    page = site.pages["/intl/cyrillic.html"]
    assert page.header("content-type") == "text/html"
    assert b'<meta charset="windows-1251">' in page.body
    assert "Привет".encode("windows-1251") in page.body
    assert page_charset(page) == "windows-1251"
    target = quote("/intl/привет.html")
    assert target in site.pages
    assert ROOT + target[1:] in {normalise(link) for link in links_of(page, ROOT)}


def test_base_href_with_area_and_link(site: DemoSite) -> None:
    page = site.pages["/links/base.html"]
    for markup in (b'<base href="/links/target/">', b"<area ", b'<link rel="next"'):
        assert markup in page.body
    links = set(links_of(page, ROOT + "links/base.html"))
    assert links == {
        ROOT,
        ROOT + "links/target/one.html",
        ROOT + "links/target/map.html",
        ROOT + "links/target/next.html",
        ROOT + "static/style.css",
    }


def test_gzip_page(site: DemoSite) -> None:
    page = site.pages["/compressed.html"]
    assert page.header("content-encoding") == "gzip"
    assert b"<title>Compressed</title>" in gzip.decompress(page.body)


def test_truncated_page_declares_more_than_it_has(site: DemoSite) -> None:
    page = site.pages["/broken/truncated.html"]
    assert page.is_truncated
    assert int(page.header("content-length") or 0) > len(page.body)


# --- the real server on 127.0.0.1 -------------------------------------------------------------


async def exercise(client: httpx.AsyncClient, root: str) -> None:
    """Fetch one of each kind of response from a running demo server.

    The tests keep ``client`` open across the server's stop, so its idle keep-alive
    connections are still there when the caller cancels: shutdown must not wait for them.
    """
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", root)
    home = await client.get(root)
    assert home.status_code == 200
    assert home.headers["content-type"] == "text/html; charset=utf-8"
    assert "<title>Trio crawler demo site</title>" in home.text

    redirect = await client.get(root + "redirect/start", follow_redirects=False)
    assert redirect.status_code == 301
    assert redirect.headers["location"] == "/redirect/step-2"
    assert redirect.content == b""

    missing = await client.get(root + "missing.html")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("text/html")
    assert missing.content == NOT_FOUND.body

    compressed = await client.get(root + "compressed.html")
    assert compressed.status_code == 200
    assert compressed.headers["content-encoding"] == "gzip"
    assert "<title>Compressed</title>" in compressed.text

    for spelling in ("intl/caf%C3%A9.html", "intl/café.html", "intl/caf%c3%a9.html"):
        cafe = await client.get(root + spelling)
        assert cafe.status_code == 200, spelling
    archive = await client.get(root + "archive?page=2")
    assert "Archive, page 2" in archive.text

    head = await client.head(root + "files/logo.png")
    assert head.status_code == 200
    assert head.headers["content-type"] == "image/png"
    assert int(head.headers["content-length"]) > 0
    assert head.content == b""

    refused = await client.post(root)
    assert refused.status_code == 405

    with pytest.raises(httpx.RemoteProtocolError):
        await client.get(root + "broken/truncated.html")

    port = urlsplit(root).port or 0
    async with await anyio.connect_tcp("127.0.0.1", port) as websocket_attempt:
        await websocket_attempt.send(WEBSOCKET_HANDSHAKE)
        assert (await websocket_attempt.receive()).startswith(b"HTTP/1.1 403 ")


async def assert_port_closed(root: str) -> None:
    with pytest.raises(OSError):  # noqa: PT011 - refused connections have no portable message
        await anyio.connect_tcp("127.0.0.1", urlsplit(root).port or 0)


def assert_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """Hypercorn logged nothing worth showing: no tracebacks from a normal stop.

    Also no "Task was destroyed but it is pending" from asyncio, which is logged when the
    task is garbage-collected; hence the collection first.
    """
    gc.collect()
    assert [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR] == []
    server_records = [
        record
        for record in caplog.records
        if record.name.startswith(("trio_crawler._demo", "hypercorn"))
    ]
    assert [record for record in server_records if record.levelno >= logging.WARNING] == []
    assert all(record.exc_info is None for record in server_records)


@pytest.mark.trio
async def test_serve_on_trio(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with trio.fail_after(HANG_LIMIT):
        async with httpx.AsyncClient() as client, trio.open_nursery() as nursery:
            root = await nursery.start(serve_demo)
            await exercise(client, root)
            nursery.cancel_scope.cancel()
        await assert_port_closed(root)
    assert_quiet(caplog)


@pytest.mark.trio
async def test_cancel_at_once_on_trio() -> None:
    with trio.fail_after(HANG_LIMIT):
        async with trio.open_nursery() as nursery:
            root = await nursery.start(serve_demo)
            nursery.cancel_scope.cancel()
        await assert_port_closed(root)


@pytest.mark.trio
async def test_serve_under_virtual_time_on_trio(virtual_clock: trio.testing.MockClock) -> None:
    # The engine tests run Trio on a MockClock that jumps whenever every task waits, socket
    # I/O included. Hypercorn's timers (keep-alive, graceful stop) then fire early; the demo
    # must still serve, and the client must cope with keep-alive connections it closed.
    with trio.fail_after(HANG_LIMIT):
        async with httpx.AsyncClient() as client, trio.open_nursery() as nursery:
            root = await nursery.start(serve_demo)
            await exercise(client, root)
            await trio.sleep(100)
            await exercise(client, root)
            nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_port_in_use_raises_before_started() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with trio.fail_after(HANG_LIMIT):
            async with trio.open_nursery() as nursery:
                # start() raises the task's own error when it fails before started().
                with pytest.raises(OSError, match="in use"):
                    await nursery.start(functools.partial(serve_demo, port=port))


@pytest.mark.trio
async def test_app_acknowledges_lifespan_and_returns() -> None:
    # Hypercorn drives the lifespan protocol and waits for each answer; an app that does not
    # return after "shutdown.complete" would be cancelled mid-await on asyncio.
    app = demo_app(build_demo_site())
    to_app, app_inbox = trio.open_memory_channel[ASGIReceiveEvent](2)
    sent: list[ASGISendEvent] = []

    async def send(message: ASGISendEvent) -> None:
        sent.append(message)

    scope: LifespanScope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    await to_app.send({"type": "lifespan.startup"})
    await to_app.send({"type": "lifespan.shutdown"})
    with trio.fail_after(HANG_LIMIT):
        await app(scope, app_inbox.receive, send)
    assert sent == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# Intended twin of test_serve_on_trio: the same checks, served on asyncio through AnyIO.
@pytest.mark.anyio
async def test_serve_on_asyncio(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with anyio.fail_after(HANG_LIMIT):
        async with httpx.AsyncClient() as client, anyio.create_task_group() as task_group:
            root = await task_group.start(serve_demo)
            await exercise(client, root)
            task_group.cancel_scope.cancel()
        await assert_port_closed(root)
    assert_quiet(caplog)


@pytest.mark.anyio
async def test_cancel_at_once_on_asyncio() -> None:
    with anyio.fail_after(HANG_LIMIT):
        async with anyio.create_task_group() as task_group:
            root = await task_group.start(serve_demo)
            task_group.cancel_scope.cancel()
        await assert_port_closed(root)

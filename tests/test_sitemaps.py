"""Sitemaps: the reader on its own, the core's decisions, and crawls of a real server.

``--sitemaps`` queues each root origin's sitemaps (robots.txt ``Sitemap:`` lines, else
``/sitemap.xml``) right after robots.txt; indexes are followed three levels deep; every
in-scope ``<loc>`` is a link one hop from the root. Sitemap files are hostile input: a DTD
(billion laughs, external entities) is refused before anything is expanded, a gzip bomb
stops at the size limit, and a file lists at most 50 000 URLs.
"""

from __future__ import annotations

import gzip
import tracemalloc
from typing import Any

import anyio
import pytest
import trio

import trio_crawler
from trio_crawler._config import CrawlConfig
from trio_crawler._demo import build_demo_site, serve_demo
from trio_crawler._events import FetchRequest, Response, RobotsRequest
from trio_crawler._sitemaps import MAX_LOCS, read_sitemap
from trio_crawler._state import CrawlState
from trio_crawler._stats import FetchStatistic
from trio_crawler._stores import open_store

from conftest import Engine
from demo_expectations import expected_urls
from httpserver import Reply, open_test_server
from support import finish

ROOT = "http://example.com/"
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
MIB = 1024 * 1024


def urlset(*locs: str) -> bytes:
    entries = "".join(f"<url><loc>{loc}</loc></url>" for loc in locs)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {NS}>{entries}</urlset>'.encode()


def index(*locs: str) -> bytes:
    entries = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f"<sitemapindex {NS}>{entries}</sitemapindex>".encode()


# -- the reader --------------------------------------------------------------------------


def test_a_urlset_lists_pages_with_entities_unescaped() -> None:
    content = read_sitemap(urlset("http://a/1", "http://a/2?x=1&amp;y=2"), max_size=MIB)
    assert content.pages == ("http://a/1", "http://a/2?x=1&y=2")
    assert content.sitemaps == ()
    assert content.problem is None


def test_an_index_lists_sitemaps() -> None:
    content = read_sitemap(index("http://a/s1.xml", "http://a/s2.xml.gz"), max_size=MIB)
    assert content.sitemaps == ("http://a/s1.xml", "http://a/s2.xml.gz")
    assert content.pages == ()


def test_gzip_is_recognised_by_its_bytes_and_text_sitemaps_by_theirs() -> None:
    assert read_sitemap(gzip.compress(urlset("http://a/z")), max_size=MIB).pages == ("http://a/z",)
    text = b"\xef\xbb\xbfhttp://a/1\r\n\n  http://a/2  \n"
    assert read_sitemap(text, max_size=MIB).pages == ("http://a/1", "http://a/2")


def test_a_billion_laughs_expands_nothing_and_keeps_nothing_it_did_not_read() -> None:
    laughs = (
        b'<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
        + b"".join(
            b'<!ENTITY lol%d "%s">' % (n, (b"&lol%d;" % (n - 1) if n > 1 else b"&lol;") * 10)
            for n in range(1, 10)
        )
        + b"]>\n<urlset><url><loc>&lol9;</loc></url></urlset>"
    )
    content = read_sitemap(laughs, max_size=MIB)
    assert content.pages == ()
    assert content.problem is not None
    assert content.problem.startswith("DTDForbidden")


def test_external_entities_are_never_fetched_and_plain_locs_before_are_kept() -> None:
    hostile = (
        b"<urlset><url><loc>http://a/kept</loc></url>"
        b'<!DOCTYPE x [<!ENTITY ext SYSTEM "file:///etc/passwd">]>'
        b"<url><loc>&ext;</loc></url></urlset>"
    )
    content = read_sitemap(hostile, max_size=MIB)
    assert content.pages == ("http://a/kept",)
    assert content.problem is not None


def test_broken_xml_keeps_what_came_before_the_break() -> None:
    content = read_sitemap(urlset("http://a/1")[:-10] + b"<url><loc>http://a/2</loc>", max_size=MIB)
    assert content.pages[0] == "http://a/1"
    assert content.problem is not None
    assert content.problem.startswith("ParseError")


def test_non_xml_bytes_are_a_text_sitemap_of_whatever_lines_they_have() -> None:
    content = read_sitemap(bytes(range(256)) * 4, max_size=MIB)
    assert content.problem is None  # the core keeps only lines that are URLs in scope


def test_at_most_fifty_thousand_entries_are_read_from_one_file() -> None:
    body = urlset(*(f"http://a/{n}" for n in range(60_000)))
    content = read_sitemap(body, max_size=len(body))
    assert len(content.pages) == MAX_LOCS == 50_000
    text = "\n".join(f"http://a/{n}" for n in range(60_000)).encode()
    assert len(read_sitemap(text, max_size=MIB).pages) == MAX_LOCS


def gigabyte_of_gzip() -> bytes:
    """About a megabyte of gzip that inflates to a GiB: 1024 members of a MiB each, which
    a gzip reader takes as one body (RFC 1952), made without building the GiB."""
    blank = gzip.compress(b" " * MIB)
    return gzip.compress(b"<urlset>") + blank * 1024


def test_a_gzip_bomb_stops_at_the_limit_with_bounded_memory() -> None:
    bomb = gigabyte_of_gzip()
    assert len(bomb) < 2 * MIB
    tracemalloc.start()
    try:
        content = read_sitemap(bomb, max_size=MIB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert content.problem is not None
    assert content.problem.startswith("ResponseTooLarge")
    assert peak < 8 * MIB


# -- the core's decisions ----------------------------------------------------------------


def make_state(**options: Any) -> tuple[CrawlState, list[FetchStatistic]]:
    written: list[FetchStatistic] = []
    config = CrawlConfig.create([ROOT], sitemaps=True, **options)
    return CrawlState(config, frontier=open_store(config), on_record=written.append), written


def take(state: CrawlState) -> FetchRequest:
    request = state.next_request(now=0.0)
    assert request is not None
    return request


def xml(body: bytes) -> Response:
    return Response(status=200, content_type="application/xml", body=body)


def robots_txt(text: str) -> Response:
    return Response(status=200, content_type="text/plain", body=text.encode())


def test_robots_txt_sitemap_lines_come_right_after_robots_txt() -> None:
    state, _ = make_state()
    robots = take(state)
    assert isinstance(robots, RobotsRequest)
    rules = (
        "Sitemap: http://example.com/s1.xml\nSitemap: /s2.xml\nSitemap: http://other.org/s.xml\n"
    )
    finish(state, robots, robots_txt(rules), now=0.0)
    # The sitemaps (in scope ones) go out before the root that was queued first; robots.txt,
    # which named them, is their referrer, and they are no hop from the root.
    taken = [take(state) for _ in range(3)]
    assert [(request.url, request.depth, request.referrer) for request in taken] == [
        ("http://example.com/s1.xml", 0, "http://example.com/robots.txt"),
        ("http://example.com/s2.xml", 0, "http://example.com/robots.txt"),
        (ROOT, 0, None),
    ]


def test_without_sitemap_lines_or_robots_txt_the_sitemap_is_slash_sitemap_xml() -> None:
    state, _ = make_state()
    finish(state, take(state), Response(status=404), now=0.0)
    first = take(state)
    # Named by nobody, it is found as a root is: no referrer.
    assert (first.url, first.sitemap, first.referrer) == ("http://example.com/sitemap.xml", 1, None)
    # With robots.txt ignored, the sitemap goes first, where robots.txt would have gone.
    ignoring, _ = make_state(obey_robots=False)
    assert [take(ignoring).url, take(ignoring).url] == ["http://example.com/sitemap.xml", ROOT]


def test_pages_are_one_hop_from_the_root_and_counted_in_the_record() -> None:
    state, written = make_state(obey_robots=False)
    sitemap, root = take(state), take(state)
    finish(state, root, Response(status=200, content_type="text/html", body=b""), now=0.0)
    body = urlset(ROOT, ROOT + "a", ROOT + "a#frag", "http://other.org/x", ROOT + "b")
    finish(state, sitemap, xml(body), now=0.0)
    record = written[-1]
    assert (record.url, record.status, record.content_type, record.encoding) == (
        "http://example.com/sitemap.xml",
        200,
        "application/xml",
        "utf-8",
    )
    assert (record.num_urls, record.num_new_urls) == (3, 2)  # root, /a, /b; root was seen
    assert (record.depth, record.referrer) == (0, None)
    pages = [take(state), take(state)]
    assert [(page.url, page.depth, page.sitemap, page.referrer) for page in pages] == [
        (ROOT + "a", 1, 0, sitemap.url),
        (ROOT + "b", 1, 0, sitemap.url),
    ]


def test_indexes_are_followed_three_levels_deep_each_sitemap_once() -> None:
    state, written = make_state(obey_robots=False)
    level = take(state)
    take(state)  # the root, left in flight
    for depth in (1, 2, 3):
        assert level.sitemap == depth
        child = f"http://example.com/level{depth + 1}.xml"
        finish(state, level, xml(index(child, level.url)), now=0.0)  # and itself again
        if depth < 3:
            parent, level = level, take(state)
            assert (level.url, level.depth, level.referrer) == (child, 0, parent.url)
    assert state.next_request(now=0.0) is None  # level 4 is not followed
    assert [record.num_new_urls for record in written] == [1, 1, 1]


def test_robots_txt_rules_apply_to_sitemap_entries() -> None:
    state, _ = make_state()
    robots = take(state)
    finish(state, robots, robots_txt("User-agent: *\nDisallow: /private\n"), now=0.0)
    sitemap = take(state)
    finish(state, sitemap, xml(urlset(ROOT + "private/x", ROOT + "open")), now=0.0)
    assert state.limit_counts["robots_disallowed"] == 1
    assert {take(state).url, take(state).url} == {ROOT, ROOT + "open"}


def test_a_sitemap_that_redirects_is_still_a_sitemap_at_its_target() -> None:
    state, _ = make_state(obey_robots=False)
    sitemap = take(state)
    finish(state, sitemap, Response(status=301, location="/moved.xml"), now=0.0)
    root, moved = take(state), take(state)  # the target queues behind the root
    assert (root.url, root.sitemap) == (ROOT, 0)
    assert (moved.url, moved.sitemap, moved.referrer) == (
        "http://example.com/moved.xml",
        1,
        sitemap.url,
    )


# -- a real server, every engine ---------------------------------------------------------

HANG = 60  # seconds (virtual on Trio) after which the crawl is hung


@pytest.mark.anyio
async def test_a_crawl_finds_what_only_the_sitemaps_list(engine: Engine) -> None:
    async with open_test_server() as server:
        origin = server.url("").rstrip("/")
        server.route("/", Reply.html('<a href="/linked">linked</a>'))
        server.route("/linked", Reply.html("no links"))
        server.route(
            "/robots.txt",
            Reply(
                headers=(("content-type", "text/plain"),),
                body=f"User-agent: *\nDisallow: /private\nSitemap: {origin}/index.xml\n".encode(),
            ),
        )
        server.route(
            "/index.xml", Reply(body=index(f"{origin}/pages.xml.gz", f"{origin}/index.xml"))
        )
        server.route(
            "/pages.xml.gz",
            Reply(
                headers=(("content-type", "application/octet-stream"),),
                body=gzip.compress(
                    urlset(f"{origin}/hidden", f"{origin}/private/x", f"{origin}/linked")
                ),
            ),
        )
        server.route("/hidden", Reply.html("found only through the sitemap"))
        crawler = engine.crawler([server.url("/")], sitemaps=True, max_tasks=3)
        with anyio.fail_after(engine.seconds(HANG)):
            await crawler.crawl()
    records = {record.url: record for record in crawler.done}
    assert set(records) == {
        server.url(path) for path in ("/", "/linked", "/index.xml", "/pages.xml.gz", "/hidden")
    }
    assert server.requests[:2] == ["/robots.txt", "/index.xml"]
    assert all(count == 1 for count in server.hits.values())
    assert "/private/x" not in server.hits
    pages = records[server.url("/pages.xml.gz")]
    # /private/x is in scope (robots.txt decides whether it is fetched, not its count).
    assert (pages.status, pages.num_urls, pages.exception) == (200, 3, None)
    assert crawler.limit_counts == {"robots_disallowed": 1}


@pytest.mark.trio
async def test_the_demo_site_with_sitemaps_shows_the_pages_no_link_reaches() -> None:
    site = build_demo_site()
    exchanges: list[str] = []
    with trio.fail_after(HANG):
        async with trio.open_nursery() as nursery:
            root = await nursery.start(serve_demo)
            crawler = trio_crawler.Crawler(
                [root],
                sitemaps=True,
                max_tasks=20,
                on_exchange=lambda exchange: exchanges.append(exchange.url),
            )
            await crawler.crawl()
            nursery.cancel_scope.cancel()
    urls = {record.url for record in crawler.done}
    assert urls == expected_urls(site, root, sitemaps=True)
    assert urls - expected_urls(site, root) == {
        root + "sitemap.xml",
        root + "sitemap-only/archive-index.html",
        root + "sitemap-only/changelog.html",
    }
    sitemap = next(record for record in crawler.done if record.url == root + "sitemap.xml")
    assert (sitemap.status, sitemap.content_type, sitemap.num_urls, sitemap.num_new_urls) == (
        200,
        "application/xml",
        5,
        4,  # the root was seen; the sitemap went out right after robots.txt
    )
    assert root + "sitemap.xml" in exchanges  # so it is in the WARC file too


@pytest.mark.anyio
async def test_hostile_sitemaps_each_end_in_a_record(engine: Engine) -> None:
    laughs = (
        b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><urlset><url><loc>&b;</loc></url></urlset>'
    )
    async with open_test_server() as server:
        origin = server.url("").rstrip("/")
        names = ("laughs.xml", "bomb.xml.gz", "junk.bin", "many.xml")
        robots = "".join(f"Sitemap: {origin}/{name}\n" for name in names)
        server.route("/robots.txt", Reply(body=robots.encode()))
        server.route("/laughs.xml", Reply(body=laughs))
        server.route("/bomb.xml.gz", Reply(body=gigabyte_of_gzip()))
        server.route("/junk.bin", Reply(body=bytes(range(256)) * 64))
        server.route("/many.xml", Reply(body=urlset(*(f"{origin}/p{n}" for n in range(60_000)))))
        crawler = engine.crawler(
            [server.url("/")], sitemaps=True, max_pages=8, max_size=4 * MIB, max_tasks=4
        )
        with anyio.fail_after(engine.seconds(HANG)):
            await crawler.crawl()
    records = {record.url.rpartition("/")[2]: record for record in crawler.done}
    assert records["laughs.xml"].exception is not None
    assert records["laughs.xml"].exception.startswith("DTDForbidden")
    assert records["bomb.xml.gz"].exception is not None
    assert records["bomb.xml.gz"].exception.startswith("ResponseTooLarge")
    assert (records["junk.bin"].status, records["junk.bin"].num_urls) == (200, 0)
    assert records["many.xml"].num_urls == 50_000
    assert all(records[name].status == 200 for name in names)

"""The page handler on every engine: what it is given, what it returns, what it may change.

docs/handler.md's promises, against a real HTTP server in the test's own task group: a
handler (plain, async, generator or async generator) is called once for each page read
for links and for nothing else; it gets the crawler's own parse and the page's in-scope
links in page order; the links it leaves are the ones queued and counted; what it
returns reaches ``items=`` as JSON lines in the order pages finish; what it raises is the
page's (``handler_error``), never the crawl's; and a deadline cancels it like a fetch.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import trio_crawler
from trio_crawler import ConfigError, Page
from trio_crawler import _links as links_module

import support
from conftest import Engine
from httpserver import Reply, open_test_server
from support import by_url, page, untimed

pytestmark = pytest.mark.anyio

crawl = functools.partial(support.crawl, obey_robots=False)


def read_items(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), text[-200:]
    return [json.loads(line) for line in text.splitlines()]


SITE = {
    "/": page("/a", "/b", "/files/data.csv"),
    "/a": page("/b", "/missing"),
    "/b": page("/"),
    "/files/data.csv": Reply(headers=(("content-type", "text/csv"),), body=b"x,y\n"),
}
PAGES = {"/", "/a", "/b"}  # the 200 HTML pages: the only ones a handler sees


# --- what a handler may return -------------------------------------------------------------


def returns_a_dict(page: Page) -> dict[str, Any]:
    return {"url": page.url, "n": 0}


def returns_a_list(page: Page) -> list[dict[str, Any]]:
    return [{"url": page.url, "n": 0}, {"url": page.url, "n": 1}]


def generates(page: Page) -> Iterator[dict[str, Any]]:
    for n in range(2):
        yield {"url": page.url, "n": n}


async def awaits(page: Page) -> dict[str, Any]:
    await anyio.sleep(0.01)
    return {"url": page.url, "n": 0}


async def generates_async(page: Page) -> AsyncIterator[dict[str, Any]]:
    for n in range(2):
        await anyio.lowlevel.checkpoint()
        yield {"url": page.url, "n": n}


class CallableObject:
    def __call__(self, page: Page) -> dict[str, Any]:
        return {"url": page.url, "n": 0}


@pytest.mark.parametrize(
    ("handler", "per_page"),
    [
        (returns_a_dict, 1),
        (returns_a_list, 2),
        (generates, 2),
        (awaits, 1),
        (generates_async, 2),
        (CallableObject(), 1),
    ],
    ids=["dict", "list", "generator", "async", "async-generator", "callable-object"],
)
async def test_items_are_written_in_the_order_pages_finish(
    engine: Engine, tmp_path: Path, handler: Any, per_page: int
) -> None:
    items = tmp_path / "items.jsonl"
    async with open_test_server(SITE) as server:
        crawler = await crawl(engine, server.url(), handler=handler, items=items)
    pages_in_order = [r.url for r in crawler.done if r.content_type == "text/html"]
    assert set(pages_in_order) == {server.url(p) for p in PAGES}
    expected = [{"url": url, "n": n} for url in pages_in_order for n in range(per_page)]
    assert read_items(items) == expected
    assert all(record.handler_error is None for record in crawler.done)
    assert len(crawler.done) == 5  # the 404 and the CSV have records, and no items


async def test_a_handler_returning_none_writes_nothing_and_changes_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    seen: list[str] = []
    items = tmp_path / "items.jsonl"
    async with open_test_server(SITE) as server:
        with_handler = await crawl(
            engine, server.url(), handler=lambda page: seen.append(page.url), items=items
        )
        without = await crawl(engine, server.url())
    assert sorted(seen) == sorted(server.url(p) for p in PAGES)
    assert items.read_text() == ""
    # The same records, but for when each was fetched and how long it took.
    strip = {r.url: untimed(r) for r in without.done}
    assert {url: untimed(r) for url, r in by_url(with_handler).items()} == strip


# --- what a handler is given -----------------------------------------------------------------


async def test_the_page_is_the_one_fetched_with_the_crawlers_own_parse(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses: list[object] = []
    real_parser = links_module.LexborHTMLParser

    def counting_parser(markup: Any) -> Any:
        parses.append(markup)
        return real_parser(markup)

    monkeypatch.setattr(links_module, "LexborHTMLParser", counting_parser)
    body = (
        "<html><head><title>Caf\xe9</title></head><body>"
        '<a href="/z">z</a> <a href="/y#frag">y</a> <a href="/z">again</a> '
        '<a href="http://elsewhere.test/">out</a> <a href="mailto:a@b">mail</a> '
        '<a href="/y">y again</a> <a href="/x">x</a></body></html>'
    )
    routes = {
        "/": Reply(
            headers=(("content-type", "text/html; charset=iso-8859-1"), ("X-Custom", "yes")),
            body=body.encode("latin-1"),
        ),
        "/z": page("/"),
        "/y": page(),
        "/x": page(),
    }
    pages: dict[str, dict[str, Any]] = {}

    def look(page: Page) -> None:
        title = page.tree.css_first("title")
        pages[page.url] = {
            "status": page.status,
            "header": page.headers["x-custom"] if "X-CUSTOM" in page.headers else None,
            "type": page.headers.get("Content-Type"),
            "content": page.content,
            "text": page.text,
            "encoding": page.encoding,
            "content_type": page.content_type,
            "depth": page.depth,
            "referrer": page.referrer,
            "title": title.text() if title is not None else None,
            "links": list(page.links),
        }

    async with open_test_server(routes) as server:
        crawler = await crawl(engine, server.url(), handler=look)
    root = pages[server.url()]
    assert root == {
        "status": 200,
        "header": "yes",
        "type": "text/html; charset=iso-8859-1",
        "content": body.encode("latin-1"),
        "text": body,
        "encoding": "iso-8859-1",
        "content_type": "text/html",
        "depth": 0,
        "referrer": None,
        "title": "Café",
        # Distinct, in scope, resolved, fragment dropped, in the order the page gives them.
        "links": [server.url("/z"), server.url("/y"), server.url("/x")],
    }
    assert pages[server.url("/z")]["depth"] == 1
    assert pages[server.url("/z")]["links"] == [server.url()]
    # One parse per page: the handler's tree is the one the links came from.
    assert len(parses) == len(pages) == 4
    assert by_url(crawler)[server.url()].num_urls == 3


async def test_a_nofollow_page_is_handed_over_without_links_and_follows_nothing(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses: list[object] = []
    real_parser = links_module.LexborHTMLParser
    monkeypatch.setattr(
        links_module,
        "LexborHTMLParser",
        lambda markup: parses.append(markup) or real_parser(markup),
    )
    header_says = Reply(
        headers=(("content-type", "text/html"), ("x-robots-tag", "nofollow")),
        body=b"<title>T</title><a href='/c'>c</a>",
    )
    routes = {
        "/": page("/a", "/b"),
        "/a": page("/c", extra='<meta name="robots" content="nofollow">'),
        "/b": header_says,
        "/c": page(),
    }
    seen: dict[str, tuple[list[str], str | None, str]] = {}

    def follow_c(page: Page) -> None:
        if page.depth == 0:
            return
        followed = page.follow("/c")
        seen[page.url] = (list(page.links), followed, page.tree.css_first("a").text())

    async with open_test_server(routes) as server:
        crawler = await crawl(engine, server.url(), handler=follow_c, obey_robots=True)
    assert seen[server.url("/a")] == ([], None, "/c")
    assert seen[server.url("/b")] == ([], None, "c")  # parsed for the handler, once
    assert server.url("/c") not in by_url(crawler)
    assert len(parses) == 3


async def test_sitemaps_redirects_errors_and_other_files_go_to_no_handler(engine: Engine) -> None:
    routes = {
        "/": page("/moved", "/missing", "/files/data.csv", "/feed.xml"),
        "/moved": Reply.redirect("/landing"),
        "/landing": page(),
        "/files/data.csv": Reply(headers=(("content-type", "text/csv"),), body=b"a"),
        "/feed.xml": Reply(headers=(("content-type", "application/xml"),), body=b"<a href='/'/>"),
        "/sitemap.xml": Reply(
            headers=(("content-type", "application/xml"),),
            body=b"<urlset><url><loc>http://127.0.0.1/</loc></url></urlset>",
        ),
    }
    handled: list[str] = []
    async with open_test_server(routes) as server:
        crawler = await crawl(
            engine, server.url(), handler=lambda page: handled.append(page.url), sitemaps=True
        )
    assert server.url("/sitemap.xml") in by_url(crawler)
    assert sorted(handled) == sorted(server.url(p) for p in ("/", "/landing", "/feed.xml"))


# --- steering --------------------------------------------------------------------------------


async def test_links_taken_out_are_not_queued_and_followed_ones_are(engine: Engine) -> None:
    routes = {
        "/": page("/a", "/b", "/c"),
        "/a": page("/a1"),
        "/b": page("/b1"),
        "/c": page(),
        "/a1": page(),
        "/b1": page(),
        "/hidden": page(),  # no link reaches it
    }
    followed: list[str | None] = []

    def steer(page: Page) -> None:
        page.links[:] = [link for link in page.links if not link.endswith(("/b", "/c"))]
        if page.depth == 0:
            followed.append(page.follow("hidden"))  # relative, as a link on the page
            followed.append(page.follow("/a"))  # already there: not added twice
            followed.append(page.follow("http://elsewhere.test/"))  # out of scope
            followed.append(page.follow("javascript:void(0)"))
            followed.append(page.follow("/excluded/x"))  # --exclude still applies
            page.links.append("/a1")  # written in by hand: read as follow() reads it

    async with open_test_server(routes) as server:
        crawler = await crawl(engine, server.url(), handler=steer, exclude="/excluded/")
    records = by_url(crawler)
    assert set(records) == {server.url(p) for p in ("/", "/a", "/hidden", "/a1")}
    assert followed == [server.url("/hidden"), server.url("/a"), None, None, None]
    root = records[server.url()]
    # num_urls counts what was finally queued: /a, /hidden, /a1; all three new.
    assert (root.num_urls, root.num_new_urls) == (3, 3)
    assert records[server.url("/a")].num_new_urls == 0  # /a1 came from the root


async def test_followed_links_keep_to_max_depth(engine: Engine) -> None:
    routes = {"/": page(), "/deep": page("/deeper"), "/deeper": page()}

    def follow_deep(page: Page) -> None:
        page.follow("/deep")

    async with open_test_server(routes) as server:
        crawler = await crawl(engine, server.url(), handler=follow_deep, max_depth=1)
    assert set(by_url(crawler)) == {server.url(), server.url("/deep")}
    assert crawler.limit_counts == {"beyond_max_depth": 1}


# --- errors ----------------------------------------------------------------------------------


def fails_on_a(page: Page) -> Iterator[dict[str, Any]]:
    yield {"url": page.url}
    if page.url.endswith("/a"):
        raise ValueError("no good")


@pytest.mark.parametrize(
    ("make_item", "error"),
    [
        (lambda url: {"url": url, "tags": {"a"}}, "TypeError: Object of type set is not JSON"),
        (lambda url: {"url": url, "x": float("nan")}, "ValueError: Out of range float values"),
        (lambda url: [url], "TypeError: an item must be a dict, not list"),
        (lambda url: {"url": url + "\ud800"}, "UnicodeEncodeError: 'utf-8' codec can't encode"),
    ],
    ids=["set", "nan", "not-a-dict", "lone-surrogate"],
)
async def test_an_item_that_is_no_json_object_is_the_pages_handler_error(
    engine: Engine, tmp_path: Path, make_item: Any, error: str
) -> None:
    def handler(page: Page) -> list[object]:
        good = {"url": page.url}
        return [good, make_item(page.url)] if page.url.endswith("/a") else [good]

    items = tmp_path / "items.jsonl"
    async with open_test_server(SITE) as server:
        crawler = await crawl(engine, server.url(), handler=handler, items=items)
    records = by_url(crawler)
    failed = records[server.url("/a")].handler_error
    assert failed is not None
    assert failed.startswith(error)
    assert sorted(item["url"] for item in read_items(items)) == [server.url(), server.url("/b")]


async def test_a_handler_that_raises_costs_its_page_its_items_not_its_links(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    items = tmp_path / "items.jsonl"

    def take_links_then_fail(page: Page) -> None:
        if page.url.endswith("/a"):
            page.links.clear()  # undone: a handler that raised changes nothing
            raise ValueError("no good")

    caplog.set_level(logging.INFO, logger="trio_crawler")
    async with open_test_server(SITE) as server:
        crawler = await crawl(engine, server.url(), handler=fails_on_a, items=items)
        second = await crawl(engine, server.url(), handler=take_links_then_fail)
    records = by_url(crawler)
    assert records[server.url("/a")].handler_error == "ValueError: no good"
    assert records[server.url("/a")].num_urls == 2
    assert server.url("/missing") in records  # /a's links were queued all the same
    assert [r.url for r in crawler.done if r.handler_error] == [server.url("/a")]
    assert sorted(item["url"] for item in read_items(items)) == [server.url(), server.url("/b")]
    assert "the page handler raised on " + server.url("/a") in caplog.text
    assert 'raise ValueError("no good")' in caplog.text  # the traceback, at INFO
    assert crawler.finish_reason == "finished"
    # Taking links and then raising: the handler's edits are dropped with its items.
    assert server.url("/missing") in by_url(second)


@pytest.mark.parametrize(
    ("returned", "error"),
    [
        ("a string", "TypeError: the page handler returned str: return None, a dict or"),
        (42, "TypeError: the page handler returned int: return None, a dict or"),
    ],
)
async def test_a_handler_returning_something_else_is_a_handler_error(
    engine: Engine, returned: object, error: str
) -> None:
    async with open_test_server({"/": page()}) as server:
        crawler = await crawl(engine, server.url(), handler=lambda page: returned)
    failed = crawler.done[0].handler_error
    assert failed is not None
    assert failed.startswith(error)


# --- cancellation ----------------------------------------------------------------------------


async def test_the_deadline_cancels_a_running_handler_like_a_fetch(
    engine: Engine, tmp_path: Path
) -> None:
    started = anyio.Event()
    cancelled: list[str] = []

    async def hangs_on_a(page: Page) -> dict[str, Any]:
        if page.url.endswith("/a"):
            started.set()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                cancelled.append(page.url)
                raise
        return {"url": page.url}

    items = tmp_path / "items.jsonl"
    async with open_test_server(SITE) as server:
        crawler = await crawl(
            engine, server.url(), handler=hangs_on_a, items=items, max_time=engine.seconds(5.0)
        )
    assert started.is_set()
    assert cancelled == [server.url("/a")]
    assert crawler.finish_reason == "deadline"
    assert server.url("/a") not in by_url(crawler)  # no record, and no item
    assert server.url("/a") not in [item["url"] for item in read_items(items)]
    assert crawler.statistics().todo >= 1
    engine.assert_duration(crawler.elapsed, engine.seconds(5.0))


async def test_stop_with_grace_lets_a_handler_finish(engine: Engine, tmp_path: Path) -> None:
    crawler_box: list[Any] = []

    async def stops_then_waits(page: Page) -> dict[str, Any]:
        crawler_box[0].stop(grace=engine.seconds(10.0))  # as the first Ctrl-C does
        await anyio.sleep(engine.seconds(1.0))
        return {"url": page.url}

    items = tmp_path / "items.jsonl"
    async with open_test_server(SITE) as server:
        crawler = engine.crawler(
            [server.url()], obey_robots=False, handler=stops_then_waits, items=items
        )
        crawler_box.append(crawler)
        with anyio.fail_after(support.HANG_LIMIT):
            await crawler.crawl()
    assert crawler.finish_reason == "interrupted"
    assert [r.url for r in crawler.done] == [server.url()]
    assert read_items(items) == [{"url": server.url()}]


# --- checked when the crawl is built --------------------------------------------------------


def two_arguments(page: Page, other: int) -> None:
    return None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"handler": 3}, "handler must be a function taking the page, not 3"),
        (
            {"handler": two_arguments},
            "handler must take one argument, the page, not two_arguments(page: 'Page', other: "
            "'int') -> 'None'",
        ),
        ({"handler": lambda: None}, "handler must take one argument, the page, not <lambda>()"),
        ({"items": "items.jsonl"}, "items needs handler: the items are what it returns"),
        ({"handler": print, "items": ""}, "items must be a file path or '-', not ''"),
        ({"handler": print, "items": "/no/such/dir/items.jsonl"}, "items '/no/such/dir/items"),
    ],
)
def test_a_handler_the_crawl_cannot_call_is_refused_when_the_crawler_is_made(
    engine: Engine, tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{message.replace('(', '.').replace(')', '.')}"):
        engine.crawler(["http://127.0.0.1:9/"], **options)
    assert list(tmp_path.iterdir()) == []


def test_a_handler_without_items_opens_no_items_file() -> None:
    crawler = trio_crawler.Crawler(["example.com"], handler=returns_a_dict)
    assert crawler.item_files is None

"""What to crawl and how to ask for it: ``--include``, ``--no-parent``, ``-i`` and ``--header``.

The contract's "Scope" section, from the pages issue on: ``--include`` and ``--no-parent``
narrow the links and redirect targets a crawl follows (roots are always fetched; sitemaps
are read, and the pages they list narrowed); ``-i FILE`` adds roots, one a line, after those
on the command line; ``--header`` goes with every request, robots.txt and sitemaps
included. Scope is decided in the core, the same for every engine, so its crawl runs on
one; the headers are sent by each engine's clients, so that test runs on all four. Real
servers throughout; the command line as a child process where the flags are what is
tested.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import coredis
import httpx
import pytest
import trio
from redis_server import running_redis

from trio_crawler import engine_trio
from trio_crawler._cluster import prefix_of
from trio_crawler._events import Exchange

import support
from conftest import Engine
from httpserver import Reply, Request, TestServer, open_test_server
from support import HANG_LIMIT, by_url, page, read_records, run_cli


def xml(body: str) -> Reply:
    return Reply(status=200, headers=(("content-type", "application/xml"),), body=body.encode())


def text(body: str) -> Reply:
    return Reply(status=200, headers=(("content-type", "text/plain"),), body=body.encode())


def urlset(*locs: str) -> Reply:
    entries = "".join(f"<url><loc>{loc}</loc></url>" for loc in locs)
    return xml(f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>')


def noting(
    seen: dict[str, list[dict[str, str]]], target: str, reply: Reply
) -> Callable[[Request], Awaitable[Reply]]:
    """A handler that answers ``reply`` and notes the headers of each request for it."""

    async def handler(request: Request) -> Reply:
        seen.setdefault(target, []).append(dict(request.headers))
        return reply

    return handler


# -- --include and --no-parent -----------------------------------------------------------


@pytest.mark.trio
async def test_include_and_no_parent_narrow_links_and_redirects_not_roots_or_sitemaps() -> None:
    """Both rules together: a link or redirect target must match an --include pattern and
    be under a root's directory. Roots are fetched whatever they are; /sitemap.xml is read
    (neither rule is for it) and its pages narrowed like links."""
    async with open_test_server() as server:
        url = server.url
        server.route("/robots.txt", text(f"User-agent: *\nSitemap: {url('/sitemap.xml')}\n"))
        server.route("/sitemap.xml", urlset(url("/docs/listed"), url("/news/listed")))
        server.route(
            "/docs/",
            page("/docs/a", "/docs/sub/b", "/docs-old/c", "/news/d", "/docs/to-news", "/docs/to"),
        )
        server.route("/docs/to-news", Reply.redirect("/news/e"))  # out of the include
        server.route("/docs/to", Reply.redirect("/docs/sub/f"))
        for path in ("/docs/a", "/docs/sub/b", "/docs/sub/f", "/docs/listed", "/news/e"):
            server.route(path, page())
        # A root the rules would not admit: fetched, and its links held to them.
        server.route("/news/", page("/news/g", "/docs/via-news"))
        server.route("/docs/via-news", page())
        crawler = engine_trio.Crawler(
            [url("/docs/"), url("/news/")],
            include=[r"/docs/", r"/news/$"],
            no_parent=True,
            sitemaps=True,
            max_tasks=3,
        )
        with trio.fail_after(HANG_LIMIT):
            await crawler.crawl()
    fetched = set(server.hits) - {"/robots.txt"}
    assert fetched == {
        "/docs/",
        "/news/",
        "/sitemap.xml",
        "/docs/a",
        "/docs/sub/b",
        "/docs/to-news",
        "/docs/to",
        "/docs/sub/f",
        "/docs/listed",
        "/docs/via-news",
    }
    records = by_url(crawler)
    assert records[url("/docs/to-news")].next_url == url("/news/e")  # recorded, not followed
    assert records[url("/docs/")].num_urls == 4  # /docs/a, /docs/sub/b and the redirects
    assert records[url("/sitemap.xml")].num_urls == 1


@pytest.mark.trio
async def test_no_parent_keeps_each_root_to_its_own_directory() -> None:
    """Two roots on one host, a file and a directory: each admits what is under its own
    directory, as wget -np does for each start URL."""
    async with open_test_server() as server:
        server.route("/a/index.html", page("/a/1", "/b/2", "/c/3"))
        server.route("/b/", page("/b/4", "/"))
        for path in ("/a/1", "/b/2", "/b/4"):
            server.route(path, page())
        crawler = engine_trio.Crawler(
            [server.url("/a/index.html"), server.url("/b/")], no_parent=True, obey_robots=False
        )
        with trio.fail_after(HANG_LIMIT):
            await crawler.crawl()
    assert set(server.hits) == {"/a/index.html", "/b/", "/a/1", "/b/2", "/b/4"}


# -- --header -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_every_request_carries_the_headers_robots_txt_and_sitemaps_included(
    engine: Engine,
) -> None:
    seen: dict[str, list[dict[str, str]]] = {}
    exchanges: list[Exchange] = []
    async with open_test_server() as server:
        origin = server.url("").rstrip("/")
        routes = {
            "/robots.txt": text(f"User-agent: *\nSitemap: {origin}/sitemap.xml\n"),
            "/sitemap.xml": urlset(f"{origin}/listed"),
            "/": page("/linked"),
            "/linked": page(),
            "/listed": page(),
        }
        for target, reply in routes.items():
            server.route(target, noting(seen, target, reply))
        await support.crawl(
            engine,
            server.url(),
            sitemaps=True,
            headers=[("X-Token", "t0ken"), ("Accept", "text/html")],
            on_exchange=exchanges.append,
        )
    assert sorted(seen) == sorted(routes)
    for target, requests in seen.items():
        assert [(r["x-token"], r["accept"]) for r in requests] == [("t0ken", "text/html")], target
    # The header given replaced the crawler's own Accept: it was sent once.
    for exchange in exchanges:
        names = [name.lower() for name, _ in exchange.request_headers]
        assert names.count("accept") == 1, exchange.request_headers
        assert names.count("x-token") == 1, exchange.request_headers


@pytest.mark.trio
async def test_a_callers_client_gets_the_headers_with_each_request() -> None:
    """A ``client=`` of the caller's carries none of the crawl's headers: they go with each
    request, as the User-Agent does."""
    seen: dict[str, list[dict[str, str]]] = {}
    async with open_test_server() as server:
        server.route("/robots.txt", noting(seen, "/robots.txt", text("")))
        server.route("/", noting(seen, "/", page()))
        async with httpx.AsyncClient() as client:
            crawler = engine_trio.Crawler(
                [server.url()], client=client, headers={"Authorization": "Bearer b"}
            )
            with trio.fail_after(HANG_LIMIT):
                await crawler.crawl()
    assert {
        target: [r["authorization"] for r in requests] for target, requests in seen.items()
    } == {
        "/robots.txt": ["Bearer b"],
        "/": ["Bearer b"],
    }


# -- -i FILE ------------------------------------------------------------------------------


async def crawl_with_roots_file(
    server: TestServer, tmp_path: Path, listed: str, *, stdin: bool
) -> list[str]:
    """Run the command with ``/first`` as its ROOT and ``listed`` as -i's file (or stdin);
    the URLs of its records, in order."""
    output = tmp_path / "out.jsonl"
    args = ["-o", str(output), "--max-tasks", "1", "--ignore-robots", "--no-progress"]
    args += ["--header", "X-Token: from-the-command-line"]
    if stdin:
        command = [sys.executable, "-m", "trio_crawler", *args, "-i", "-", server.url("/first")]
        run = await trio.run_process(
            command, stdin=listed.encode(), capture_stdout=True, capture_stderr=True, check=False
        )
    else:
        roots = tmp_path / "roots.txt"
        await anyio.Path(roots).write_text(listed, encoding="utf-8")
        run = await run_cli(*args, "-i", str(roots), server.url("/first"))
    assert run.returncode == 0, run.stderr.decode()
    return [str(record["url"]) for record in read_records(output)]


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
@pytest.mark.trio
async def test_input_file_adds_roots_after_the_command_lines(tmp_path: Path, stdin: bool) -> None:
    seen: dict[str, list[dict[str, str]]] = {}
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            for target in ("/first", "/b", "/a", "/c"):
                server.route(target, noting(seen, target, page()))
            listed = f"# roots\n{server.url('/b')}\n\n  {server.url('/a')}  \n{server.url('/c')}\n"
            urls = await crawl_with_roots_file(server, tmp_path, listed, stdin=stdin)
    assert urls == [server.url(path) for path in ("/first", "/b", "/a", "/c")]
    assert {r["x-token"] for requests in seen.values() for r in requests} == {
        "from-the-command-line"
    }


@pytest.mark.trio
async def test_a_shared_crawl_keeps_include_but_not_the_headers(tmp_path: Path) -> None:
    """What the server keeps for the processes that join: the options that say what to
    crawl, --include among them; not the headers, which may hold credentials."""
    with running_redis(tmp_path / "redis") as redis, trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": page()}) as server:
            crawler = engine_trio.Crawler(
                [server.url()],
                frontier=redis.url(),
                include=["/only/"],
                headers={"Authorization": "Bearer secret"},
            )
            await crawler.crawl()
        async with coredis.Redis(port=redis.port, decode_responses=True) as client:
            stored = json.loads(await client.hget(prefix_of("crawl") + "meta", "options"))
            everything = json.dumps(await client.hgetall(prefix_of("crawl") + "meta"))
    assert stored["include"] == ["/only/"]
    assert "headers" not in stored
    assert "secret" not in everything

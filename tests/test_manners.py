"""Manners, on every engine against a real server: robots.txt, the User-Agent, per-host limits.

Each requirement of the manners issue is shown on the wire: which requests the server saw,
in what order, with which User-Agent, and when each one arrived. On Trio's virtual clock the
times are exact, so "Crawl-delay: 2" shows as request starts exactly two seconds apart. On
asyncio the same scenarios run on the real clock with their times scaled down
(``engine.seconds``), where a request's start as the server sees it jitters with the load
on the machine, so only coarser bounds are checked there (see :func:`assert_gaps`).

Three things are not scaled that way: ``Retry-After`` takes whole seconds, so on the real
clock it is 1 (the least that still waits); the 60 s cap on a host's Crawl-delay is lowered
for the real-clock engines rather than spending a minute per test; and so is the backoff's
first step (a twentieth of a second there), whose jitter comes from a seeded generator.

test_state.py steps the same rules through the core by hand.
"""

from __future__ import annotations

import email.utils
import gzip
import logging
import random
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from itertools import pairwise

import anyio
import httpx
import pytest

import trio_crawler._retry_policy as retry_policy
import trio_crawler._state as state_module
from trio_crawler import FetchStatistic, __version__
from trio_crawler._config import MAX_HOST_DELAY
from trio_crawler._crawler import CrawlerBase
from trio_crawler._fetch import ROBOTS_MAX_SIZE
from trio_crawler._retry_policy import backoff_wait
from trio_crawler._transport import choose_transport

from conftest import Engine
from httpserver import Handler, Reply, Request, TestServer, open_test_server
from support import HANG_LIMIT, by_url, crawl, page, untimed

pytestmark = pytest.mark.anyio


NOT_FOUND = Reply.html("not found", status=404)


def robots_txt(text: str, *, status: int = 200) -> Reply:
    return Reply(status=status, headers=[("content-type", "text/plain")], body=text.encode())


@dataclass(frozen=True, slots=True)
class Hit:
    """One request, as the server saw it arrive."""

    target: str
    start: float  # anyio.current_time() when it arrived: virtual on Trio
    user_agent: str | None


class Site:
    """A test server whose every request goes through one handler that notes it.

    ``TestServer`` counts targets; these tests also need when each request arrived and the
    User-Agent it carried, so the routes are served from its ``fallback``. A request the
    server drops (``drop_first``) never reaches a handler and is only in ``server.requests``.
    """

    def __init__(self, server: TestServer, routes: Mapping[str, Handler], default: Handler):
        self.server = server
        self.routes = dict(routes)
        self.default = default
        self.hits: list[Hit] = []
        server.fallback(self._handle)

    def url(self, target: str = "/") -> str:
        return self.server.url(target)

    def targets(self) -> list[str]:
        return [hit.target for hit in self.hits]

    def starts(self, target: str | None = None) -> list[float]:
        return [hit.start for hit in self.hits if target is None or hit.target == target]

    async def _handle(self, request: Request) -> Reply:
        user_agent = request.headers.get("user-agent")
        self.hits.append(Hit(request.target, anyio.current_time(), user_agent))
        handler = self.routes.get(request.target, self.default)
        return handler if isinstance(handler, Reply) else await handler(request)


@asynccontextmanager
async def open_site(
    routes: Mapping[str, Handler] | None = None, *, default: Handler = NOT_FOUND
) -> AsyncIterator[Site]:
    """A :class:`Site` on 127.0.0.1; targets not in ``routes`` get ``default`` (a 404)."""
    async with open_test_server() as server:
        yield Site(server, routes or {}, default)


def assert_gaps(engine: Engine, starts: list[float], expected: list[float]) -> None:
    """The gaps between consecutive ``starts`` are ``expected``, exactly, on virtual time.

    On the real clock a request reaches the server some milliseconds after the core hands
    it out, and on a loaded machine one request can be late by more than a scaled-down
    delay, which shortens the gap after it. There only the whole span is checked, and only
    for half of what was asked: a delay that was not kept at all still fails. (The delay
    tests also check ``crawler.elapsed``, the engine's own clock, for the full lower bound.)
    """
    gaps = [later - earlier for earlier, later in pairwise(starts)]
    assert len(gaps) == len(expected), f"{len(starts)} starts: {starts}"
    if engine.virtual_time:
        assert gaps == pytest.approx(expected, abs=1e-6)
    else:
        assert sum(gaps) >= sum(expected) / 2, gaps


def retry_after_seconds(engine: Engine) -> int:
    """Retry-After is whole seconds: 3 on virtual time, 1 (the least that waits) on the real
    clock, where it is real waiting."""
    return 3 if engine.virtual_time else 1


async def slow_page(engine: Engine, request: Request) -> Reply:
    await anyio.sleep(engine.seconds(1))
    return page()


# -- robots.txt: fetched once per origin, before anything else there ----------------------


async def test_robots_txt_is_fetched_once_before_the_first_page(engine: Engine) -> None:
    pages = [f"/p{i}" for i in range(20)]
    async with open_site({"/": page(*pages)}, default=page()) as site:
        crawler = await crawl(engine, site.url(), max_tasks=10)
    assert site.server.hits["/robots.txt"] == 1
    assert site.targets()[:2] == ["/robots.txt", "/"]
    assert sorted(site.targets()[2:]) == sorted(pages)
    # It is not a record, not a page, and not a seen URL.
    assert set(by_url(crawler)) == {site.url()} | {site.url(p) for p in pages}
    assert site.url("/robots.txt") not in crawler.seen_urls
    assert crawler.statistics().todo == 0
    assert crawler.finish_reason == "finished"


async def test_concurrent_workers_wait_for_the_one_robots_fetch(engine: Engine) -> None:
    async def slow_robots(request: Request) -> Reply:
        await anyio.sleep(engine.seconds(1))
        return robots_txt("User-agent: *\nDisallow: /private\n")

    async with open_site({"/robots.txt": slow_robots}, default=page()) as site:
        roots = [site.url(f"/p{i}") for i in range(20)]
        crawler = await crawl(engine, roots, max_tasks=10)
    assert site.server.hits["/robots.txt"] == 1
    assert len(crawler.done) == 20
    [robots_start] = site.starts("/robots.txt")
    page_starts = [hit.start - robots_start for hit in site.hits if hit.target != "/robots.txt"]
    assert len(page_starts) == 20
    # No page starts before robots.txt has answered, a second later.
    assert min(page_starts) >= engine.seconds(1)
    if engine.virtual_time:
        assert page_starts == pytest.approx([1.0] * 20)


async def test_each_origin_gets_its_own_robots_txt_once(engine: Engine) -> None:
    """Two servers on 127.0.0.1 are two origins (the port differs) in one scope (the port
    is not part of host matching): each robots.txt is fetched once and rules only its own."""
    b_rules = robots_txt("User-agent: *\nDisallow: /private\n")
    async with (
        open_site(default=page()) as site_a,
        open_site({"/robots.txt": b_rules}, default=page()) as site_b,
    ):
        links = [f"/p{i}" for i in range(10)] + ["/private"]
        site_a.routes["/"] = page(*links, *(site_b.url(link) for link in links))
        crawler = await crawl(engine, site_a.url(), max_tasks=10)
    assert site_a.server.hits["/robots.txt"] == 1
    assert site_b.server.hits["/robots.txt"] == 1
    assert site_b.targets()[0] == "/robots.txt"
    assert "/private" in site_a.targets()  # A has no robots.txt (404): all allowed
    assert "/private" not in site_b.targets()
    expected = {site_a.url()} | {site_a.url(link) for link in links}
    expected |= {site_b.url(link) for link in links if link != "/private"}
    assert set(by_url(crawler)) == expected
    assert crawler.limit_counts == {"robots_disallowed": 1}


async def test_disallowed_urls_are_not_fetched_recorded_or_queued(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    routes = {
        "/robots.txt": robots_txt("User-agent: *\nDisallow: /private\n"),
        "/": page("/private/x", "/public"),
        "/public": page("/private/x"),  # linked twice: counted once
    }
    async with open_site(routes) as site:
        with caplog.at_level(logging.INFO, logger="trio_crawler"):
            # Roots obey robots.txt too.
            crawler = await crawl(engine, [site.url(), site.url("/private/root")])
    assert sorted(site.targets()) == ["/", "/public", "/robots.txt"]
    assert set(by_url(crawler)) == {site.url(), site.url("/public")}
    assert crawler.limit_counts == {"robots_disallowed": 2}
    assert f"robots.txt disallows {site.url('/private/x')}" in caplog.text
    assert f"robots.txt disallows {site.url('/private/root')}" in caplog.text
    assert crawler.finish_reason == "finished"


@pytest.mark.parametrize("content_encoding", [None, "gzip"])
async def test_a_robots_txt_over_500_kib_is_obeyed_up_to_its_last_whole_line(
    engine: Engine, content_encoding: str | None
) -> None:
    # RFC 9309, 2.5: parse at least 500 KiB, ignore the rest. The first rule comes just
    # before the limit (far past --max-size); the limit falls inside the second, whose
    # cut-off start ("Disallow: /cu") must not count either; the third is past it.
    head, early, cut_rule = "User-agent: *\n", "Disallow: /early\n", "Disallow: /cut-in-half\n"
    padding = ROBOTS_MAX_SIZE - len("Disallow: /cu") - len(head) - len(early)
    comment = "#" + "x" * (padding - 2) + "\n"
    text = head + comment + early + cut_rule + "Disallow: /late\n" + comment
    assert text.index(cut_rule) + len("Disallow: /cu") == ROBOTS_MAX_SIZE
    body = text.encode()
    headers = [("content-type", "text/plain")]
    if content_encoding == "gzip":
        body = gzip.compress(body)
        headers.append(("content-encoding", "gzip"))
    routes = {
        "/robots.txt": Reply(headers=headers, body=body),
        "/": page("/early", "/cu", "/late"),
    }
    async with open_site(routes, default=page()) as site:
        crawler = await crawl(engine, site.url(), max_size=1000)  # --max-size is not the limit
    assert sorted(site.targets()) == ["/", "/cu", "/late", "/robots.txt"]
    assert crawler.limit_counts == {"robots_disallowed": 1}
    assert crawler.finish_reason == "finished"


@pytest.mark.parametrize(
    ("status", "allowed"),
    [
        (200, False),  # the file's "Disallow: /" applies
        (401, True),  # 4xx: unavailable, everything allowed (RFC 9309, 2.3.1.3)
        (403, True),
        (404, True),
        (410, True),
        (500, False),  # 5xx: unreachable, everything disallowed (RFC 9309, 2.3.1.4)
        (503, False),
    ],
)
async def test_robots_txt_status_decides_the_rules(
    engine: Engine, status: int, allowed: bool
) -> None:
    # Every status carries the same body; only a 2xx makes it count.
    routes = {"/robots.txt": robots_txt("User-agent: *\nDisallow: /\n", status=status)}
    async with open_site(routes, default=page("/b")) as site:
        crawler = await crawl(engine, [site.url(), site.url("/a")])
    if allowed:
        assert set(by_url(crawler)) == {site.url(), site.url("/a"), site.url("/b")}
        assert crawler.limit_counts == {}
    else:
        assert site.targets() == ["/robots.txt"]  # not retried, and nothing else fetched
        assert crawler.done == []  # not even the roots
        assert crawler.limit_counts == {"robots_disallowed": 2}
    assert crawler.finish_reason == "finished"


async def test_robots_txt_network_error_fails_every_url_of_that_origin(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_site({"/": page("/a")}) as down, open_site({"/": page()}) as up:
        down.server.drop_first("/robots.txt", 100)
        with caplog.at_level(logging.INFO, logger="trio_crawler"):
            crawler = await crawl(engine, [down.url(), down.url("/b"), up.url()], max_tries=3)
    assert down.server.requests == ["/robots.txt"] * 3  # max_tries attempts, then no more
    records = by_url(crawler)
    assert set(records) == {down.url(), down.url("/b"), up.url()}
    for url in (down.url(), down.url("/b")):
        exception = records[url].exception
        assert records[url].status is None
        assert exception is not None
        assert exception.startswith("RemoteProtocolError")
    assert records[up.url()].status == 200  # the other origin is not affected
    assert crawler.statistics().fail == 2
    robots = down.url("/robots.txt")
    assert f"try 3 for {robots} raised RemoteProtocolError" in caplog.text
    assert f"; not fetching from {down.url('/').rstrip('/')}" in caplog.text


async def test_refused_robots_txt_connection_fails_the_roots(engine: Engine) -> None:
    async with open_test_server() as server:
        dead = server.url()  # nothing listens there once the block ends
    crawler = await crawl(engine, [dead, dead + "x"], max_tries=2)
    assert [stat.url for stat in crawler.done] == [dead, dead + "x"]
    for stat in crawler.done:
        assert stat.status is None
        assert stat.exception is not None
        assert stat.exception.startswith("ConnectError")


async def test_robots_txt_redirect_is_followed(engine: Engine) -> None:
    routes = {
        "/robots.txt": Reply.redirect("/real-robots.txt", status=301),
        "/real-robots.txt": robots_txt("User-agent: *\nDisallow: /private\n"),
        "/": page("/private", "/public"),
    }
    async with open_site(routes) as site:
        crawler = await crawl(engine, site.url())
    assert site.targets()[:2] == ["/robots.txt", "/real-robots.txt"]
    assert sorted(site.targets()[2:]) == ["/", "/public"]
    assert set(by_url(crawler)) == {site.url(), site.url("/public")}
    assert crawler.limit_counts == {"robots_disallowed": 1}


async def test_obey_robots_false_makes_no_robots_request(engine: Engine) -> None:
    routes = {"/robots.txt": robots_txt("User-agent: *\nDisallow: /\n"), "/": page("/a")}
    async with open_site(routes) as site:
        crawler = await crawl(engine, site.url(), obey_robots=False)
    assert site.targets() == ["/", "/a"]
    assert crawler.limit_counts == {}


OUR_GROUP = "User-agent: trio-crawler\nDisallow: /mine\n\nUser-agent: *\nDisallow: /\n"


@pytest.mark.parametrize(
    ("rules", "user_agent", "fetched"),
    [
        # Our group applies, not the catch-all, whatever User-Agent header is sent.
        pytest.param(OUR_GROUP, None, ["/yours"], id="our-group"),
        pytest.param(OUR_GROUP, "MyBot/1.0", ["/yours"], id="our-group-custom-agent"),
        pytest.param(
            OUR_GROUP.replace("trio-crawler", "Trio-Crawler"),
            "MyBot/1.0",
            ["/yours"],
            id="our-group-any-case",
        ),
        # No group of ours: the catch-all applies.
        pytest.param("User-agent: *\nDisallow: /mine\n", "MyBot/1.0", ["/yours"], id="catch-all"),
        # Only someone else's group: nothing applies to us.
        pytest.param("User-agent: otherbot\nDisallow: /\n", None, ["/mine", "/yours"], id="not-us"),
    ],
)
async def test_rules_are_matched_on_the_product_token(
    engine: Engine, rules: str, user_agent: str | None, fetched: list[str]
) -> None:
    routes = {"/robots.txt": robots_txt(rules), "/": page("/mine", "/yours")}
    async with open_site(routes) as site:
        await crawl(engine, site.url(), user_agent=user_agent)
    assert sorted(site.targets()) == sorted(["/robots.txt", "/", *fetched])


async def test_robots_txt_is_not_a_page_for_max_pages(engine: Engine) -> None:
    routes = {
        "/robots.txt": robots_txt("User-agent: *\nDisallow: /a\n"),
        "/": page("/a", "/b", "/c"),
    }
    async with open_site(routes) as site:
        crawler = await crawl(engine, site.url(), max_pages=2)
    # robots.txt and the disallowed /a take no share of the two pages.
    assert [stat.url for stat in crawler.done] == [site.url(), site.url("/b")]
    assert site.targets() == ["/robots.txt", "/", "/b"]
    assert crawler.finish_reason == "max-pages"


async def test_crawl_delay_spaces_requests_to_that_host(engine: Engine) -> None:
    delay = engine.seconds(2)
    routes = {
        "/robots.txt": robots_txt(f"User-agent: *\nCrawl-delay: {delay:g}\n"),
        "/": page("/a", "/b", "/c"),
    }
    async with open_site(routes) as site:
        crawler = await crawl(engine, site.url(), max_tasks=10)
    assert site.targets() == ["/robots.txt", "/", "/a", "/b", "/c"]
    # The first page waits too: the delay runs from when robots.txt told us of it.
    assert_gaps(engine, site.starts(), [delay] * 4)
    engine.assert_duration(crawler.elapsed, 4 * delay)


# -- the User-Agent --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user_agent", "sent"),
    [(None, f"trio-crawler/{__version__}"), ("X/1", "X/1")],
)
async def test_user_agent_is_sent_on_every_request(
    engine: Engine, user_agent: str | None, sent: str
) -> None:
    async with open_site({"/": page("/a")}) as site:
        await crawl(engine, site.url(), user_agent=user_agent)
    assert site.targets() == ["/robots.txt", "/", "/a"]
    assert [hit.user_agent for hit in site.hits] == [sent] * 3


async def test_user_agent_is_sent_through_a_shared_client(engine: Engine) -> None:
    async with open_site({"/": page()}) as site, httpx.AsyncClient() as client:
        await crawl(engine, site.url(), client=client, user_agent="X/1")
    assert [hit.user_agent for hit in site.hits] == ["X/1"] * 2


# -- per-host limits: max_per_host and delay ---------------------------------------------


@pytest.mark.parametrize(
    ("max_per_host", "in_flight", "rounds"),
    [(2, 2, 5), (None, 5, 2)],  # 10 one-second pages: 5 rounds of 2, or 2 rounds of 5
)
async def test_max_per_host_bounds_requests_in_flight(
    engine: Engine, max_per_host: int | None, in_flight: int, rounds: int
) -> None:
    async def slow(request: Request) -> Reply:
        return await slow_page(engine, request)

    pages = [f"/p{i}" for i in range(10)]
    routes = {"/robots.txt": NOT_FOUND, "/": page(*pages)}
    async with open_site(routes, default=slow) as site:
        crawler = await crawl(engine, site.url(), max_tasks=5, max_per_host=max_per_host)
    assert site.server.max_in_flight == in_flight
    assert len(crawler.done) == 11
    engine.assert_duration(crawler.elapsed, engine.seconds(rounds))


async def test_max_per_host_is_per_origin(engine: Engine) -> None:
    async def slow(request: Request) -> Reply:
        return await slow_page(engine, request)

    async with (
        open_site({"/robots.txt": NOT_FOUND}, default=slow) as site_a,
        open_site({"/robots.txt": NOT_FOUND}, default=slow) as site_b,
    ):
        links = [f"/p{i}" for i in range(10)]
        site_a.routes["/"] = page(*links, *(site_b.url(link) for link in links))
        crawler = await crawl(engine, site_a.url(), max_tasks=10, max_per_host=2)
    assert site_a.server.max_in_flight == 2
    assert site_b.server.max_in_flight == 2
    assert len(crawler.done) == 21
    # Both hosts at once: 5 rounds of 2 each, not 10 rounds of 2 shared.
    engine.assert_duration(crawler.elapsed, engine.seconds(5))


# -- a request the crawler gave up on is still the server's -----------------------------

# Only the crawler's own transport keeps the connection of a timed-out request for its server
# to answer or close (docs/manners.md); httpx's closes it, and the retry goes at once.
OWN_TRANSPORT = pytest.mark.skipif(
    choose_transport() != "lean",
    reason="httpx's own transport closes a timed-out request's connection at once",
)


@OWN_TRANSPORT
@pytest.mark.parametrize("adapt", [False, True])
async def test_a_timed_out_request_is_the_servers_until_it_answers(
    engine: Engine, adapt: bool
) -> None:
    """A server that takes longer than ``--timeout`` is still working on the request: the
    retry waits for its late answer (it is not read), so with ``max_per_host=1`` the server
    never has two requests at once, as it did when the retry went at the timeout. The
    record is the retry's answer, timed from the retry."""
    timeout = engine.seconds(1)
    stall = 1.5 * timeout
    calls = 0

    async def slow_once(request: Request) -> Reply:
        nonlocal calls
        calls += 1
        if calls == 1:
            await anyio.sleep(stall)
        return page()

    async with open_site({"/": page("/slow"), "/slow": slow_once}) as site:
        crawler = await crawl(
            engine,
            site.url(),
            timeout=timeout,
            max_tries=2,
            max_per_host=1,
            adapt=adapt,
            obey_robots=False,
        )
    assert site.server.max_in_flight == 1
    record = by_url(crawler)[site.url("/slow")]
    assert record.status == 200
    assert record.elapsed is not None
    assert record.elapsed < timeout
    first, second = site.starts("/slow")
    if engine.virtual_time and not adapt:
        assert second - first == pytest.approx(stall)  # at once after the late answer
    else:  # the adapted pace may add a gap after the timeout, its pushback
        assert second - first >= stall


@OWN_TRANSPORT
async def test_a_server_that_never_answers_is_waited_for_one_more_timeout(
    engine: Engine,
) -> None:
    """The wait for a late answer is bounded: another ``--timeout``, then the retry goes
    (the record's ``elapsed`` is the last attempt's timeout, not the wait)."""
    timeout = engine.seconds(1)

    async def never(request: Request) -> Reply:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_site({"/": page("/never"), "/never": never}) as site:
        crawler = await crawl(
            engine, site.url(), timeout=timeout, max_tries=2, adapt=False, obey_robots=False
        )
    record = by_url(crawler)[site.url("/never")]
    assert record.exception == f"TimeoutError: attempt took longer than {timeout:g} s"
    assert record.elapsed == pytest.approx(timeout, abs=0.001 if engine.virtual_time else 0.5)
    assert_gaps(engine, site.starts("/never"), [2 * timeout])
    engine.assert_duration(crawler.elapsed, 4 * timeout)


@OWN_TRANSPORT
async def test_a_crawl_stopped_while_it_waits_for_a_late_answer_ends_at_once(
    engine: Engine,
) -> None:
    timeout = engine.seconds(1)
    waiting = anyio.Event()

    async def never(request: Request) -> Reply:
        waiting.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_site({"/": page("/never"), "/never": never}) as site:
        crawler = engine.crawler([site.url()], timeout=timeout, obey_robots=False)
        with anyio.fail_after(HANG_LIMIT):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(crawler.crawl)
                await waiting.wait()
                await anyio.sleep(1.5 * timeout)  # past the timeout, into the wait
                crawler.stop(0)
    assert crawler.finish_reason == "interrupted"
    engine.assert_duration(crawler.elapsed, 1.5 * timeout)
    assert site.targets() == ["/", "/never"]


async def test_delay_spaces_request_starts_on_one_host(engine: Engine) -> None:
    delay = engine.seconds(1)
    async with open_site({"/": page("/a", "/b", "/c", "/d")}) as site:
        crawler = await crawl(engine, site.url(), max_tasks=10, delay=delay)
    assert site.targets() == ["/robots.txt", "/", "/a", "/b", "/c", "/d"]
    assert_gaps(engine, site.starts(), [delay] * 5)  # robots.txt is a request like any other
    engine.assert_duration(crawler.elapsed, 5 * delay)


async def test_delay_holds_while_every_worker_is_busy(engine: Engine) -> None:
    # On the real clock the gap checked below follows a whole request to /b, which on a
    # loaded machine can take a good part of a tenth of a second: hence 0.3 s there.
    delay = 1.0 if engine.virtual_time else 0.3
    busy = 3 * delay

    async def slow(request: Request) -> Reply:
        await anyio.sleep(busy)
        return page()

    async with open_site({"/": page("/a", "/b", "/c"), "/a": slow}) as site:
        crawler = await crawl(engine, site.url(), max_tasks=1, delay=delay, obey_robots=False)
    assert site.targets() == ["/", "/a", "/b", "/c"]
    # /b waits for the only worker, busy with /a; /c must still wait its delay after /b.
    if engine.virtual_time:
        assert_gaps(engine, site.starts(), [delay, busy, delay])
    else:
        # On the real clock a request can reach the server late, which shortens the gap
        # the server sees after it; the crawl's own clock is exact about the sum: /c
        # cannot start before delay + busy + delay.
        assert crawler.elapsed >= 2 * delay + busy


async def test_a_host_waiting_out_its_delay_does_not_hold_back_other_hosts(
    engine: Engine,
) -> None:
    delay = engine.seconds(5)
    slow_routes = {
        "/robots.txt": robots_txt(f"User-agent: *\nCrawl-delay: {delay:g}\n"),
        "/": page("/a1", "/a2"),
    }
    quick_pages = [f"/b{i}" for i in range(6)]
    async with (
        open_site(slow_routes) as slow_host,
        open_site({"/": page(*quick_pages)}) as quick_host,
    ):
        crawler = await crawl(engine, [slow_host.url(), quick_host.url()], max_tasks=2)
    assert slow_host.targets() == ["/robots.txt", "/", "/a1", "/a2"]
    assert sorted(quick_host.targets()) == sorted(["/robots.txt", "/", *quick_pages])
    assert len(crawler.done) == 3 + 7
    assert_gaps(engine, slow_host.starts(), [delay] * 3)
    # Every request to the quick host is made while the slow one waits for its first page.
    first_slow_page = slow_host.starts("/")[0]
    assert max(quick_host.starts()) < first_slow_page
    if engine.virtual_time:
        start = slow_host.starts("/robots.txt")[0]
        assert quick_host.starts() == pytest.approx([start] * 8)
    engine.assert_duration(crawler.elapsed, 3 * delay)


# -- Retry-After -----------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_is_waited_out_then_retried(
    engine: Engine, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    wait = retry_after_seconds(engine)
    answers = [Reply(status=status, headers=[("retry-after", str(wait))]), page()]

    async def busy_once(request: Request) -> Reply:
        return answers.pop(0)

    async with open_site({"/": page("/busy"), "/busy": busy_once}) as site:
        with caplog.at_level(logging.INFO, logger="trio_crawler"):
            crawler = await crawl(engine, site.url(), max_tries=2)
    assert by_url(crawler)[site.url("/busy")].status == 200
    assert_gaps(engine, site.starts("/busy"), [wait])
    assert crawler.limit_counts == {"retried_status": 1, "slowed_origins": 1}
    assert f"try 1 for {site.url('/busy')} got {status}; retrying after {wait} s" in caplog.text


@pytest.mark.parametrize("max_tries", [1, 2])
async def test_retry_after_counts_against_max_tries(engine: Engine, max_tries: int) -> None:
    wait = retry_after_seconds(engine)
    always_busy = Reply(status=503, headers=[("retry-after", str(wait))], body=b"busy")
    async with open_site({"/": page("/busy"), "/busy": always_busy}) as site:
        crawler = await crawl(engine, site.url(), max_tries=max_tries)
    assert site.server.hits["/busy"] == max_tries
    assert untimed(by_url(crawler)[site.url("/busy")]) == FetchStatistic(
        url=site.url("/busy"), status=503, size=4, depth=1, referrer=site.url()
    )
    assert crawler.limit_counts.get("retried_status", 0) == max_tries - 1


async def test_retry_after_holds_the_whole_host(engine: Engine) -> None:
    """A URL found while its host waits out a Retry-After waits too."""
    wait = retry_after_seconds(engine)
    answers = [Reply(status=503, headers=[("retry-after", str(wait))]), page()]
    # The 503 comes a moment after its request, by when /slow's request, which may have
    # needed a connection of its own, has surely been written: one still unwritten when
    # the 503 is read is held back until the wait ends (test_sent_clock.py), and would
    # find /later only then.
    moment = wait / 30

    async def busy_once(request: Request) -> Reply:
        if len(answers) == 2:
            await anyio.sleep(moment)
        return answers.pop(0)

    async def slow(request: Request) -> Reply:
        await anyio.sleep(wait / 3)
        return page("/later")

    routes: dict[str, Handler] = {"/": page("/busy", "/slow"), "/busy": busy_once, "/slow": slow}
    async with open_site(routes) as site:
        # adapt=False: the learnt gap would add a millisecond after the wait.
        await crawl(engine, site.url(), max_tasks=10, adapt=False)
    [first_try, retry] = site.starts("/busy")
    [later] = site.starts("/later")
    if engine.virtual_time:  # the wait runs from the 503's end
        assert (retry - first_try, later - first_try) == pytest.approx(
            (moment + wait, moment + wait)
        )
    else:
        assert later - first_try >= wait / 2


async def test_a_request_handed_out_before_a_retry_after_waits_it_out(engine: Engine) -> None:
    """One worker, two URLs of one host (links are queued sorted): while the worker
    fetches /busy, the engine has already handed out /later (it waits in the channel, or
    in the asyncio engine's queue). /busy is answered 503 with a Retry-After, so /later,
    not yet sent, is not sent inside the wait: it is given back and goes when it ends."""
    wait = retry_after_seconds(engine)
    answers = [Reply(status=503, headers=[("retry-after", str(wait))]), page()]

    async def busy_once(request: Request) -> Reply:
        return answers.pop(0)

    routes: dict[str, Handler] = {
        "/": page("/busy", "/later"),
        "/busy": busy_once,
        "/later": page(),
    }
    async with open_site(routes) as site:
        crawler = await crawl(engine, site.url(), max_tasks=1, adapt=False)
    [first_try, retry] = site.starts("/busy")
    [later] = site.starts("/later")
    assert later - first_try >= wait - 0.001
    engine.assert_duration(retry - first_try, wait)
    assert {record.url: record.status for record in crawler.done} == {
        site.url(path): 200 for path in ("/", "/busy", "/later")
    }


async def test_retry_after_as_an_http_date(engine: Engine) -> None:
    tries = 0

    async def busy_once(request: Request) -> Reply:
        nonlocal tries
        tries += 1
        if tries == 1:
            # Dates have whole seconds: two seconds from now waits between one and two.
            when = email.utils.formatdate(time.time() + 2, usegmt=True)
            return Reply(status=503, headers=[("retry-after", when)])
        return page()

    async with open_site({"/": page("/busy"), "/busy": busy_once}) as site:
        crawler = await crawl(engine, site.url())
    assert by_url(crawler)[site.url("/busy")].status == 200
    assert crawler.limit_counts == {"retried_status": 1, "slowed_origins": 1}
    [first_try, retry] = site.starts("/busy")
    slack = 0 if engine.virtual_time else 0.5
    assert 1 - slack <= retry - first_try <= 2 + slack


async def test_retry_after_as_a_date_is_measured_from_the_servers_date(engine: Engine) -> None:
    """A server whose clock is a day behind ours: its Date says when it answered, and the
    date it asks to be retried at is measured from there, so the wait is exact."""
    wait = retry_after_seconds(engine)
    server_now = time.time() - 86400
    headers = [
        ("date", email.utils.formatdate(server_now, usegmt=True)),
        ("retry-after", email.utils.formatdate(server_now + wait, usegmt=True)),
    ]
    answers = [Reply(status=429, headers=headers), page()]

    async def busy_once(request: Request) -> Reply:
        return answers.pop(0)

    async with open_site({"/": page("/busy"), "/busy": busy_once}) as site:
        crawler = await crawl(engine, site.url())
    assert by_url(crawler)[site.url("/busy")].status == 200
    assert_gaps(engine, site.starts("/busy"), [wait])


async def test_no_host_waits_longer_than_the_cap_for_its_crawl_delay(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert MAX_HOST_DELAY == 60
    cap = MAX_HOST_DELAY
    if not engine.virtual_time:
        # A minute of real time per test is too long: on the real clock the cap is lowered.
        cap = 0.5
        monkeypatch.setattr(state_module, "MAX_HOST_DELAY", cap)
    routes = {"/robots.txt": robots_txt("User-agent: *\nCrawl-delay: 3600\n"), "/": page("/a")}
    async with open_site(routes) as site:
        # The waits the test asks for (two minutes on virtual time) come on top of the time
        # a crawl may take before it counts as hung.
        crawler = await crawl(engine, site.url(), hang_limit=HANG_LIMIT + 2 * cap)
    assert len(crawler.done) == 2
    assert_gaps(engine, site.starts(), [cap, cap])
    if not engine.virtual_time:
        # ... and it was the cap that ended the wait, not an hour.
        assert crawler.elapsed < 5


@pytest.mark.parametrize("form", ["seconds", "date"])
async def test_a_retry_after_over_max_retry_after_ends_the_url_with_that_answer(
    engine: Engine, form: str
) -> None:
    """An hour is over the default ten minutes: no wait, and the answer is the record."""
    hour = "3600"
    if form == "date":
        server_now = time.time()
        hour = email.utils.formatdate(server_now + 3600, usegmt=True)
    busy = Reply(status=503, headers=[("retry-after", hour)], body=b"busy")
    async with open_site({"/": page("/busy"), "/busy": busy}) as site:
        crawler = await crawl(engine, site.url())
    assert site.server.hits["/busy"] == 1
    assert untimed(by_url(crawler)[site.url("/busy")]) == FetchStatistic(
        url=site.url("/busy"), status=503, size=4, depth=1, referrer=site.url()
    )
    assert crawler.limit_counts == {"slowed_origins": 1}
    assert crawler.elapsed < 5  # on virtual time too, where an hour would show


async def test_a_retry_after_up_to_max_retry_after_is_waited_in_full(engine: Engine) -> None:
    """No other cap shortens it: five minutes on virtual time (the real clock waits the
    least it can, one second, and a smaller --max-retry-after refuses two)."""
    wait, limit = (300, 600.0) if engine.virtual_time else (1, 1.0)
    answers = [Reply(status=429, headers=[("retry-after", str(wait))]), page()]

    async def busy_once(request: Request) -> Reply:
        return answers.pop(0)

    async with open_site({"/": page("/busy"), "/busy": busy_once}) as site:
        crawler = await crawl(
            engine, site.url(), max_retry_after=limit, hang_limit=HANG_LIMIT + wait
        )
    assert by_url(crawler)[site.url("/busy")].status == 200
    assert_gaps(engine, site.starts("/busy"), [wait])


# -- a backoff, when the answer says nothing of when ---------------------------------------

# The seed of the crawls' backoff jitter in these tests: see seeded_backoffs().
JITTER_SEED = 7


def real_clock_backoff(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the real clock, backoffs start at a twentieth of a second, not at one: the
    doubling and the jitter are the same, and a test takes no seconds of real time."""
    if not engine.virtual_time:
        monkeypatch.setattr(retry_policy, "BACKOFF_FIRST", 0.05)


def seeded_backoffs(*attempts: int) -> list[float]:
    """The waits of the backoffs after tries ``attempts``, drawn in turn, as a crawler made
    by :func:`crawl_seeded` draws them."""
    draws = random.Random(JITTER_SEED)
    return [backoff_wait(attempt, draws.random()) for attempt in attempts]


async def crawl_seeded(engine: Engine, root: str, **options: object) -> CrawlerBase:
    """Crawl ``root`` with the backoff's jitter drawn from a generator seeded with
    :data:`JITTER_SEED`, so that each wait is known."""
    crawler = engine.crawler([root], **options)
    crawler.state.jitter_source = random.Random(JITTER_SEED)
    with anyio.fail_after(HANG_LIMIT):
        await crawler.crawl()
    return crawler


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (503, []),
        (503, [("retry-after", "soon")]),  # not seconds nor a date: no Retry-After at all
        (429, []),
        (502, []),
        (504, []),
        (408, [("connection", "close")]),  # as a server that gave up on a request says it
    ],
)
async def test_a_server_answering_not_now_twice_then_a_page_gets_backoffs(
    engine: Engine,
    status: int,
    headers: list[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    real_clock_backoff(engine, monkeypatch)
    answers = [Reply(status=status, headers=headers), Reply(status=status, headers=headers)]

    async def busy_twice(request: Request) -> Reply:
        return answers.pop(0) if answers else page()

    async with open_site({"/": page("/busy"), "/busy": busy_twice}) as site:
        with caplog.at_level(logging.INFO, logger="trio_crawler"):
            crawler = await crawl_seeded(engine, site.url(), max_tries=3)
    assert by_url(crawler)[site.url("/busy")].status == 200
    first, second = seeded_backoffs(1, 2)
    assert_gaps(engine, site.starts("/busy"), [first, second])
    # 429 and 503 are pushback: the origin's pace slows (502, 504, 408 are not).
    slowed = {"slowed_origins": 1} if status in (429, 503) else {}
    assert crawler.limit_counts == {"retried_status": 2, **slowed}
    busy = site.url("/busy")
    assert f"try 1 for {busy} got {status}; retrying after {first:g} s" in caplog.text
    assert f"try 2 for {busy} got {status}; retrying after {second:g} s" in caplog.text


async def test_a_backoff_ends_with_the_last_answer_as_the_record(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_clock_backoff(engine, monkeypatch)
    answers = [Reply(status=503), Reply(status=502), Reply.html("upstream timed out", status=504)]

    async def failing(request: Request) -> Reply:
        return answers.pop(0)

    async with open_site({"/": page("/down"), "/down": failing}) as site:
        crawler = await crawl_seeded(engine, site.url(), max_tries=3)
    assert untimed(by_url(crawler)[site.url("/down")]) == FetchStatistic(
        url=site.url("/down"),
        status=504,
        size=len("upstream timed out"),
        depth=1,
        referrer=site.url(),
    )
    assert_gaps(engine, site.starts("/down"), seeded_backoffs(1, 2))
    assert crawler.limit_counts == {"retried_status": 2, "slowed_origins": 1}


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (500, []),
        (500, [("retry-after", "1")]),  # a Retry-After on a status that is no "not now"
        (404, []),
        (501, []),
    ],
)
async def test_other_statuses_are_records_after_one_attempt(
    engine: Engine, status: int, headers: list[tuple[str, str]]
) -> None:
    routes = {"/": page("/busy"), "/busy": Reply(status=status, headers=headers)}
    async with open_site(routes) as site:
        crawler = await crawl(engine, site.url())
    assert site.server.hits["/busy"] == 1
    assert untimed(by_url(crawler)[site.url("/busy")]) == FetchStatistic(
        url=site.url("/busy"), status=status, depth=1, referrer=site.url()
    )
    assert crawler.limit_counts == {}


# -- pages that ask not to be followed ----------------------------------------------------


def _nofollow_header_page(*hrefs: str, value: str) -> Reply:
    html = page(*hrefs)
    return Reply(status=200, headers=(*html.headers, ("x-robots-tag", value)), body=html.body)


@pytest.mark.parametrize(
    ("obey", "fetched", "nofollow"),
    [(True, ["/", "/meta", "/header", "/followed"], 2), (False, None, 0)],
    ids=["obeyed", "ignore-robots"],
)
async def test_pages_that_say_nofollow_are_read_not_followed(
    engine: Engine, obey: bool, fetched: list[str] | None, nofollow: int
) -> None:
    """A <meta name="robots" content="nofollow"> page and an X-Robots-Tag: nofollow page
    are recorded with no links; rel="nofollow" on a link is no directive; --ignore-robots
    ignores them all."""
    meta = '<meta name="robots" content="noindex, NoFollow">'
    routes = {
        "/robots.txt": robots_txt(""),
        "/": page("/meta", "/header", extra='<a rel="nofollow" href="/followed">f</a>'),
        "/meta": page("/from-meta", extra=meta),
        "/header": _nofollow_header_page("/from-header", value="trio-crawler: nofollow"),
        "/followed": page(),
        "/from-meta": page(),
        "/from-header": page(),
    }
    async with open_site(routes) as site:
        crawler = await crawl(engine, site.url(), obey_robots=obey)
    records = by_url(crawler)
    if fetched is not None:
        assert sorted(t for t in site.targets() if t != "/robots.txt") == sorted(fetched)
        assert records[site.url("/meta")].num_urls == 0
        assert records[site.url("/header")].num_urls == 0
        assert crawler.limit_counts == {"nofollow_pages": nofollow}
    else:
        assert {site.url(p) for p in ("/from-meta", "/from-header")} <= set(records)
        assert "nofollow_pages" not in crawler.limit_counts

"""Where each URL was found: every record's ``depth`` and ``referrer`` agree with a
breadth-first walk of the site.

A generated site is a handful of pages on one origin: each links to some others, or
redirects to one, or is missing (404). The walk of :func:`walk` is the crawl the contract
describes, run on paper: from the root, take the oldest URL; a page offers its links (in
the order the crawler queues them, sorted), each one hop deeper, and a redirect its target
at its own depth with one redirect fewer; a URL seen before is not queued again, so the
first URL that offers another is its referrer.

How the crawl order is pinned. The frontier hands URLs out first in, first out (per
origin, and these sites have one), so a crawl that has one request in flight at a time
visits the site in exactly the walk's order, and every record's depth and referrer are the
walk's. The core scenarios take one request, answer it, then take the next; the crawls
over HTTP run with ``max_tasks=1``. With several requests in flight (the scenario holds up
to four and answers them in an order drawn from a seed that hypothesis draws;
``max_tasks=4`` over HTTP) which page offers a URL first is a race, and what holds is
weaker (:func:`check_found_through`): the same URLs are recorded; a root has depth 0 and
no referrer; every other URL's referrer is a recorded URL that offers it (a page linking
to it, one hop shallower, or a redirect to it, at the same depth); and no depth is below
the URL's distance from the root, counting a link as a hop and a redirect as none
(:func:`distances`).

The scenarios run on every store (tests/stores.py), so the referrer and depth a state file
keeps in its rows, and a shared frontier in its entries, are the ones the records carry; a
``--state`` crawl interrupted and resumed, and a ``--frontier`` crawl, are checked over
HTTP too.
"""

from __future__ import annotations

import contextlib
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import RedisServer
from stores import STORES, make_core

from trio_crawler import FetchStatistic, engine_trio
from trio_crawler._events import Outcome, Response
from trio_crawler._state import CrawlState

from conftest import Engine
from httpserver import Reply, open_test_server
from support import HANG_LIMIT, by_url, crawl, finish, page

ROOT = "http://example.com/"
# Few enough redirects that a chain of them on a generated site can run out.
MAX_REDIRECT = 2
# The most requests a scenario of the weaker kind holds at once.
AT_ONCE = 4


@dataclass(frozen=True)
class Node:
    """One path of a generated site: a page with links, a redirect, or missing."""

    kind: str  # "page", "redirect" or "missing"
    targets: tuple[int, ...] = ()  # the nodes it links to, or redirects to (one)


def path_of(index: int) -> str:
    return "/" if index == 0 else f"/p{index}"


@st.composite
def sites(draw: st.DrawFn) -> tuple[Node, ...]:
    count = draw(st.integers(1, 12))
    node = st.integers(0, count - 1)
    nodes = []
    for _ in range(count):
        kind = draw(st.sampled_from(["page", "page", "page", "redirect", "missing"]))
        if kind == "page":
            nodes.append(Node(kind, tuple(draw(st.lists(node, max_size=5)))))
        elif kind == "redirect":
            nodes.append(Node(kind, (draw(node),)))
        else:
            nodes.append(Node(kind))
    return tuple(nodes)


def seeded_site(seed: int, count: int = 25) -> tuple[Node, ...]:
    """A site as :func:`sites` makes them, from a seed (for the crawls over HTTP)."""
    rng = random.Random(seed)
    nodes = []
    for _ in range(count):
        kind = rng.choice(["page", "page", "page", "redirect", "missing"])
        if kind == "page":
            nodes.append(Node(kind, tuple(rng.sample(range(count), rng.randint(0, 4)))))
        elif kind == "redirect":
            nodes.append(Node(kind, (rng.randrange(count),)))
        else:
            nodes.append(Node(kind))
    # Page 0 links to a few, so that the crawl has somewhere to go.
    nodes[0] = Node("page", (1, 2, 3))
    return tuple(nodes)


def offers(site: tuple[Node, ...], index: int, url_of: dict[int, str]) -> list[int]:
    """The nodes that node ``index`` offers, in the order the crawler queues them."""
    node = site[index]
    if node.kind == "redirect":
        return list(node.targets)
    if node.kind == "page":
        return sorted(set(node.targets), key=url_of.__getitem__)
    return []


def walk(site: tuple[Node, ...], url_of: dict[int, str]) -> dict[str, tuple[int, str | None]]:
    """The breadth-first walk: each URL reached, with its depth and referrer."""
    found: dict[int, tuple[int, int | None, int]] = {0: (0, None, MAX_REDIRECT)}
    queue = deque([0])
    while queue:
        index = queue.popleft()
        depth, _, redirects_left = found[index]
        redirect = site[index].kind == "redirect"
        if redirect and redirects_left == 0:
            continue  # "redirect limit reached": the target is not queued
        for target in offers(site, index, url_of):
            if target not in found:
                if redirect:
                    found[target] = (depth, index, redirects_left - 1)
                else:
                    found[target] = (depth + 1, index, MAX_REDIRECT)
                queue.append(target)
    return {
        url_of[index]: (depth, None if referrer is None else url_of[referrer])
        for index, (depth, referrer, _) in found.items()
    }


def distances(site: tuple[Node, ...], url_of: dict[int, str]) -> dict[str, int]:
    """Each URL's distance from the root, a link one hop and a redirect none, whatever
    the redirect budget (which only takes paths away): no crawl finds a URL shallower."""
    best = {0: 0}
    queue = deque([0])
    while queue:  # breadth first over edges of weight 0 and 1 (a 0-1 BFS)
        index = queue.popleft()
        redirect = site[index].kind == "redirect"
        for target in offers(site, index, url_of):
            distance = best[index] + (0 if redirect else 1)
            if distance < best.get(target, distance + 1):
                best[target] = distance
                (queue.appendleft if redirect else queue.append)(target)
    return {url_of[index]: distance for index, distance in best.items()}


def answer(site: tuple[Node, ...], index: int, url_of: dict[int, str]) -> Outcome:
    """What the core is told a node answered."""
    node = site[index]
    if node.kind == "redirect":
        return Response(status=301, location=url_of[node.targets[0]])
    if node.kind == "missing":
        return Response(status=404)
    body = "".join(f'<a href="{url_of[target]}">x</a>' for target in node.targets)
    return Response(status=200, content_type="text/html", body=body.encode())


def reply(site: tuple[Node, ...], index: int) -> Reply:
    """What the HTTP server answers for a node."""
    node = site[index]
    if node.kind == "redirect":
        return Reply.redirect(path_of(node.targets[0]), status=301)
    if node.kind == "missing":
        return Reply.html("gone", status=404)
    return page(*(path_of(target) for target in node.targets))


def check_found_through(
    records: dict[str, FetchStatistic], site: tuple[Node, ...], url_of: dict[int, str]
) -> None:
    """The invariants of any crawl order (see the module docstring)."""
    index_of = {url: index for index, url in url_of.items()}
    assert set(records) == set(walk(site, url_of))
    least = distances(site, url_of)
    for url, record in records.items():
        assert record.depth >= least[url], record
        if url == url_of[0]:
            assert (record.depth, record.referrer) == (0, None)
            continue
        assert record.referrer in records, record
        referrer = records[record.referrer]
        assert index_of[url] in offers(site, index_of[referrer.url], url_of), record
        if referrer.next_url is not None:
            assert (referrer.next_url, record.depth) == (url, referrer.depth), record
        else:
            assert record.depth == referrer.depth + 1, record


# -- the core, on every store ------------------------------------------------------------


def crawl_by_hand(
    state: CrawlState,
    written: list[FetchStatistic],
    site: tuple[Node, ...],
    order: random.Random | None,
) -> dict[str, FetchStatistic]:
    """Answer the core's requests until it is finished: one at a time without ``order``;
    else up to :data:`AT_ONCE` held, answered in the order it draws."""
    index_of = {ROOT + path_of(index)[1:]: index for index in range(len(site))}
    url_of = {index: url for url, index in index_of.items()}
    held = []
    while not state.finished:
        while len(held) < (1 if order is None else AT_ONCE):
            request = state.next_request(now=0.0)
            if request is None:
                break
            state.attempt_started(request, now=0.0)
            held.append(request)
        assert held, "nothing in flight, and the core is not finished"
        which = 0 if order is None else order.randrange(len(held))
        request = held.pop(which)
        assert finish(state, request, answer(site, index_of[request.url], url_of), now=0.0) is None
    records = {record.url: record for record in written}
    assert len(records) == len(written), "a URL recorded twice"
    return records


SCENARIOS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("store", STORES)
@SCENARIOS
@given(site=sites(), seed=st.integers(0, 2**32), one_at_a_time=st.booleans())
def test_depth_and_referrer_follow_a_breadth_first_walk(
    store: str,
    site: tuple[Node, ...],
    seed: int,
    one_at_a_time: bool,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> None:
    url_of = {index: ROOT + path_of(index)[1:] for index in range(len(site))}
    with contextlib.ExitStack() as cleanup:
        redis_url = request.getfixturevalue("redis_server").url() if store == "redis" else ""
        state, written = make_core(
            store,
            [ROOT],
            tmp_path_factory.mktemp(store),
            redis_url=redis_url,
            cleanup=cleanup,
            obey_robots=False,
            max_redirect=MAX_REDIRECT,
        )
        # The order is drawn from a seed, not from hypothesis as the crawl goes: a draw
        # that ran out of data would end the example inside the store's session.
        order = None if one_at_a_time else random.Random(seed)
        records = crawl_by_hand(state, written, site, order)
    if one_at_a_time:
        assert {url: (r.depth, r.referrer) for url, r in records.items()} == walk(site, url_of)
    check_found_through(records, site, url_of)


def test_the_walk_is_the_one_the_docstring_describes() -> None:
    """The model itself, on a site small enough to walk by hand: / links to /p2 and /p1
    (queued sorted), /p1 redirects to /p3 (same depth), /p2 links to /p3 (seen already)
    and /p4; /p3 is reached shallower through the redirect than the walk finds it."""
    site = (
        Node("page", (2, 1)),
        Node("redirect", (3,)),
        Node("page", (3, 4)),
        Node("page", ()),
        Node("missing"),
    )
    url_of = {index: ROOT + path_of(index)[1:] for index in range(len(site))}
    assert walk(site, url_of) == {
        ROOT: (0, None),
        ROOT + "p1": (1, ROOT),
        ROOT + "p2": (1, ROOT),
        ROOT + "p3": (1, ROOT + "p1"),
        ROOT + "p4": (2, ROOT + "p2"),
    }
    assert distances(site, url_of) == {
        ROOT: 0,
        ROOT + "p1": 1,
        ROOT + "p2": 1,
        ROOT + "p3": 1,
        ROOT + "p4": 2,
    }


# -- over HTTP: every engine, a resumed state file, a shared frontier ----------------------

# Seeds of sites whose walk reaches most of their pages, several of them through redirects,
# and goes deep (test_the_seeded_sites_are_worth_crawling). A chain of redirects cut by the
# budget is rare on them; the core's scenarios above meet it.
SEEDS = (1, 18, 25)


def routes_of(site: tuple[Node, ...]) -> dict[str, Reply]:
    return {path_of(index): reply(site, index) for index in range(len(site))}


def exactly_the_walk(
    records: dict[str, FetchStatistic], walked: dict[str, tuple[int, str | None]]
) -> None:
    assert {url: (record.depth, record.referrer) for url, record in records.items()} == walked


def test_the_seeded_sites_are_worth_crawling() -> None:
    for seed in SEEDS:
        site = seeded_site(seed)
        url_of = {index: ROOT + path_of(index)[1:] for index in range(len(site))}
        index_of = {url: index for index, url in url_of.items()}
        walked = walk(site, url_of)
        kinds = {site[index_of[url]].kind for url in walked}
        redirected = [
            url
            for url, (_, referrer) in walked.items()
            if referrer in walked and site[index_of[referrer]].kind == "redirect"
        ]
        assert len(walked) >= 15, seed
        assert kinds == {"page", "redirect", "missing"}, seed
        assert len(redirected) >= 3, seed
        assert max(depth for depth, _ in walked.values()) >= 3, seed


@pytest.mark.anyio
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("max_tasks", [1, AT_ONCE])
async def test_a_crawl_over_http_agrees_with_the_walk(
    engine: Engine, seed: int, max_tasks: int
) -> None:
    site = seeded_site(seed)
    async with open_test_server(routes_of(site)) as server:
        crawler = await crawl(
            engine,
            server.url(),
            obey_robots=False,
            max_redirect=MAX_REDIRECT,
            max_tasks=max_tasks,
        )
    url_of = {index: server.url(path_of(index)) for index in range(len(site))}
    records = by_url(crawler)
    if max_tasks == 1:
        exactly_the_walk(records, walk(site, url_of))
    check_found_through(records, site, url_of)


@pytest.mark.trio
async def test_a_resumed_state_crawl_takes_depth_and_referrer_from_its_file(
    tmp_path: Path,
) -> None:
    """The first run stops after a few records; the URLs the second run fetches were
    queued by the first, so their depth and referrer come from the file's rows."""
    site = seeded_site(SEEDS[0])
    state = str(tmp_path / "crawl.db")
    options = {"obey_robots": False, "max_redirect": MAX_REDIRECT, "max_tasks": 1}

    def stop_after_four(record: FetchStatistic) -> None:
        made.append(record)
        if len(made) == 4:
            first.stop()

    made: list[FetchStatistic] = []
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes_of(site)) as server:
            first = engine_trio.Crawler(
                [server.url()], state=state, on_record=stop_after_four, **options
            )
            await first.crawl()
            second = engine_trio.Crawler([], state=state, max_tasks=1)
            await second.crawl()
    assert first.finish_reason == "interrupted"
    assert second.finish_reason == "finished"
    assert 0 < second.records_made < len(second.done)
    url_of = {index: server.url(path_of(index)) for index in range(len(site))}
    records = by_url(second)  # the whole crawl's, both runs', read from the file
    exactly_the_walk(records, walk(site, url_of))
    # The second run's own records have referrers too (the file kept them).
    assert all(record.referrer is not None for record in records.values() if record not in made)


@pytest.mark.trio
async def test_a_shared_crawl_takes_depth_and_referrer_from_the_server(
    redis: RedisServer,
) -> None:
    """One crawler alone (the exact walk), then two sharing a crawl: each URL a process
    leases comes with the depth and referrer the server's entry holds, whichever process
    queued it."""
    site = seeded_site(SEEDS[1])
    options = {"obey_robots": False, "max_redirect": MAX_REDIRECT, "frontier": redis.url()}
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes_of(site)) as server:
            alone = engine_trio.Crawler([server.url()], crawl_id="alone", max_tasks=1, **options)
            await alone.crawl()
            together = [
                engine_trio.Crawler([server.url()], crawl_id="together", max_tasks=2, **options)
                for _ in range(2)
            ]
            async with trio.open_nursery() as nursery:
                for crawler in together:
                    nursery.start_soon(crawler.crawl)
    url_of = {index: server.url(path_of(index)) for index in range(len(site))}
    exactly_the_walk(by_url(alone), walk(site, url_of))
    union = [record for crawler in together for record in crawler.done]
    records = {record.url: record for record in union}
    assert len(records) == len(union), "a URL recorded by both processes"
    assert all(crawler.done for crawler in together), "one process did all the work"
    check_found_through(records, site, url_of)

"""A wait before a retry holds its origin for every process of a shared crawl.

The adaptive-manners contract: while a ``Retry-After`` wait of an origin runs, no request is
sent to that origin, by any process of a shared crawl; a backoff holds the origin the same
way (``CrawlState._retry_status`` says why). test_state.py steps one core over each store;
here two cores share one crawl on a real ``redis-server``, as two processes would, and the
one that did not get the answer is the one that must wait.

Each core keeps its clock on the server's scale from the moment it joins (lua/prelude.lua),
so the second one's clock is behind the first's by the real time between the two joins,
some milliseconds: the waits are checked to a tenth of a second.
"""

from __future__ import annotations

import contextlib
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from redis_server import RedisServer
from stores import channel_tells, make_core

from trio_crawler._events import Response
from trio_crawler._retry_policy import backoff_wait
from trio_crawler._state import CrawlState
from trio_crawler._store_redis import RedisFrontier

from support import HANG_LIMIT

ROOT = "http://example.com/"
ROOTS = [ROOT, ROOT + "a", ROOT + "b"]
JITTER_SEED = 3


def join(
    redis: RedisServer,
    tmp_path: Path,
    cleanup: contextlib.ExitStack,
    crawl_id: str,
    **options: Any,
) -> CrawlState:
    """A core of the shared crawl ``crawl_id`` of ROOTS, as one more process joins it
    (robots.txt not obeyed unless ``options`` say so)."""
    state, _ = make_core(
        "redis",
        ROOTS,
        tmp_path,
        redis_url=redis.url(),
        cleanup=cleanup,
        crawl_id=crawl_id,
        **{"max_tasks": 1, "obey_robots": False, **options},
    )
    state.jitter_source = random.Random(JITTER_SEED)
    return state


def hears_of_work(state: CrawlState, *, by: float) -> threading.Event:
    """Set once the process of ``state`` has heard on the crawl's channel that work comes
    by ``by`` on its clock (see stores.channel_tells)."""

    def soon(frontier: RedisFrontier) -> bool:
        idle_until = frontier.link.idle_until
        return idle_until is None or idle_until <= by

    return channel_tells(state, soon)


@pytest.mark.parametrize(
    ("answer", "wait"),
    [
        (Response(status=503, retry_after=30.0), 30.0),
        (Response(status=429), backoff_wait(1, random.Random(JITTER_SEED).random())),
    ],
    ids=["retry-after", "backoff"],
)
def test_another_process_sends_nothing_to_the_origin_until_the_wait_ends(
    redis: RedisServer, tmp_path: Path, answer: Response, wait: float
) -> None:
    with contextlib.ExitStack() as cleanup:
        # --delay 1: the origin's next URL waits on the server for its turn, and the
        # second process is told when that comes, when the answer comes to the first.
        first = join(redis, tmp_path, cleanup, "shared", delay=1.0)
        second = join(redis, tmp_path, cleanup, "shared", delay=1.0)
        root = first.next_request(now=0.0)
        assert root is not None
        told = hears_of_work(second, by=1.5)
        first.attempt_started(root, now=0.0)
        assert told.wait(HANG_LIMIT), "the second process did not hear when the URL comes"
        assert second.next_request(now=0.1) is None  # its URL waits for the delay
        assert second.next_wakeup() == pytest.approx(1.0, abs=0.1)

        first.attempt_finished(root, answer, now=0.5)
        # The delay is over at 1, but the wait holds the origin until 0.5 + wait.
        for now in (1.0, 0.5 + wait - 0.2):
            assert second.next_request(now=now) is None
            assert second.next_wakeup() == pytest.approx(0.5 + wait, abs=0.1)
        assert second.next_request(now=0.5 + wait + 0.2) is not None


def test_a_request_another_process_holds_waits_too(redis: RedisServer, tmp_path: Path) -> None:
    """With two at a time, the second process may hold a URL of the origin, handed out to a
    worker and not started, when the first reads a ``Retry-After``. The server holds the
    origin for later leases, and tells the holders of the leases it has already given
    (the channel's ``hold``): the second gives the request back rather than send it inside
    the wait, and sends it when the wait ends."""
    with contextlib.ExitStack() as cleanup:
        first = join(redis, tmp_path, cleanup, "two", max_per_host=2)
        second = join(redis, tmp_path, cleanup, "two", max_per_host=2)
        heard = threading.Event()
        frontier = second.frontier
        assert isinstance(frontier, RedisFrontier)
        told = frontier.hold

        def hold(origin: str, until: float) -> None:
            told(origin, until)
            heard.set()

        frontier.hold = hold  # type: ignore[method-assign]
        root = first.next_request(now=0.0)
        assert root is not None
        first.attempt_started(root, now=0.0)
        page = second.next_request(now=0.1)
        assert page is not None, "two at a time: the second process has one of the origin's"
        assert not second.held_back(page, now=0.2)

        first.attempt_finished(root, Response(status=503, retry_after=30.0), now=0.5)
        assert heard.wait(HANG_LIMIT), "the second process was not told of the wait"
        for now in (0.6, 0.5 + 30.0 - 0.2):
            assert second.held_back(page, now=now)
        second.put_back(page)
        assert second.next_request(now=1.0) is None
        assert not second.held_back(page, now=0.5 + 30.0 + 0.2)
        again = second.next_request(now=0.5 + 30.0 + 0.2)
        assert again is not None
        assert again.url == page.url


def test_a_crawl_delay_another_process_read_paces_this_one(
    redis: RedisServer, tmp_path: Path
) -> None:
    """No --delay: the first process reads the origin's robots.txt, which sets a
    Crawl-delay. The second learns it from the server with its first lease of the origin,
    and from then on its engine reads pages in turns (``paced``)."""
    with contextlib.ExitStack() as cleanup:
        first = join(redis, tmp_path, cleanup, "crawl-delay", obey_robots=True)
        second = join(redis, tmp_path, cleanup, "crawl-delay", obey_robots=True)
        assert not first.frontier.paced
        assert not second.frontier.paced
        robots = first.next_request(now=0.0)
        assert robots is not None
        assert robots.robots
        first.attempt_started(robots, now=0.0)
        rules = Response(
            status=200, content_type="text/plain", body=b"User-agent: *\nCrawl-delay: 1\n"
        )
        told = hears_of_work(second, by=1.2)
        first.attempt_finished(robots, rules, now=0.1)
        assert told.wait(HANG_LIMIT), "the second process did not hear of the page"
        page = second.next_request(now=1.2)
        assert page is not None
        assert not page.robots
        assert second.frontier.paced

"""The memory store and the per-origin scheduler it is built on, stepped by hand: their
operations, and the invariants every store behind the same operations must keep (pending =
queued + in flight; no URL both)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_crawler._events import FetchRequest, RobotsRequest
from trio_crawler._frontier import OUT_OF_BUDGET, Disallowed, RobotsState, Unfetchable
from trio_crawler._robots import RobotsRules
from trio_crawler._store_memory import Added, MemoryFrontier

A = "http://a.example/"
B = "http://b.example/"


def frontier(
    *, delay: float = 0.0, obey_robots: bool = False, max_per_host: int | None = None
) -> MemoryFrontier:
    return MemoryFrontier(delay=delay, obey_robots=obey_robots, max_per_host=max_per_host)


def rules(text: str) -> RobotsRules:
    return RobotsRules.from_response(200, text.encode())


def test_add_says_how_many_links_were_new_and_queues_them_in_order() -> None:
    store = frontier()
    assert store.add([A, A + "x"], depth=0, redirects_left=3) == Added(new=2, disallowed=0)
    assert store.add([A + "x", A + "y"], depth=1, redirects_left=2) == Added(new=1, disallowed=0)
    assert (store.queued, store.in_flight_count) == (3, 0)
    assert store.seen == {A, A + "x", A + "y"}
    taken = [store.take(now=0.0, start_new=True) for _ in range(3)]
    assert taken == [
        FetchRequest(url=A, redirects_left=3, depth=0),
        FetchRequest(url=A + "x", redirects_left=3, depth=0),
        FetchRequest(url=A + "y", redirects_left=2, depth=1),
    ]
    assert (store.queued, store.in_flight_count) == (0, 3)
    assert store.take(now=0.0, start_new=True) is None


def test_unseen_asks_without_marking() -> None:
    store = frontier()
    store.add([A], depth=0, redirects_left=0)
    assert store.unseen([A, B, B + "x"]) == 2
    assert store.seen == {A}


def test_robots_state_moves_unknown_fetching_known() -> None:
    store = frontier(obey_robots=True)
    store.add([A, A + "private"], depth=0, redirects_left=1)
    robots = store.take(now=0.0, start_new=True)
    assert isinstance(robots, RobotsRequest)
    assert robots.url == A + "robots.txt"
    assert store.in_flight_count == 1
    assert store.take(now=0.0, start_new=True) is None  # the origin waits for its rules
    store.robots_settled(robots, rules=rules("User-agent: *\nDisallow: /private\n"), now=0.0)
    assert store.take(now=0.0, start_new=True) == FetchRequest(url=A, redirects_left=1)
    taken = store.take(now=0.0, start_new=True)
    assert taken == Disallowed(FetchRequest(url=A + "private", redirects_left=1))
    # Known rules turn a link away when it is added; it is seen, never queued.
    assert store.add([A + "private/2"], depth=1, redirects_left=1) == Added(new=1, disallowed=1)
    assert store.queued == 0


def test_a_failed_robots_txt_settles_every_url_of_the_origin_unfetched() -> None:
    store = frontier(obey_robots=True)
    store.add([A, A + "x"], depth=0, redirects_left=1)
    robots = store.take(now=0.0, start_new=True)
    assert isinstance(robots, RobotsRequest)
    store.robots_settled(robots, failure="ConnectError: refused", now=0.0)
    first = store.take(now=0.0, start_new=True)
    assert first == Unfetchable(FetchRequest(url=A, redirects_left=1), "ConnectError: refused")
    assert store.in_flight_count == 0  # unfetched URLs are never in flight


def test_giving_back_robots_txt_makes_the_origin_ask_again() -> None:
    store = frontier(obey_robots=True)
    store.add([A], depth=0, redirects_left=1)
    robots = store.take(now=0.0, start_new=True)
    assert isinstance(robots, RobotsRequest)
    store.give_back(robots)
    assert store.in_flight_count == 0
    assert store.take(now=0.0, start_new=True) == robots
    with pytest.raises(RuntimeError, match="not in flight"):
        store.give_back(FetchRequest(url=B, redirects_left=0))


def test_out_of_budget_takes_nothing_but_retries_still_go_out() -> None:
    store = frontier()
    store.add([A, B], depth=0, redirects_left=0)
    first = store.take(now=0.0, start_new=True)
    assert isinstance(first, FetchRequest)
    assert store.take(now=0.0, start_new=False) is OUT_OF_BUDGET
    assert store.queued == 1
    retry = FetchRequest(url=first.url, redirects_left=0, attempt=2)
    store.retry_later(retry, not_before=0.0, now=0.0)
    assert store.take(now=0.0, start_new=False) == retry  # not a new URL: it may go


def test_the_delay_runs_from_each_start_and_retry_after_holds_the_origin() -> None:
    store = frontier(delay=2.0)
    store.add([A, A + "x", B], depth=0, redirects_left=0)
    first = store.take(now=10.0, start_new=True)
    assert first == FetchRequest(url=A, redirects_left=0)
    # A's next URL waits until A's first has started; B goes meanwhile.
    assert store.take(now=10.0, start_new=True) == FetchRequest(url=B, redirects_left=0)
    assert store.take(now=10.0, start_new=True) is None
    store.started(first, now=11.0)
    assert store.next_wakeup() is None  # A is held by its in-flight request, not asleep
    assert store.take(now=12.5, start_new=True) is None
    assert store.next_wakeup() == 13.0
    assert store.take(now=13.0, start_new=True) == FetchRequest(url=A + "x", redirects_left=0)
    store.retry_later(
        FetchRequest(url=A, redirects_left=0, attempt=2), not_before=100.0, now=13.0
    )  # Retry-After
    assert store.take(now=99.0, start_new=True) is None


def test_max_per_host_bounds_an_origins_requests_in_flight() -> None:
    store = frontier(max_per_host=1)
    store.add([A, A + "x"], depth=0, redirects_left=0)
    first = store.take(now=0.0, start_new=True)
    assert isinstance(first, FetchRequest)
    assert store.take(now=0.0, start_new=True) is None
    store.scheduler.complete(first)
    assert store.take(now=0.0, start_new=True) == FetchRequest(url=A + "x", redirects_left=0)


def test_retry_is_immediate_without_a_delay_and_queued_with_one() -> None:
    quick, polite = frontier(), frontier(delay=1.0)
    for store in (quick, polite):
        store.add([A], depth=0, redirects_left=0)
        request = store.take(now=0.0, start_new=True)
        assert isinstance(request, FetchRequest)
        store.started(request, now=0.0)
    again = FetchRequest(url=A, redirects_left=0, attempt=2)
    assert quick.retry(again) is True
    assert (quick.queued, quick.in_flight) == (0, {A})
    assert polite.retry(again) is False
    assert (polite.queued, polite.in_flight) == (1, frozenset())


# -- invariants under any sequence of operations ------------------------------------------

URLS = st.sampled_from([A, A + "1", A + "2", B, B + "1", "http://c.example:8080/"])


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["add", "take", "complete", "retry", "back", "later"]), URLS),
        max_size=60,
    ),
    delay=st.sampled_from([0.0, 1.0]),
    max_per_host=st.sampled_from([None, 1, 2]),
)
def test_pending_is_queued_plus_in_flight_and_no_url_is_both(
    steps: list[tuple[str, str]], delay: float, max_per_host: int | None
) -> None:
    store = frontier(delay=delay, obey_robots=True, max_per_host=max_per_host)
    leased: list[FetchRequest] = []
    queued_by_us: set[str] = set()
    settled: set[str] = set()
    now = 0.0
    for action, url in steps:
        now += 0.5
        if action == "add":
            added = store.add([url], depth=0, redirects_left=0)
            if added.new and not added.disallowed:
                queued_by_us.add(url)
        elif action == "take":
            taken = store.take(now=now, start_new=True)
            if isinstance(taken, RobotsRequest):
                store.started(taken, now=now)
                store.robots_settled(taken, rules=rules("User-agent: *\nDisallow: /2\n"), now=now)
                assert store.scheduler.origin_state(taken.origin).robots is RobotsState.KNOWN
            elif isinstance(taken, FetchRequest):
                store.started(taken, now=now)
                leased.append(taken)
            elif isinstance(taken, Disallowed | Unfetchable):
                settled.add(taken.request.url)
        elif leased:
            request = leased.pop(0)
            if action == "complete":
                store.scheduler.complete(request)
                settled.add(request.url)
            elif action == "retry":
                retry = FetchRequest(url=request.url, redirects_left=0, attempt=request.attempt + 1)
                if store.retry(retry):
                    leased.append(retry)
            elif action == "back":
                store.give_back(request)
            else:
                retry = FetchRequest(url=request.url, redirects_left=0, attempt=request.attempt + 1)
                store.retry_later(retry, not_before=now + 1.0, now=now)
        in_flight = {request.url for request in leased}
        assert store.in_flight == in_flight
        assert store.in_flight_count == len(in_flight)  # robots.txt is settled at once here
        # Every URL added is exactly one of: queued, in flight, settled.
        assert store.queued == len(queued_by_us - in_flight - settled)
        assert not (in_flight & settled)

"""An origin's pace: the control law on its own, then as every store keeps it.

The law (trio_crawler/_pace.py, mirrored in lua/step.lua) is checked three ways: its steps
one by one; its behaviour against a simulated token bucket on a virtual clock (the
stability docs/manners.md argues: few pushbacks, near the server's rate, at rates from 2
to 100 a second); and as a scenario on the memory, SQLite and Redis stores.
"""

from __future__ import annotations

import heapq
import math
import random

import pytest
from stores import called_early
from test_state import ORIGIN, make_state, open_origin, store, take  # noqa: F401

from trio_crawler._counts import SLOWED_ORIGINS
from trio_crawler._events import FetchError, FetchRequest, Response, Retry
from trio_crawler._pace import GAP_FLOOR, INITIAL_WINDOW, Pace, PaceSignal
from trio_crawler._robots import ROBOTS_MAX_AGE, RobotsRules
from trio_crawler._state import CrawlState

from support import finish

PUSHBACK, PROMPT, SLOW = PaceSignal.PUSHBACK, PaceSignal.PROMPT, PaceSignal.SLOW


def answer(
    pace: Pace, signal: PaceSignal, *, started: float, now: float, others: int = 0
) -> str | None:
    return pace.answered(
        signal, started=started, now=now, in_flight=others, user_gap=0.0, user_window=None
    )


# -- the law, step by step ---------------------------------------------------------------


def test_slow_start_opens_the_window_one_per_prompt_answer_then_lifts_it() -> None:
    pace = Pace()
    assert pace.window == INITIAL_WINDOW
    assert not pace.active
    for n in range(3):
        pace.started(float(n))
        answer(pace, PROMPT, started=float(n), now=n + 0.01)
    assert pace.window == INITIAL_WINDOW + 3
    for n in range(3, 200):
        answer(pace, PROMPT, started=float(n), now=n + 0.01)
    assert pace.window == 0
    assert pace.gap == 0.0
    assert not pace.slowed


def test_a_pushback_cuts_once_per_epoch() -> None:
    pace = Pace()
    for n in range(10):  # ten starts 10 ms apart: about 100 a second
        pace.started(n / 100)
    change = answer(pace, PUSHBACK, started=0.09, now=0.1, others=3)
    assert change is not None
    assert pace.active
    assert pace.slowed
    assert pace.window == 3
    gap = pace.gap
    assert gap > 0.01  # slower than the rate that drew the pushback
    # Answers to requests sent before the cut say nothing new: no second cut, but each
    # pushback among them is one request more than the origin took.
    assert answer(pace, PUSHBACK, started=0.08, now=0.11, others=2) is None
    assert (pace.gap, pace.window) == (gap, 2)


def test_the_rate_climbs_back_to_the_ceiling_at_the_knee_then_lifts() -> None:
    pace = Pace()
    for n in range(20):
        pace.started(n / 50)
    answer(pace, PUSHBACK, started=0.38, now=0.4)
    ceiling, knee, cut = pace.ceiling, pace.knee, 0.4
    answer(pace, PROMPT, started=cut + knee - 0.01, now=cut + knee)
    assert pace.gap == pytest.approx(1 / ceiling, rel=1e-6)
    now = cut + knee
    while pace.gap and now < cut + 60:
        now += 0.1
        answer(pace, PROMPT, started=now - 0.01, now=now)
    assert pace.gap == 0.0  # back to the crawl's own limit, in well under a minute
    assert pace.slowed  # and the report still counts it


def test_a_slow_answer_trims_the_window_once_per_epoch() -> None:
    pace = Pace()
    pace.started(0.0)
    assert pace.classify(0.05) is PROMPT
    assert pace.classify(5.0) is SLOW
    answer(pace, SLOW, started=0.0, now=5.0, others=4)
    assert pace.window == INITIAL_WINDOW - 1
    assert pace.slowed
    answer(pace, SLOW, started=0.1, now=5.1, others=4)
    assert pace.window == INITIAL_WINDOW - 1


def test_a_kept_pace_reads_back_and_a_damaged_one_does_not() -> None:
    pace = Pace()
    for n in range(5):
        pace.started(n / 10)
    answer(pace, PUSHBACK, started=0.4, now=0.5, others=2)
    assert Pace.read_kept(pace.kept()) == (pace.gap, pace.window, pace.ceiling)
    for damaged in (None, "", "1 2", "x 1 1", "-1 1 1", "1 -1 1", "1e9 1 1", 7):
        assert Pace.read_kept(damaged) is None


# -- the law against a token bucket, on a virtual clock -----------------------------------


def simulate(rate: float, *, retry_after: bool, pages: int, seed: int = 1) -> tuple[float, float]:
    """One origin, a token bucket of ``rate`` a second (burst 5) that answers 429 and an
    in-flight cap of 4 that answers 503; the crawler at --max-per-host 100 honours
    Retry-After (whole seconds) or backs off about 1 s, holding the origin, and paces the
    origin by Pace. Returns (wall time / the server's bound, pushback share)."""
    draws = random.Random(seed)
    pace = Pace()
    now = tokens_at = hold = next_start = 0.0
    tokens, queue, done, sent, pushed = 5.0, list(range(pages)), 0, 0, 0
    tries: dict[int, int] = {}
    flying: list[tuple[float, float, int, int, int]] = []
    while done < pages:
        limit = min(100, pace.window or 100)
        while queue and len(flying) < limit and now >= max(hold, next_start):
            page, sent = queue.pop(0), sent + 1
            pace.started(now)
            next_start = now + pace.gap
            tokens, tokens_at = min(5.0, tokens + (now - tokens_at) * rate), now
            if len(flying) >= 4:
                status = 503
            elif tokens >= 1:
                tokens, status = tokens - 1, 200
            else:
                status = 429
            wait = max(1, math.ceil((1 - tokens) / rate)) if status == 429 else 1
            latency = 0.005 + 0.002 * len(flying) if status == 200 else 0.005
            heapq.heappush(flying, (now + latency, now, page, status, wait))
        moments = [flying[0][0]] if flying else []
        if queue and len(flying) < limit:
            moments.append(max(hold, next_start, now))
        now = max(now, min(moments))
        while flying and flying[0][0] <= now:
            end, start, page, status, wait = heapq.heappop(flying)
            others = len(flying)
            if status == 200:
                done += 1
                answer(pace, pace.classify(end - start), started=start, now=end, others=others)
                continue
            pushed += 1
            tries[page] = tries.get(page, 0) + 1
            backoff = 2 ** (tries[page] - 1) * (0.8 + 0.4 * draws.random())
            hold = max(hold, end + (wait if retry_after else backoff))
            queue.insert(0, page)
            answer(pace, PUSHBACK, started=start, now=end, others=others)
    return now / (pages / rate), pushed / sent


@pytest.mark.parametrize("retry_after", [True, False], ids=["retry-after", "backoff"])
@pytest.mark.parametrize("rate", [2.0, 5.0, 20.0, 100.0])
def test_the_law_finds_a_token_bucket_rate_with_few_pushbacks(
    rate: float, retry_after: bool
) -> None:
    pages = max(200, int(rate * 10))
    wall, pushback = simulate(rate, retry_after=retry_after, pages=pages)
    assert pushback <= 0.15
    # Each pushback costs a Retry-After of a whole second: at 100 a second that is 100
    # pages' time, so the bound is looser there than the issue's 1.5 at 20 a second.
    assert wall <= (1.5 if rate <= 20 else 2.0)


# -- as every store keeps it ---------------------------------------------------------------


def pages(count: int) -> Response:
    body = "".join(f'<a href="/p{n}">x</a>' for n in range(count)).encode()
    return Response(status=200, content_type="text/html", body=body)


def too_many(retry_after: float | None = 1.0) -> Response:
    return Response(status=429, content_type="text/plain", body=b"", retry_after=retry_after)


def start_crawl(**options: object) -> tuple[CrawlState, list[FetchRequest]]:
    """A crawl whose root links to 20 pages, of which 3 are handed out at t=1."""
    state, _ = make_state(max_tries=4, **options)
    open_origin(state)
    root = take(state, now=0.5)
    assert finish(state, root, pages(20), now=0.6) is None
    flying = [take(state, now=1.0) for _ in range(3)]
    return state, flying


def test_a_pushback_slows_the_origin_on_every_store() -> None:
    state, flying = start_crawl(adapt=True)
    assert not state.frontier.paced
    assert finish(state, flying[0], too_many(), now=1.1) is None
    for request in flying[1:]:
        finish(state, request, pages(0), now=1.1)
    assert state.statistics().slowed == 1
    assert state.counters()[SLOWED_ORIGINS] == 1
    assert state.frontier.paced  # from now on the engines read pages in turns (_turns.py)
    # After the Retry-After, one request goes out, and the next only after the gap.
    assert state.next_request(now=2.0) is None
    first = take(state, now=2.1)
    assert state.next_request(now=2.1) is None
    wakeup = state.next_wakeup()
    assert wakeup is not None
    assert wakeup >= 2.1 + GAP_FLOOR
    assert first.attempt == 2  # the URL that drew the 429 goes first


@pytest.mark.parametrize("waited", [0.0, 4.0])
def test_a_timed_out_request_is_learnt_as_of_its_timeout_on_every_store(waited: float) -> None:
    """The engine may wait for a timed-out request's server before it finishes the attempt
    (``now``, the wait's end; ``ended``, the timeout): the origin's delay runs from the
    wait's end, but its pace learns what the attempt measured. Learnt at the wait's end,
    the cut would count the wait in the epoch's goodput (one answer in 8 s instead of 4),
    a gap of 8 s where the attempt's own times give 4."""
    state, _ = make_state(max_per_host=1, delay=1.0, adapt=True, obey_robots=False, max_tries=2)
    root = take(state, now=0.0)
    assert finish(state, root, pages(3), now=0.1) is None
    page = take(state, now=2.0)  # two seconds after the root: a rate of 0.5 a second
    timed_out = FetchError(error="TimeoutError: attempt took longer than 2 s", retryable=True)
    answered = 4.0 + waited
    result = state.attempt_finished(page, timed_out, now=answered, started=2.0, ended=4.0)
    assert not isinstance(result, Retry)  # with a delay, the retry waits its turn
    assert state.statistics().slowed == 1
    # The delay from the server's end, and the cut's gap from the page's start: one answer
    # in the 4 s to the timeout, so 4 s (with the wait counted, 8).
    assert state.next_request(now=answered) is None
    wakeup = max(answered + 1.0, 2.0 + 4.0) - called_early(state)
    assert state.next_wakeup() == pytest.approx(wakeup)


def test_no_adapt_keeps_the_crawls_own_pace() -> None:
    state, flying = start_crawl(adapt=False)
    assert finish(state, flying[0], too_many(), now=1.1) is None
    for request in flying[1:]:
        finish(state, request, pages(0), now=1.1)
    assert state.statistics().slowed == 0
    assert not state.frontier.paced
    assert SLOWED_ORIGINS not in state.counters()
    take(state, now=2.1)
    assert state.next_request(now=2.1) is not None


def test_robots_txt_is_asked_again_after_a_day_on_every_store() -> None:
    state, _ = make_state(adapt=False)
    open_origin(state, "User-agent: *\nDisallow: /old\n")
    root = take(state, now=1.0)
    assert finish(state, root, pages(3), now=1.1) is None
    assert not take(state, now=2.0).robots
    later = ROBOTS_MAX_AGE + 10.0
    again = take(state, now=later)
    assert again.robots
    assert again.url == ORIGIN + "/robots.txt"


def test_a_robots_txt_answered_429_disallows_everything() -> None:
    assert not RobotsRules.from_response(429, b"").allowed(ORIGIN + "/a")
    assert RobotsRules.from_response(404, b"").allowed(ORIGIN + "/a")


def test_a_stopping_crawl_retries_what_is_in_flight_at_once() -> None:
    """After Ctrl-C the crawl finishes its requests in flight, retries included: a retry
    that waited its turn in the queue (an origin with a delay, or a learnt gap) would never
    go out, and a URL the server saw would have no record."""
    state, _ = make_state(obey_robots=False, delay=1.0, max_tries=2)
    request = take(state, now=0.0)
    state.stop_scheduling()
    refused = FetchError(error="ConnectError: refused", retryable=True)
    retry = finish(state, request, refused, now=0.1)
    assert retry is not None
    assert retry.attempt == 2


def test_the_delay_after_robots_txt_runs_from_its_answer_on_every_store() -> None:
    """A robots.txt that took 0.4 s (a new connection in a crawl's first burst) reached the
    server late: the first page goes a whole delay after its answer, not after its start,
    so the server never sees the two closer than the delay."""
    state, _ = make_state(delay=1.0, adapt=False)
    robots = take(state, now=0.0)
    assert robots.robots
    assert finish(state, robots, Response(status=404, body=b""), now=0.4) is None
    assert state.next_request(now=1.0) is None
    assert state.next_wakeup() == pytest.approx(1.4)
    assert not take(state, now=1.4).robots


def open_delayed(**options: object) -> CrawlState:
    state, _ = make_state(delay=1.0, adapt=False, **options)
    robots = take(state, now=0.0)
    assert finish(state, robots, Response(status=404, body=b""), now=0.0) is None
    root = take(state, now=1.0)
    assert finish(state, root, pages(5), now=1.1) is None
    return state


def test_one_at_a_time_the_delay_runs_from_each_answer_on_every_store() -> None:
    """With --max-per-host 1 the server never sees two requests closer than the delay,
    however late the first reached it: the next starts a delay after the answer."""
    state = open_delayed(max_per_host=1)
    first = take(state, now=2.1)
    assert finish(state, first, pages(0), now=2.4) is None
    assert state.next_request(now=3.1) is None
    assert not take(state, now=3.4).robots

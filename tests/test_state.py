"""CrawlState stepped by hand, with no event loop and no clock: each step asserts the state.

Every ``next_request`` and ``attempt_finished`` is given its ``now``, so a test says
exactly when a host may go again and checks ``next_wakeup``. Each step asserts what the
engines rely on: what is handed out, what waits, what is recorded and what
:meth:`CrawlState.statistics` says.

The first section is the crawl itself (links, redirects, retries, what is parsed), with
robots.txt off: there it would only add a robots request before each origin's first URL.
The sections after it are manners (robots.txt, delays, Retry-After and backoff, per-host
limits) and limits; test_manners.py shows the same rules on the wire, on every engine. A
backoff's jitter comes from a generator each scenario seeds alike, so its waits are exact.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stores import STORES, WALL_AT_ZERO, called_early, channel_tells, make_core

from trio_crawler._config import MAX_HOST_DELAY
from trio_crawler._counts import CrawlCounts
from trio_crawler._events import (
    FetchError,
    FetchRequest,
    Recorded,
    Requeued,
    Response,
    Retry,
    RobotsRequest,
    RobotsSettled,
    describe_exception,
)
from trio_crawler._retry_policy import BACKOFF_CAP, RETRY_STATUSES, backoff_wait
from trio_crawler._robots import MAX_ROBOTS_REDIRECTS
from trio_crawler._state import CrawlState
from trio_crawler._stats import FetchStatistic, count_records

from support import HANG_LIMIT, finish

ROOT = "http://example.com/"
ORIGIN = "http://example.com"
ROBOTS = "http://example.com/robots.txt"
REFUSED = FetchError(error="ConnectError: refused", retryable=True)
# Every scenario's backoff jitter comes from a generator with this seed: see backoffs().
JITTER_SEED = 20240501


# Every scenario runs on every store (tests/stores.py): the store the running test is
# parametrised with, a directory for its files, the Redis server, and what to close.
_store: dict[str, Any] = {}


# The scenarios whose order across origins the shared frontier does not keep. Its server
# hands out the origins that may start now by when they could start, then by name, not in
# the order their URLs were found (docs/design.md, "Redis"): within an origin the order is
# the same, and so is every count, record and wait. They run on it, expected to fail.
ORDER_ACROSS_ORIGINS = {
    "test_roots_are_queued_in_order_without_repeats",
    "test_an_origin_is_scheme_host_and_port[redis-roots0-robots_urls0]",
    "test_a_new_origin_found_later_gets_robots_txt_first",
    "test_a_host_waiting_out_its_delay_does_not_hold_back_others",
    "test_roots_go_out_in_the_order_given_across_origins",
}


# Each store twice: attempts started as by a transport that does not say when it writes a
# request, and as by one that does (the crawler's own, httpx's), the write reported at the
# attempt's start: the two paths must tell every scenario the same.
WRITES_REPORTED = "-written"
STORE_PATHS = [(kind, reported) for reported in (False, True) for kind in STORES]


@pytest.fixture(
    autouse=True,
    params=STORE_PATHS,
    ids=[kind + (WRITES_REPORTED if reported else "") for kind, reported in STORE_PATHS],
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kind, reported = request.param
    named = {request.function.__name__, request.node.name.replace(WRITES_REPORTED, "")}
    if kind == "redis" and named & ORDER_ACROSS_ORIGINS:
        reason = "the shared frontier's order across origins is not discovery order"
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    with contextlib.ExitStack() as cleanup:
        redis_url = ""
        if kind == "redis":
            redis_url = request.getfixturevalue("redis_server").url()
        _store.update(
            kind=kind, directory=tmp_path, url=redis_url, cleanup=cleanup, reported=reported
        )
        yield kind
    _store.clear()


def make_state(*roots: str, **options: Any) -> tuple[CrawlState, list[FetchStatistic]]:
    """A crawl of ``roots`` (ROOT if none) with robots.txt obeyed unless told otherwise,
    on the store the test runs on, its backoff jitter drawn from a seeded generator.

    Origins keep the crawl's own pace (``adapt`` off) unless a scenario asks for it: the
    scenarios here are about the other manners, each of which ``tests/test_pace.py`` runs
    again with the pace learning."""
    options.setdefault("adapt", False)
    state, written = make_core(
        _store["kind"],
        list(roots or [ROOT]),
        _store["directory"],
        redis_url=_store["url"],
        cleanup=_store["cleanup"],
        writes_reported=_store["reported"],
        **options,
    )
    state.jitter_source = random.Random(JITTER_SEED)
    return state, written


def backoffs(*attempts: int) -> list[float]:
    """The waits of backoffs after the tries ``attempts``, in the order a scenario's crawl
    draws them (one draw per backoff, from a generator seeded as make_state seeds it)."""
    draws = random.Random(JITTER_SEED)
    return [backoff_wait(attempt, draws.random()) for attempt in attempts]


def take(state: CrawlState, now: float = 0.0) -> FetchRequest:
    """Hand a request out and start its attempt at once, as an idle worker would."""
    request = state.next_request(now=now)
    assert request is not None
    state.attempt_started(request, now=now)
    return request


def html(*hrefs: str, status: int = 200) -> Response:
    body = "".join(f'<a href="{href}">x</a>' for href in hrefs).encode()
    return Response(status=status, content_type="text/html; charset=utf-8", body=body)


def robots_txt(text: str = "", *, status: int = 200) -> Response:
    return Response(status=status, content_type="text/plain", body=text.encode())


def counts(state: CrawlState) -> CrawlCounts:
    return state.statistics()


def stats(queued: int, in_flight: int, done: int, seen: int, fail: int = 0) -> CrawlCounts:
    return CrawlCounts(queued=queued, in_flight=in_flight, done=done, seen=seen, fail=fail)


def open_origin(state: CrawlState, rules: str = "", now: float = 0.0) -> None:
    """Hand out the next robots.txt request and answer it with ``rules``."""
    robots = take(state, now)
    assert robots.robots
    assert finish(state, robots, robots_txt(rules), now=now) is None


# -- the crawl, without robots.txt ---------------------------------------------------------


def test_roots_are_queued_in_order_without_repeats() -> None:
    state, _ = make_state("b.com", "http://a.com/#x", "http://a.com/", "B.com", obey_robots=False)
    assert state.config.roots == ("http://b.com/", "http://a.com/")
    assert state.seen_urls == {"http://b.com/", "http://a.com/"}
    assert counts(state) == CrawlCounts(queued=2, in_flight=0, done=0, seen=2, fail=0)
    assert not state.finished
    assert take(state).url == "http://b.com/"
    assert take(state).url == "http://a.com/"


def test_one_page_with_links_then_finished() -> None:
    state, written = make_state(max_redirect=3, obey_robots=False)
    root = take(state)
    assert root == FetchRequest(url=ROOT, redirects_left=3, attempt=1, depth=0)
    assert counts(state) == CrawlCounts(queued=0, in_flight=1, done=0, seen=1, fail=0)
    assert state.in_flight == {ROOT}
    assert state.next_request(now=0.0) is None  # nothing to do *yet*
    assert not state.finished  # ... but the page in flight may add links

    response = html("/b", "/a#frag", "/a", "http://other.org/", "mailto:x@example.com", "/")
    assert finish(state, root, response, now=0.0) is None
    record = FetchStatistic(
        url=ROOT,
        status=200,
        size=len(response.body),
        content_type="text/html",
        encoding="utf-8",
        num_urls=3,  # /a, /b and the page itself; other.org and mailto are out of scope
        num_new_urls=2,
    )
    assert state.done == written == [record]
    assert state.seen_urls == {ROOT, ROOT + "a", ROOT + "b"}
    assert counts(state) == CrawlCounts(queued=2, in_flight=0, done=1, seen=3, fail=0)
    # Links are queued sorted, with the full redirect budget, one hop deeper, and the page
    # they were found on as their referrer.
    assert take(state) == FetchRequest(url=ROOT + "a", redirects_left=3, depth=1, referrer=ROOT)
    page_b = take(state)
    assert finish(state, page_b, html("/a", "/b"), now=0.0) is None
    assert state.done[-1].num_urls == 2
    assert state.done[-1].num_new_urls == 0
    assert (state.done[-1].depth, state.done[-1].referrer) == (1, ROOT)
    assert not state.finished  # /a is still in flight
    page_a = FetchRequest(url=ROOT + "a", redirects_left=3, depth=1, referrer=ROOT)
    assert finish(state, page_a, html(), now=0.0) is None
    assert state.finished
    assert counts(state) == CrawlCounts(queued=0, in_flight=0, done=3, seen=3, fail=0)


def test_a_record_says_when_its_last_attempt_started_and_how_long_it_took() -> None:
    """The engine says when an attempt started (its clock); the core stamps the record of
    the URL's last attempt with that instant as a time of day (through ``wall_offset``,
    which the shell sets) and the seconds to the attempt's end. An attempt whose start the
    engine does not say gets neither (so the scenarios above compare records without)."""
    state, written = make_state(obey_robots=False, max_tries=3)
    state.wall_offset = WALL_AT_ZERO  # 2027-01-15T08:00:00Z
    root = take(state, now=1.0)
    state.attempt_finished(root, html("/a", "/b"), now=1.25, started=1.0)
    assert (written[-1].fetched_at, written[-1].elapsed) == ("2027-01-15T08:00:01.000Z", 0.25)
    # Tried twice, first refused: the record is the second attempt's, to the microsecond.
    page_a = take(state, now=2.0)
    retry = state.attempt_finished(page_a, REFUSED, now=2.5, started=2.0)
    assert isinstance(retry, Retry)
    state.attempt_finished(retry.request, html(), now=7.1234567, started=3.0)
    assert written[-1].url == ROOT + "a"
    assert (written[-1].fetched_at, written[-1].elapsed) == ("2027-01-15T08:00:03.000Z", 4.123457)
    # A failure after its last try is stamped like any record.
    page_b = take(state, now=8.0)
    for attempt in (1, 2, 3):
        started = 8.0 + attempt
        outcome = state.attempt_finished(page_b, REFUSED, now=started + 0.5, started=started)
        page_b = outcome.request if isinstance(outcome, Retry) else page_b
    assert (written[-1].url, written[-1].exception) == (ROOT + "b", "ConnectError: refused")
    assert (written[-1].fetched_at, written[-1].elapsed) == ("2027-01-15T08:00:11.000Z", 0.5)
    assert [record.depth for record in written] == [0, 1, 1]


def test_finishing_a_url_not_in_flight_is_an_engine_bug() -> None:
    state, _ = make_state(obey_robots=False)
    with pytest.raises(RuntimeError, match="not in flight"):
        finish(state, FetchRequest(url=ROOT, redirects_left=10), html(), now=0.0)
    request = take(state)
    finish(state, request, html(), now=0.0)
    with pytest.raises(RuntimeError, match="finished it twice"):
        finish(state, request, html(), now=0.0)


def test_redirect_is_recorded_and_its_target_queued_with_one_redirect_fewer() -> None:
    state, _ = make_state(max_redirect=2, obey_robots=False)
    root = take(state)
    finish(state, root, Response(status=301, location="/next#frag"), now=0.0)
    assert state.done == [FetchStatistic(url=ROOT, next_url=ROOT + "next", status=301)]
    # A redirect is no hop: its target keeps the depth, and has the redirect as referrer.
    target = take(state)
    assert target == FetchRequest(url=ROOT + "next", redirects_left=1, depth=0, referrer=ROOT)
    finish(state, target, Response(status=308, location="http://www.example.com/x"), now=0.0)
    last = take(state)
    assert last == FetchRequest(
        url="http://www.example.com/x", redirects_left=0, referrer=ROOT + "next"
    )
    finish(state, last, html(), now=0.0)
    assert state.done[-1] == FetchStatistic(
        url="http://www.example.com/x",
        status=200,
        size=0,
        content_type="text/html",
        encoding="utf-8",
        referrer=ROOT + "next",
    )
    assert state.seen_urls == {ROOT, ROOT + "next", "http://www.example.com/x"}


def test_redirect_limit_reached_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    state, _ = make_state(max_redirect=0, obey_robots=False)
    with caplog.at_level(logging.WARNING, logger="trio_crawler"):
        finish(state, take(state), Response(status=302, location="/elsewhere"), now=0.0)
    assert "redirect limit reached" in caplog.text
    assert state.done[0].next_url == ROOT + "elsewhere"
    assert ROOT + "elsewhere" not in state.seen_urls
    assert state.finished


@pytest.mark.parametrize(
    ("location", "next_url", "followed"),
    [
        ("http://other.org/", "http://other.org/", False),  # out of scope: recorded only
        ("/", ROOT, False),  # to itself: already seen
        ("ftp://example.com/file", "ftp://example.com/file", False),  # another scheme
        ("/later", ROOT + "later", True),
    ],
)
def test_redirect_targets(location: str, next_url: str, followed: bool) -> None:
    state, _ = make_state(obey_robots=False)
    finish(state, take(state), Response(status=307, location=location), now=0.0)
    assert state.done == [FetchStatistic(url=ROOT, next_url=next_url, status=307)]
    assert (state.next_request(now=0.0) is not None) is followed


@pytest.mark.parametrize("location", [None, "", "http://[::1"])
def test_redirect_without_usable_location_is_recorded_like_an_error_status(
    location: str | None,
) -> None:
    state, _ = make_state(obey_robots=False)
    finish(state, take(state), Response(status=302, location=location, body=b"moved"), now=0.0)
    assert state.done == [FetchStatistic(url=ROOT, status=302, size=5)]
    assert state.finished


def test_network_errors_are_retried_then_recorded(caplog: pytest.LogCaptureFixture) -> None:
    state, written = make_state(max_tries=3, obey_robots=False)
    request = take(state)
    failure = FetchError(error="ConnectError: refused", retryable=True)
    with caplog.at_level(logging.INFO, logger="trio_crawler"):
        retry = finish(state, request, failure, now=0.0)
        assert retry == FetchRequest(url=ROOT, redirects_left=10, attempt=2)
        assert state.in_flight == {ROOT}  # a retry stays in flight
        assert written == []
        retry = finish(state, retry, failure, now=0.0)
        assert retry is not None
        assert retry.attempt == 3
        assert finish(state, retry, failure, now=0.0) is None
    assert written == [FetchStatistic(url=ROOT, exception="ConnectError: refused")]
    assert counts(state) == CrawlCounts(queued=0, in_flight=0, done=1, seen=1, fail=1)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        f"try 1 for {ROOT} raised ConnectError: refused",
        f"try 2 for {ROOT} raised ConnectError: refused",
        f"try 3 for {ROOT} raised ConnectError: refused",
        f"{ROOT} failed after 3 tries",
    ]
    assert caplog.records[-1].levelno == logging.WARNING


def test_a_success_on_a_later_try_is_an_ordinary_record() -> None:
    state, _ = make_state(max_tries=4, obey_robots=False)
    retry = finish(state, take(state), FetchError(error="ReadError", retryable=True), now=0.0)
    assert retry is not None
    assert finish(state, retry, html(), now=0.0) is None
    assert state.done[0].status == 200
    assert state.done[0].exception is None


def test_errors_a_retry_cannot_fix_are_recorded_at_once() -> None:
    state, _ = make_state(max_tries=4, obey_robots=False)
    failure = FetchError(
        error="DecodingError: bad gzip",
        retryable=False,
        status=200,
        content_type="text/html; charset=ISO-8859-1",
    )
    assert finish(state, take(state), failure, now=0.0) is None
    # A status-200 record has a type and an encoding even when its body was never read.
    assert state.done == [
        FetchStatistic(
            url=ROOT,
            status=200,
            exception="DecodingError: bad gzip",
            content_type="text/html",
            encoding="iso-8859-1",
        )
    ]


@pytest.mark.parametrize(
    ("content_type", "parsed", "media_type", "encoding"),
    [
        ("text/html", True, "text/html", "utf-8"),
        ("TEXT/HTML; charset=ISO-8859-1", True, "text/html", "iso-8859-1"),
        ("application/xhtml+xml", True, "application/xhtml+xml", "utf-8"),
        ("application/xml", True, "application/xml", "utf-8"),
        ("text/xml; charset=ascii", True, "text/xml", "ascii"),
        ("image/png", False, "image/png", "utf-8"),
        ("text/plain; charset=latin-1", False, "text/plain", "latin-1"),
        (None, False, None, "utf-8"),
    ],
)
def test_which_pages_are_parsed(
    content_type: str | None, parsed: bool, media_type: str | None, encoding: str
) -> None:
    state, _ = make_state(obey_robots=False)
    body = b'<a href="/link">x</a>'
    finish(state, take(state), Response(status=200, content_type=content_type, body=body), now=0.0)
    [record] = state.done
    assert (record.content_type, record.encoding, record.size) == (media_type, encoding, len(body))
    assert record.num_urls == record.num_new_urls == (1 if parsed else 0)
    assert (ROOT + "link" in state.seen_urls) is parsed


def test_error_statuses_have_no_type_encoding_or_links() -> None:
    state, _ = make_state(obey_robots=False)
    finish(state, take(state), html("/a", status=404), now=0.0)
    assert state.done == [FetchStatistic(url=ROOT, status=404, size=state.done[0].size)]
    assert state.done[0].size > 0
    assert state.finished


def test_exclude_and_strictness_apply_to_links() -> None:
    state, _ = make_state(exclude=r"/private", strict=False, obey_robots=False)
    page = html("/private/x", "/public", "http://sub.example.com/", "http://example.org/")
    finish(state, take(state), page, now=0.0)
    assert state.seen_urls == {ROOT, ROOT + "public", "http://sub.example.com/"}


def test_stop_scheduling_lets_in_flight_urls_finish() -> None:
    state, _ = make_state("a.com", "b.com", obey_robots=False)
    first = take(state)
    state.stop_scheduling()
    assert state.next_request(now=0.0) is None
    assert not state.finished
    finish(state, first, html("/more"), now=0.0)
    assert state.finished
    assert counts(state).todo == 2  # b.com and a.com/more were never fetched


def test_errors_and_failures_are_counted_as_the_report_counts_them() -> None:
    """statistics() counts ``error`` (an HTTP error status) and ``fail`` (every try
    failed) with the report's own classification: the progress line once said ``0 errors``
    beside a report's ``1 error`` (a 404), counting failures only."""
    state, written = make_state(obey_robots=False, max_tries=1)
    finish(state, take(state), html("/missing", "/refused", "/moved"), now=0.0)
    outcomes = {
        ROOT + "missing": html(status=404),
        ROOT + "refused": REFUSED,
        ROOT + "moved": Response(status=302),  # no Location: an error, as in the chapter
    }
    for _ in outcomes:
        request = take(state)
        finish(state, request, outcomes[request.url], now=0.0)
    assert state.finished
    assert counts(state) == CrawlCounts(queued=0, in_flight=0, done=4, seen=4, error=2, fail=1)
    report = count_records(written)
    assert (report["error"], report["fail"], report["html"]) == (2, 1, 1)


def test_urls_another_process_holds_are_leased_elsewhere_not_queued(store: str) -> None:
    """In a shared crawl, a URL another process holds is neither queued nor in flight
    here: it is ``leased_elsewhere`` (``--status``'s ``leased``), and still in ``todo``.
    The progress line used to show a dead peer's 17 leases as ``17 queued``."""
    if store != "redis":
        pytest.skip("only a shared crawl has URLs that other processes hold")
    shared = "two-processes" + (WRITES_REPORTED if _store["reported"] else "")  # one a run
    other, _ = make_state(obey_robots=False, crawl_id=shared, max_tasks=1)
    mine, _ = make_state(obey_robots=False, crawl_id=shared)
    held = take(other)
    assert held.url == ROOT
    assert mine.next_request(now=0.0) is None  # the root is the other process's
    assert counts(mine) == CrawlCounts(queued=0, in_flight=0, leased_elsewhere=1, done=0, seen=1)
    assert counts(mine).todo == 1
    assert not mine.finished  # the other process may die, and its lease run out
    told = channel_tells(mine, lambda frontier: frontier.shared.finished)
    finish(other, held, html(), now=0.0)  # done, with no links: the crawl is finished
    assert told.wait(HANG_LIMIT), "this process did not hear that the crawl is finished"
    assert mine.next_request(now=0.0) is None
    assert mine.finished
    assert counts(mine) == CrawlCounts(queued=0, in_flight=0, leased_elsewhere=0, done=0, seen=1)


def _raised_from(outer: Exception, inner: BaseException, *, hide: bool) -> Exception:
    """``outer``, raised while handling ``inner`` (``from None`` when ``hide``)."""
    try:
        try:
            raise inner
        except BaseException:
            if hide:
                raise outer from None
            raise outer  # noqa: B904 (the implicit context is what is being tested)
    except Exception as exc:
        return exc


def test_describe_exception_borrows_a_message_from_below() -> None:
    assert describe_exception(OSError("refused")) == "OSError: refused"
    assert describe_exception(TimeoutError()) == "TimeoutError"
    bare_over_reason = _raised_from(ConnectionError(), ValueError("bad certificate"), hide=True)
    assert describe_exception(bare_over_reason) == "ConnectionError: bad certificate"
    implicit = _raised_from(ConnectionError(), KeyError("k"), hide=False)
    assert describe_exception(implicit) == "ConnectionError: 'k'"
    # A chain of messageless exceptions that loops back on itself still ends.
    first, second = ConnectionError(), ConnectionError()
    first.__context__, second.__context__ = second, first
    assert describe_exception(first) == "ConnectionError"


# -- robots.txt comes first, once per origin --------------------------------------------


def test_robots_txt_comes_first_and_holds_its_origin() -> None:
    state, written = make_state(ROOT, ROOT + "private/x")
    assert state.statistics() == stats(queued=2, in_flight=0, done=0, seen=2)

    robots = take(state)
    assert robots.robots is True
    assert robots == RobotsRequest(
        url=ROBOTS, redirects_left=MAX_ROBOTS_REDIRECTS, attempt=1, origin=ORIGIN
    )
    # robots.txt is in flight in the counts, but it is not a URL of the crawl.
    assert state.statistics() == stats(queued=2, in_flight=1, done=0, seen=2)
    assert state.in_flight == frozenset()
    assert ROBOTS not in state.seen_urls
    # The origin's URLs wait for its outcome, which is no timer: nothing to wake up for.
    assert state.next_request(now=100.0) is None
    assert state.next_wakeup() is None
    assert not state.finished

    assert finish(state, robots, robots_txt("User-agent: *\nDisallow: /private\n"), now=0.0) is None
    assert written == []  # robots.txt is never a record
    assert state.statistics() == stats(queued=2, in_flight=0, done=0, seen=2)

    root = take(state)
    assert root == FetchRequest(url=ROOT, redirects_left=10, attempt=1, depth=0)
    assert state.next_request(now=0.0) is None  # /private/x is settled without a request...
    assert state.limit_counts == {"robots_disallowed": 1}  # ... counted, not recorded
    assert state.statistics() == stats(queued=0, in_flight=1, done=0, seen=2)

    assert finish(state, root, html(), now=0.0) is None
    assert [stat.url for stat in written] == [ROOT]
    assert state.statistics() == stats(queued=0, in_flight=0, done=1, seen=2)
    assert state.finished


def test_robots_txt_is_fetched_once_whatever_the_number_of_urls() -> None:
    state, _ = make_state(*(f"{ROOT}p{i}" for i in range(20)))
    robots = take(state)
    # Twenty idle workers asking: none gets robots.txt again, none gets a page yet.
    assert [state.next_request(now=0.0) for _ in range(20)] == [None] * 20
    finish(state, robots, robots_txt(status=404), now=0.0)
    handed_out = [state.next_request(now=0.0) for _ in range(21)]
    assert [request.url for request in handed_out[:20] if request is not None] == [
        f"{ROOT}p{i}" for i in range(20)
    ]
    assert handed_out[20] is None
    assert not any(request.robots for request in handed_out if request is not None)
    # Links found later on the same origin need no second robots.txt.
    assert handed_out[0] is not None
    finish(state, handed_out[0], html("/later"), now=0.0)
    assert take(state).url == ROOT + "later"


def test_each_origin_waits_for_its_own_robots_txt_only() -> None:
    state, _ = make_state("http://a.com/", "http://b.com/")
    robots_a, robots_b = take(state), take(state)
    assert (robots_a.url, robots_b.url) == ("http://a.com/robots.txt", "http://b.com/robots.txt")
    assert state.next_request(now=0.0) is None
    assert state.statistics() == stats(queued=2, in_flight=2, done=0, seen=2)

    finish(state, robots_b, robots_txt(status=404), now=0.0)
    assert take(state).url == "http://b.com/"  # b goes on while a.com's rules are awaited
    assert state.next_request(now=0.0) is None
    finish(state, robots_a, robots_txt(status=404), now=0.0)
    assert take(state).url == "http://a.com/"


@pytest.mark.parametrize(
    ("roots", "robots_urls"),
    [
        # Scheme, host and port make an origin (RFC 9309, section 2.3).
        (
            ["http://a.com/", "https://a.com/", "http://a.com:8080/"],
            ["http://a.com/robots.txt", "https://a.com/robots.txt", "http://a.com:8080/robots.txt"],
        ),
        # The same origin however it is spelled: default port, upper case, a user.
        (["http://a.com/x", "HTTP://A.COM:80/y", "http://me@a.com/z"], ["http://a.com/robots.txt"]),
    ],
)
def test_an_origin_is_scheme_host_and_port(roots: list[str], robots_urls: list[str]) -> None:
    state, _ = make_state(*roots)
    handed_out = []
    while (request := state.next_request(now=0.0)) is not None:
        handed_out.append(request)
    assert all(request.robots for request in handed_out)
    assert [request.url for request in handed_out] == robots_urls


def test_a_new_origin_found_later_gets_robots_txt_first() -> None:
    # Another port of a root host is in scope (the port is not part of host matching),
    # but it is another origin, with a robots.txt of its own.
    state, _ = make_state("http://a.com/")
    open_origin(state)
    finish(state, take(state), html("http://a.com:8080/x", "/y"), now=0.0)
    assert take(state).url == "http://a.com/y"
    robots = take(state)
    assert robots == RobotsRequest(
        url="http://a.com:8080/robots.txt", redirects_left=5, origin="http://a.com:8080"
    )
    assert state.next_request(now=0.0) is None
    finish(state, robots, robots_txt(status=404), now=0.0)
    assert take(state).url == "http://a.com:8080/x"


# -- what robots.txt says ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "allowed"),
    [
        (robots_txt("User-agent: *\nDisallow: /\n"), False),  # 2xx: the rules apply
        (robots_txt("User-agent: *\nDisallow: /\n", status=204), False),
        (robots_txt(""), True),  # an empty file allows everything
        (robots_txt("User-agent: *\nDisallow: /\n", status=401), True),  # 4xx: unavailable
        (robots_txt("User-agent: *\nDisallow: /\n", status=403), True),
        (robots_txt("User-agent: *\nDisallow: /\n", status=404), True),
        (robots_txt("User-agent: *\nDisallow: /\n", status=500), False),  # 5xx: unreachable
        (robots_txt("User-agent: *\nDisallow: /\n", status=503), False),
        (Response(status=302), True),  # a redirect with nowhere to go: unavailable
    ],
)
def test_robots_txt_status_decides_the_rules(outcome: Response, allowed: bool) -> None:
    state, written = make_state(ROOT, ROOT + "a")
    assert finish(state, take(state), outcome, now=0.0) is None  # never retried
    if allowed:
        assert [take(state).url, take(state).url] == [ROOT, ROOT + "a"]
        assert state.limit_counts == {}
    else:
        # Not even the roots: no request, no record, and the crawl is over.
        assert state.next_request(now=0.0) is None
        assert state.finished
        assert written == []
        assert state.limit_counts == {"robots_disallowed": 2}
        assert state.statistics() == stats(queued=0, in_flight=0, done=0, seen=2)


def test_disallowed_links_are_counted_once_and_never_queued(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state, written = make_state()
    open_origin(state, "User-agent: *\nDisallow: /private\n")
    root = take(state)
    with caplog.at_level(logging.INFO, logger="trio_crawler"):
        finish(state, root, html("/private/a", "/public"), now=0.0)
        public = take(state)
        finish(state, public, html("/private/a", "/private/b"), now=0.0)
    assert state.next_request(now=0.0) is None
    assert state.finished
    assert [stat.url for stat in written] == [ROOT, ROOT + "public"]
    # Distinct URLs: /private/a, linked twice, counts once (it is seen, so not new again).
    assert state.limit_counts == {"robots_disallowed": 2}
    assert caplog.messages == [
        f"robots.txt disallows {ROOT}private/a",
        f"robots.txt disallows {ROOT}private/b",
    ]
    assert state.statistics() == stats(queued=0, in_flight=0, done=2, seen=4)


@pytest.mark.parametrize("user_agent", [None, "MyBot/1.0"])
def test_rules_are_matched_on_the_product_token(user_agent: str | None) -> None:
    rules = (
        "User-agent: mybot\nDisallow: /\n\n"
        "User-agent: trio-crawler\nDisallow: /mine\n\n"
        "User-agent: *\nDisallow: /\n"
    )
    state, _ = make_state(ROOT, ROOT + "mine", ROOT + "yours", user_agent=user_agent)
    open_origin(state, rules)
    assert [take(state).url, take(state).url] == [ROOT, ROOT + "yours"]
    assert state.next_request(now=0.0) is None
    assert state.limit_counts == {"robots_disallowed": 1}


def test_redirect_targets_obey_robots_txt() -> None:
    state, _ = make_state()
    open_origin(state, "User-agent: *\nDisallow: /private\n")
    finish(state, take(state), Response(status=301, location="/private/moved"), now=0.0)
    assert state.next_request(now=0.0) is None
    assert state.finished
    assert state.limit_counts == {"robots_disallowed": 1}
    assert [stat.next_url for stat in state.done] == [ROOT + "private/moved"]


def test_robots_txt_redirects_are_followed_for_the_origin() -> None:
    state, written = make_state()
    request = finish(
        state,
        take(state),
        Response(status=301, location="http://cdn.example.net/rules.txt"),
        now=0.0,
    )
    # The target is fetched next, as the same origin's robots.txt, with one redirect fewer.
    assert request == RobotsRequest(
        url="http://cdn.example.net/rules.txt",
        redirects_left=MAX_ROBOTS_REDIRECTS - 1,
        attempt=1,
        origin=ORIGIN,
    )
    assert state.statistics() == stats(queued=1, in_flight=1, done=0, seen=1)
    assert state.next_request(now=0.0) is None
    assert finish(state, request, robots_txt("User-agent: *\nDisallow: /\n"), now=0.0) is None
    assert state.next_request(now=0.0) is None
    assert state.limit_counts == {"robots_disallowed": 1}
    assert written == []
    assert state.finished


def test_robots_txt_redirect_chain_ends_after_five_hops() -> None:
    # RFC 9309, section 2.3.1.2: follow at least five; past that the file is unavailable.
    state, _ = make_state()
    request: FetchRequest | None = take(state)
    for hop in range(1, MAX_ROBOTS_REDIRECTS + 1):
        assert request is not None
        request = finish(state, request, Response(status=301, location=f"/r{hop}"), now=0.0)
        assert request == RobotsRequest(
            url=f"{ROOT}r{hop}", redirects_left=MAX_ROBOTS_REDIRECTS - hop, origin=ORIGIN
        )
    assert request is not None
    assert finish(state, request, Response(status=301, location="/r6"), now=0.0) is None
    assert take(state).url == ROOT  # unavailable: everything allowed
    assert MAX_ROBOTS_REDIRECTS == 5


# -- robots.txt that cannot be fetched ---------------------------------------------------


def test_robots_txt_network_error_fails_every_url_of_the_origin(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state, written = make_state(ROOT, ROOT + "a", "http://other.com/", max_tries=3)
    robots, other_robots = take(state), take(state)
    with caplog.at_level(logging.INFO, logger="trio_crawler"):
        retry = finish(state, robots, REFUSED, now=0.0)
        assert retry == RobotsRequest(url=ROBOTS, redirects_left=5, attempt=2, origin=ORIGIN)
        retry = finish(state, retry, REFUSED, now=0.0)
        assert retry is not None
        assert retry.attempt == 3
        assert state.statistics() == stats(queued=3, in_flight=2, done=0, seen=3)
        assert finish(state, retry, REFUSED, now=0.0) is None
    assert caplog.messages == [
        f"try 1 for {ROBOTS} raised ConnectError: refused",
        f"try 2 for {ROBOTS} raised ConnectError: refused",
        f"try 3 for {ROBOTS} raised ConnectError: refused",
        f"{ROBOTS} failed: ConnectError: refused; not fetching from {ORIGIN}",
    ]
    assert caplog.records[-1].levelno == logging.WARNING

    # The origin's URLs are settled with that error instead of being fetched.
    assert state.next_request(now=0.0) is None
    failures = [
        FetchStatistic(url=ROOT, exception="ConnectError: refused"),
        FetchStatistic(url=ROOT + "a", exception="ConnectError: refused"),
    ]
    assert written == failures
    assert state.statistics() == stats(queued=1, in_flight=1, done=2, seen=3, fail=2)

    # A URL of the dead origin found later fails the same way, without another try.
    finish(state, other_robots, robots_txt(status=404), now=0.0)
    finish(state, take(state), html(ROOT + "later"), now=0.0)
    assert state.next_request(now=0.0) is None
    assert written[-1] == FetchStatistic(
        url=ROOT + "later", exception="ConnectError: refused", depth=1, referrer="http://other.com/"
    )
    assert state.finished
    assert state.statistics() == stats(queued=0, in_flight=0, done=4, seen=4, fail=3)


def test_robots_txt_error_a_retry_cannot_fix_fails_at_once() -> None:
    state, written = make_state(max_tries=4)
    failure = FetchError(error="UnsupportedProtocol: nope", retryable=False)
    assert finish(state, take(state), failure, now=0.0) is None
    assert state.next_request(now=0.0) is None
    assert written == [FetchStatistic(url=ROOT, exception="UnsupportedProtocol: nope")]


# -- delays: --delay, Crawl-delay and next_wakeup ----------------------------------------


def test_crawl_delay_spaces_the_origins_requests() -> None:
    state, _ = make_state(ROOT, ROOT + "a", ROOT + "b")
    robots = take(state, now=100.0)
    finish(state, robots, robots_txt("User-agent: *\nCrawl-delay: 2\n"), now=100.5)
    # The delay runs from when the rules arrived.
    assert state.next_request(now=100.5) is None
    assert state.next_wakeup() == 102.5
    assert not state.finished
    assert state.statistics() == stats(queued=3, in_flight=0, done=0, seen=3)
    assert state.next_request(now=102.4) is None
    assert state.next_wakeup() == 102.5

    assert take(state, now=102.5).url == ROOT
    assert state.next_request(now=102.5) is None
    assert state.next_wakeup() == 104.5
    assert take(state, now=105.0).url == ROOT + "a"  # late is fine; the next waits from here
    assert state.next_request(now=105.0) is None
    assert state.next_wakeup() == 107.0
    assert take(state, now=107.0).url == ROOT + "b"
    assert state.next_request(now=107.0) is None
    assert state.next_wakeup() is None  # nothing queued is waiting


@pytest.mark.parametrize(
    ("delay", "crawl_delay", "spacing"),
    [
        (0.0, None, 0.0),
        (1.0, None, 1.0),  # --delay alone; robots.txt's own request counts as a start
        (0.0, "2", 2.0),
        (3.0, "2", 3.0),  # the larger of the two
        (1.0, "0.5", 1.0),
        (0.0, "3600", MAX_HOST_DELAY),  # capped
        (0.0, "nonsense", 0.0),
    ],
)
def test_spacing_is_the_larger_of_delay_and_crawl_delay_capped(
    delay: float, crawl_delay: str | None, spacing: float
) -> None:
    state, _ = make_state(ROOT, ROOT + "a", ROOT + "b", delay=delay)
    # Paced (the engines read pages in turns, _turns.py) by --delay from the start, by a
    # Crawl-delay from the rules that set it.
    assert state.frontier.paced is (delay > 0)
    rules = "" if crawl_delay is None else f"User-agent: *\nCrawl-delay: {crawl_delay}\n"
    open_origin(state, rules, now=0.0)
    assert state.frontier.paced is (spacing > 0)
    for n in (1, 2, 3):
        if spacing:
            assert state.next_request(now=n * spacing - 0.01) is None
            assert state.next_wakeup() == n * spacing
        take(state, now=n * spacing)


def test_a_host_waiting_out_its_delay_does_not_hold_back_others() -> None:
    slow, quick = "http://slow.com/", "http://quick.com/"
    state, _ = make_state(slow, slow + "2", quick, quick + "2")
    slow_robots, quick_robots = take(state), take(state)
    finish(state, slow_robots, robots_txt("User-agent: *\nCrawl-delay: 5\n"), now=0.0)
    finish(state, quick_robots, robots_txt(status=404), now=0.0)
    # slow.com's URLs were found first, but it must wait: quick.com's go now.
    assert [take(state).url, take(state).url] == [quick, quick + "2"]
    assert state.next_request(now=0.0) is None
    assert state.next_wakeup() == 5.0
    assert take(state, now=5.0).url == slow
    assert state.next_request(now=5.0) is None
    assert state.next_wakeup() == 10.0


def test_a_timed_out_request_holds_its_origin_until_its_server_is_done() -> None:
    """A request that timed out unanswered is finished once the engine stopped waiting for
    its server (``now``): its origin's next request waits the delay from then, while the
    record's ``elapsed`` runs to the timeout itself (``ended``)."""
    state, written = make_state(
        ROOT, ROOT + "next", obey_robots=False, delay=1.0, max_per_host=1, max_tries=1
    )
    state.wall_offset = WALL_AT_ZERO
    request = take(state, now=0.0)
    timed_out = FetchError(error="TimeoutError: attempt took longer than 2 s", retryable=True)
    assert state.next_request(now=3.0) is None  # still in flight: its server may have it
    result = state.attempt_finished(request, timed_out, now=3.5, started=0.0, ended=2.0)
    assert isinstance(result, Recorded)
    assert (written[-1].url, written[-1].elapsed) == (ROOT, 2.0)
    assert state.next_request(now=4.0) is None
    assert state.next_wakeup() == 4.5  # the delay from when the server was done
    assert take(state, now=4.5).url == ROOT + "next"


def test_a_network_error_retry_waits_for_the_delay() -> None:
    state, written = make_state(obey_robots=False, delay=1.0, max_tries=2)
    request = take(state, now=0.0)
    # With a delay the retry is not returned to the worker: it waits its turn.
    assert finish(state, request, REFUSED, now=0.25) is None
    assert state.in_flight == frozenset()
    assert state.statistics() == stats(queued=1, in_flight=0, done=0, seen=1)
    assert state.next_request(now=0.25) is None
    assert state.next_wakeup() == 1.0
    retry = take(state, now=1.0)
    assert retry.attempt == 2
    assert finish(state, retry, REFUSED, now=1.0) is None
    assert written == [FetchStatistic(url=ROOT, exception="ConnectError: refused")]


def test_one_at_a_time_a_retry_waits_the_delay_from_the_failures_end() -> None:
    """With ``--max-per-host 1`` the delay runs from each attempt's end, a failed one's too:
    a refusal that took a while came from a server that may have been slow to take the
    connection, and its retry goes a delay after it, not after the attempt's start."""
    state, written = make_state(obey_robots=False, delay=1.0, max_per_host=1, max_tries=2)
    request = take(state, now=0.0)
    assert finish(state, request, REFUSED, now=0.25) is None
    assert state.next_request(now=1.0) is None
    assert state.next_wakeup() == pytest.approx(1.25 - called_early(state))
    retry = take(state, now=1.25)
    assert retry.attempt == 2
    assert finish(state, retry, REFUSED, now=1.5) is None
    assert written == [FetchStatistic(url=ROOT, exception="ConnectError: refused")]


# -- Retry-After -------------------------------------------------------------------------


def test_retry_after_holds_the_whole_origin_then_retries_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state, written = make_state(ROOT, ROOT + "a", "http://other.com/", obey_robots=False)
    root = take(state, now=10.0)
    with caplog.at_level(logging.INFO, logger="trio_crawler"):
        busy = Response(status=503, retry_after=3.0)
        assert finish(state, root, busy, now=10.0) is None
    assert caplog.messages == [f"try 1 for {ROOT} got 503; retrying after 3 s"]
    assert written == []
    assert state.in_flight == frozenset()
    assert state.statistics() == stats(queued=3, in_flight=0, done=0, seen=3)
    assert state.limit_counts == {"retried_status": 1}

    # The other origin is not held; example.com is, /a included, until 13.
    assert take(state, now=10.0).url == "http://other.com/"
    assert state.next_request(now=12.9) is None
    assert state.next_wakeup() == 13.0
    assert take(state, now=13.0) == FetchRequest(url=ROOT, redirects_left=10, attempt=2)
    assert take(state, now=13.0).url == ROOT + "a"


def test_a_request_handed_out_before_a_retry_after_is_held_back_until_it_ends() -> None:
    """/a was handed out (waiting for an idle worker) when / got its Retry-After: it must
    not start inside the wait. Given back, it is handed out again when the wait ends; a
    request of another origin, and robots.txt, are never held back."""
    state, written = make_state(ROOT, ROOT + "a", "http://other.com/", obey_robots=False)
    root = take(state, now=10.0)
    waiting = state.next_request(now=10.0)
    assert waiting is not None
    assert waiting.url == ROOT + "a"
    assert not state.held_back(waiting, now=10.0)
    assert finish(state, root, Response(status=503, retry_after=3.0), now=10.0) is None
    assert state.held_back(waiting, now=10.0)
    assert state.held_back(waiting, now=12.9)
    state.put_back(waiting)
    assert state.statistics() == stats(queued=3, in_flight=0, done=0, seen=3)
    other = take(state, now=10.0)
    assert other.url == "http://other.com/"
    assert not state.held_back(other, now=10.0)
    assert state.next_request(now=12.9) is None
    assert state.next_wakeup() == 13.0
    again = [take(state, now=13.0), take(state, now=13.0)]
    assert {request.url for request in again} == {ROOT, ROOT + "a"}
    assert not any(state.held_back(request, now=13.0) for request in again)
    assert written == []


@pytest.mark.parametrize("max_tries", [1, 2, 3])
def test_retry_after_counts_against_max_tries(max_tries: int) -> None:
    state, written = make_state(obey_robots=False, max_tries=max_tries)
    busy = Response(status=429, retry_after=3.0, body=b"busy")
    now = 0.0
    request = take(state, now)
    for attempt in range(1, max_tries):
        assert request.attempt == attempt
        assert finish(state, request, busy, now=now) is None
        assert written == []
        now += 3.0
        request = take(state, now)
    assert request.attempt == max_tries
    assert finish(state, request, busy, now=now) is None
    assert written == [FetchStatistic(url=ROOT, status=429, size=4)]
    assert state.limit_counts.get("retried_status", 0) == max_tries - 1
    assert state.finished


def test_retry_after_and_network_errors_share_the_tries() -> None:
    state, written = make_state(obey_robots=False, max_tries=3)
    retry = finish(state, take(state), REFUSED, now=0.0)
    assert retry is not None
    assert finish(state, retry, Response(status=503, retry_after=1.0), now=0.0) is None
    last = take(state, now=1.0)
    assert last.attempt == 3
    finish(state, last, Response(status=503, retry_after=1.0), now=1.0)
    assert written == [FetchStatistic(url=ROOT, status=503)]


@pytest.mark.parametrize("wait", [599.0, 600.0])
def test_a_retry_after_up_to_max_retry_after_is_waited_in_full(wait: float) -> None:
    state, written = make_state(obey_robots=False)
    assert state.config.max_retry_after == 600.0
    finish(state, take(state, now=5.0), Response(status=503, retry_after=wait), now=5.0)
    assert state.next_request(now=5.0) is None
    assert state.next_wakeup() == 5.0 + wait > MAX_HOST_DELAY  # no other cap applies
    assert take(state, now=5.0 + wait).attempt == 2
    assert written == []


@pytest.mark.parametrize(("max_retry_after", "wait"), [(600.0, 601.0), (0.0, 1.0), (5.0, 86400.0)])
def test_a_longer_retry_after_ends_the_url_with_that_answer(
    max_retry_after: float, wait: float, caplog: pytest.LogCaptureFixture
) -> None:
    state, written = make_state(obey_robots=False, max_retry_after=max_retry_after)
    busy = Response(status=429, retry_after=wait, body=b"come back tomorrow")
    with caplog.at_level(logging.INFO, logger="trio_crawler"):
        assert finish(state, take(state), busy, now=0.0) is None
    assert written == [FetchStatistic(url=ROOT, status=429, size=18)]
    assert state.finished
    assert state.limit_counts == {}
    assert caplog.messages == [
        f"try 1 for {ROOT} got 429 asking to wait {wait:g} s, longer than --max-retry-after "
        f"({max_retry_after:g} s): not retried"
    ]


def test_max_retry_after_zero_still_retries_a_retry_after_of_zero() -> None:
    state, written = make_state(obey_robots=False, max_retry_after=0)
    finish(state, take(state, now=1.0), Response(status=503, retry_after=0.0), now=1.0)
    assert take(state, now=1.0).attempt == 2
    assert written == []


def test_retry_after_never_shortens_a_delay() -> None:
    state, _ = make_state(obey_robots=False, delay=10.0)
    request = take(state, now=0.0)
    finish(state, request, Response(status=503, retry_after=1.0), now=0.5)
    assert state.next_request(now=1.5) is None
    assert state.next_wakeup() == 10.0


@pytest.mark.parametrize(
    ("status", "retry_after"),
    [(500, None), (500, 3.0), (404, None), (200, 3.0), (301, 3.0), (501, None), (507, None)],
)
def test_other_statuses_are_records_after_one_attempt(
    status: int, retry_after: float | None
) -> None:
    state, written = make_state(obey_robots=False)
    response = Response(status=status, retry_after=retry_after)
    assert finish(state, take(state), response, now=0.0) is None
    assert [stat.status for stat in written] == [status]
    assert state.limit_counts == {}
    assert state.finished


# -- a backoff, for the statuses that mean "not now" but say nothing of when -----------------


def test_backoff_doubles_from_about_a_second_up_to_a_minute() -> None:
    # A jitter of 0.5 is the step itself; 0 and 1 are 20 % under and over it.
    assert [backoff_wait(attempt, 0.5) for attempt in range(1, 9)] == [
        1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0
    ]  # fmt: skip
    assert (backoff_wait(1, 0.0), backoff_wait(1, 0.999999), backoff_wait(3, 0.25)) == (
        0.8,
        1.2,
        3.6,
    )
    # The cap holds for any jitter and any try, the millionth included.
    assert backoff_wait(7, 0.999999) == backoff_wait(8, 0.0) == backoff_wait(10**6, 0.0) == 60
    assert (backoff_wait(6, 0.999999), backoff_wait(7, 0.0), BACKOFF_CAP) == (38.4, 51.2, 60)


@pytest.mark.parametrize("status", sorted(RETRY_STATUSES))
def test_a_status_that_means_not_now_is_retried_after_a_backoff(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    assert sorted(RETRY_STATUSES) == [408, 429, 502, 503, 504]
    state, written = make_state(ROOT, ROOT + "a", "http://other.com/", obey_robots=False)
    first, second = backoffs(1, 2)
    assert 0.8 <= first <= 1.2
    assert 1.6 <= second <= 2.4
    with caplog.at_level(logging.INFO, logger="trio_crawler"):
        root = take(state, now=10.0)
        assert finish(state, root, Response(status=status), now=10.0) is None
        assert written == []
        assert state.in_flight == frozenset()
        # The whole origin waits, /a included; the other origin does not.
        assert take(state, now=10.0).url == "http://other.com/"
        assert state.next_request(now=10.0 + first - 0.001) is None
        assert state.next_wakeup() == 10.0 + first
        retry = take(state, now=10.0 + first)
        assert retry == FetchRequest(url=ROOT, redirects_left=10, attempt=2)
        assert take(state, now=10.0 + first).url == ROOT + "a"
        # The second backoff is about twice the first.
        now = 10.0 + first
        assert finish(state, retry, Response(status=status), now=now) is None
        assert state.next_request(now=now) is None
        assert state.next_wakeup() == now + second
        assert take(state, now=now + second).attempt == 3
    assert caplog.messages == [
        f"try 1 for {ROOT} got {status}; retrying after {first:g} s",
        f"try 2 for {ROOT} got {status}; retrying after {second:g} s",
    ]
    assert state.limit_counts == {"retried_status": 2}


def test_the_record_carries_the_last_answer() -> None:
    state, written = make_state(obey_robots=False, max_tries=4)
    answers = [
        Response(status=503, body=b"busy"),
        Response(status=429, retry_after=2.0, body=b"slow down"),
        Response(status=502, content_type="text/html", body=b"bad gateway"),
        Response(status=504, content_type="text/plain; charset=latin-1", body=b"timed out"),
    ]
    # A backoff after tries 1 and 3, the wait the 429 asked for after try 2.
    after_one, after_three = backoffs(1, 3)
    waits = [after_one, 2.0, after_three]
    now = 0.0
    request = take(state, now)
    for answer, wait in zip(answers, [*waits, None], strict=True):
        assert finish(state, request, answer, now=now) is None
        if wait is None:
            break
        assert written == []
        assert state.next_request(now=now) is None
        assert state.next_wakeup() == now + wait
        now += wait
        request = take(state, now)
    assert request.attempt == 4
    # The last answer, recorded as any 504 is: its size, and no type for an error status.
    assert written == [FetchStatistic(url=ROOT, status=504, size=9)]
    assert state.limit_counts == {"retried_status": 3}
    assert state.finished


def test_retry_after_and_backoff_share_the_tries_and_the_draws() -> None:
    """A Retry-After draws no jitter: the first backoff, after try 2, has the first draw."""
    state, written = make_state(obey_robots=False, max_tries=3)
    [after_two] = backoffs(2)
    finish(state, take(state, now=0.0), Response(status=503, retry_after=5.0), now=0.0)
    assert state.next_request(now=0.0) is None
    assert state.next_wakeup() == 5.0
    finish(state, take(state, now=5.0), Response(status=503), now=5.0)
    assert state.next_request(now=5.0) is None
    assert state.next_wakeup() == 5.0 + after_two
    last = take(state, now=5.0 + after_two)
    assert finish(state, last, Response(status=503), now=5.0 + after_two) is None
    assert written == [FetchStatistic(url=ROOT, status=503)]
    assert state.limit_counts == {"retried_status": 2}


def test_a_backoff_never_shortens_a_delay() -> None:
    state, _ = make_state(obey_robots=False, delay=10.0)
    finish(state, take(state, now=0.0), Response(status=502), now=0.5)
    assert state.next_request(now=5.0) is None
    assert state.next_wakeup() == 10.0


def test_a_status_with_no_tries_left_is_recorded(caplog: pytest.LogCaptureFixture) -> None:
    state, written = make_state(obey_robots=False, max_tries=1)
    with caplog.at_level(logging.INFO, logger="trio_crawler"):
        assert finish(state, take(state), Response(status=408, body=b"slow"), now=0.0) is None
    assert written == [FetchStatistic(url=ROOT, status=408, size=4)]
    assert caplog.messages == [f"try 1 for {ROOT} got 408; no tries left"]
    assert state.limit_counts == {}


# -- per-host concurrency and the order URLs go out in ---------------------------------


def test_max_per_host_holds_an_origin_not_the_others() -> None:
    a, b = "http://a.com/", "http://b.com/"
    state, _ = make_state(a + "1", a + "2", a + "3", b + "1", obey_robots=False, max_per_host=2)
    first, second, other = take(state), take(state), take(state)
    assert [first.url, second.url, other.url] == [a + "1", a + "2", b + "1"]
    assert state.next_request(now=0.0) is None
    assert state.next_wakeup() is None  # it waits for a request to end, not for a time
    assert state.statistics() == stats(queued=1, in_flight=3, done=0, seen=4)
    finish(state, other, html(), now=0.0)
    assert state.next_request(now=0.0) is None  # b.com ending frees nothing for a.com
    finish(state, first, html(), now=0.0)
    assert take(state).url == a + "3"


def test_max_per_host_counts_robots_txt_as_the_origins_only_request() -> None:
    state, _ = make_state(ROOT, ROOT + "a", max_per_host=1)
    robots = take(state)
    assert state.next_request(now=0.0) is None
    finish(state, robots, robots_txt(status=404), now=0.0)
    root = take(state)
    assert state.next_request(now=0.0) is None
    finish(state, root, html(), now=0.0)
    assert take(state).url == ROOT + "a"


def test_a_retry_after_wait_frees_the_host_slot() -> None:
    state, _ = make_state(ROOT, ROOT + "a", obey_robots=False, max_per_host=1)
    root = take(state, now=0.0)
    finish(state, root, Response(status=503, retry_after=2.0), now=0.0)
    assert state.next_request(now=0.0) is None
    assert take(state, now=2.0).attempt == 2
    assert state.next_request(now=2.0) is None  # the slot is taken again


def test_urls_go_out_in_the_order_found_across_origins() -> None:
    a, b = "http://a.com/", "http://b.com/"
    state, _ = make_state(a, b, obey_robots=False)
    root_a, root_b = take(state), take(state)
    finish(state, root_a, html(b + "from-a", "/x"), now=0.0)
    finish(state, root_b, html(a + "from-b", "/y"), now=0.0)
    # The chapter's FIFO: a's links (sorted) before b's, whatever their origin.
    assert [take(state).url for _ in range(4)] == [a + "x", b + "from-a", a + "from-b", b + "y"]


def test_roots_go_out_in_the_order_given_across_origins() -> None:
    a, b = "http://a.com/", "http://b.com/"
    state, _ = make_state(a + "1", b + "1", a + "2", obey_robots=False)
    assert [take(state).url for _ in range(3)] == [a + "1", b + "1", a + "2"]


# -- put_back ----------------------------------------------------------------------------


def test_put_back_returns_requests_to_the_front_unchanged() -> None:
    state, _ = make_state(ROOT, ROOT + "a", max_tries=3)
    robots = take(state)
    state.put_back(robots)
    assert state.statistics() == stats(queued=2, in_flight=0, done=0, seen=2)
    assert take(state) == robots  # the fetch that never happened is handed out again
    finish(state, robots, robots_txt(status=404), now=0.0)

    root = take(state)
    state.put_back(root)
    assert state.in_flight == frozenset()
    assert state.statistics() == stats(queued=2, in_flight=0, done=0, seen=2)
    assert take(state) == root  # still first, before /a
    retry = finish(state, root, REFUSED, now=0.0)
    assert retry is not None
    state.put_back(retry)
    assert take(state) == retry  # the attempt count is kept
    assert retry.attempt == 2


def test_put_back_of_a_request_not_in_flight_is_an_engine_bug() -> None:
    state, _ = make_state(obey_robots=False)
    with pytest.raises(RuntimeError, match="is not in flight; it cannot be put back"):
        state.put_back(FetchRequest(url=ROOT, redirects_left=10))


def test_finishing_robots_txt_twice_is_an_engine_bug() -> None:
    state, _ = make_state()
    robots = take(state)
    finish(state, robots, robots_txt(status=404), now=0.0)
    with pytest.raises(RuntimeError, match="is not in flight; an engine finished it twice"):
        finish(state, robots, robots_txt(status=404), now=0.0)


def test_a_put_back_url_counts_once_toward_max_pages() -> None:
    state, _ = make_state(ROOT, ROOT + "a", obey_robots=False, max_pages=2)
    state.put_back(take(state))
    assert [take(state).url, take(state).url] == [ROOT, ROOT + "a"]


# -- limits: max_pages and max_depth -----------------------------------------------------


def test_max_pages_gives_exactly_n_records_and_robots_txt_is_not_one() -> None:
    state, written = make_state(max_pages=3)
    open_origin(state, "User-agent: *\nDisallow: /private\n")
    finish(state, take(state), html("/a", "/b", "/c", "/private/x"), now=0.0)
    a, b = take(state), take(state)
    assert state.next_request(now=0.0) is None
    assert state.limit_reached == "max-pages"
    assert state.scheduling_stopped
    assert state.next_wakeup() is None
    assert not state.finished  # /a and /b are still in flight
    finish(state, a, html("/d"), now=0.0)
    finish(state, b, html(), now=0.0)
    assert state.finished
    assert [stat.url for stat in written] == [ROOT, ROOT + "a", ROOT + "b"]
    # /c and /d were never fetched; /private/x is seen but was never queued.
    assert state.statistics() == stats(queued=2, in_flight=0, done=3, seen=6)
    assert state.limit_counts == {"robots_disallowed": 1}


def test_max_pages_is_not_reached_by_a_smaller_site() -> None:
    state, written = make_state(max_pages=2)
    open_origin(state)
    finish(state, take(state), html("/a"), now=0.0)
    finish(state, take(state), html(), now=0.0)
    assert state.finished
    assert state.limit_reached is None
    assert len(written) == 2


@pytest.mark.parametrize(
    ("max_depth", "fetched", "beyond"),
    [
        (0, [""], 2),  # the root only; its two links are beyond
        (1, ["", "a", "b"], 2),  # /a's two new links are beyond
        (2, ["", "a", "b", "a1", "a2"], 0),
        (None, ["", "a", "b", "a1", "a2"], 0),
    ],
)
def test_max_depth(max_depth: int | None, fetched: list[str], beyond: int) -> None:
    state, written = make_state(max_depth=max_depth)
    open_origin(state)
    site = {ROOT: html("/a", "/b"), ROOT + "a": html("/a1", "/a2")}
    while (request := state.next_request(now=0.0)) is not None:
        assert request.depth == len(request.url.removeprefix(ROOT))  # "" 0, "a" 1, "a1" 2
        finish(state, request, site.get(request.url, html()), now=0.0)
    assert state.finished
    assert [stat.url for stat in written] == [ROOT + path for path in fetched]
    assert state.limit_counts == ({"beyond_max_depth": beyond} if beyond else {})


# -- without robots.txt ------------------------------------------------------------------


def test_obey_robots_false_makes_no_robots_request() -> None:
    state, _ = make_state("http://a.com/", "http://b.com/", obey_robots=False)
    assert [take(state).url, take(state).url] == ["http://a.com/", "http://b.com/"]
    assert state.statistics() == stats(queued=0, in_flight=2, done=0, seen=2)


def test_with_a_delay_the_next_request_waits_for_the_last_one_to_start() -> None:
    """A request handed out waits for an idle worker; the delay runs from its start, so
    the core hands out no other request for that origin until it has started."""
    state, _ = make_state(ROOT, ROOT + "a", obey_robots=False, delay=1.0)
    first = state.next_request(now=10.0)
    assert first is not None
    assert state.next_request(now=20.0) is None  # first has not started: nothing more
    assert state.next_wakeup() is None  # not a matter of time: of a worker starting it
    state.attempt_started(first, now=30.0)
    assert state.next_request(now=30.5) is None
    assert state.next_wakeup() == 31.0
    assert take(state, now=31.0).url == ROOT + "a"


# -- what attempt_finished answers --------------------------------------------------------


def test_attempt_finished_says_which_of_its_outcomes_happened() -> None:
    state, written = make_state(ROOT, "http://slow.example.com/", max_tries=3, delay=1.0)
    robots = take(state)
    assert state.attempt_finished(robots, robots_txt(), now=0.0) == RobotsSettled(ORIGIN)
    slow_robots = take(state)
    assert state.attempt_finished(slow_robots, robots_txt(status=404), now=0.0) == (
        RobotsSettled("http://slow.example.com")
    )
    root = take(state, now=1.0)
    # A host with a delay: the retry goes back to the frontier to wait its turn.
    retry = FetchRequest(url=ROOT, redirects_left=root.redirects_left, attempt=2)
    assert state.attempt_finished(root, REFUSED, now=1.0) == Requeued(retry)
    assert state.statistics() == stats(queued=2, in_flight=0, done=0, seen=2)
    # The other host has waited since 1.0, longer than the retry: it goes first.
    assert take(state, now=2.0).url == "http://slow.example.com/"
    again = take(state, now=2.0)
    assert again == retry
    result = state.attempt_finished(again, html(), now=2.0)
    assert result == Recorded(written[-1])
    assert written[-1].url == ROOT


def test_attempt_finished_retries_at_once_without_a_delay() -> None:
    state, written = make_state(obey_robots=False, max_tries=2)
    root = take(state)
    result = state.attempt_finished(root, REFUSED, now=0.0)
    assert result == Retry(FetchRequest(url=ROOT, redirects_left=10, attempt=2))
    assert state.in_flight == {ROOT}  # the retry is still this worker's
    assert isinstance(result, Retry)
    final = state.attempt_finished(result.request, REFUSED, now=0.0)
    assert final == Recorded(FetchStatistic(url=ROOT, exception=REFUSED.error))
    assert written == [final.record]

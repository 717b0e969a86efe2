"""CrawlState stepped by hand, with no event loop: each step asserts the whole state."""

from __future__ import annotations

import logging

import pytest

from trio_crawler._config import CrawlConfig
from trio_crawler._events import FetchError, FetchRequest, Response, describe_exception
from trio_crawler._state import CrawlCounts, CrawlState
from trio_crawler._stats import FetchStatistic

from support import finish

ROOT = "http://example.com/"


def make_state(*roots: str, **options: object) -> tuple[CrawlState, list[FetchStatistic]]:
    # robots.txt has tests of its own (test_state_manners.py); here it would only add a
    # robots request before each origin's first URL.
    options.setdefault("obey_robots", False)
    written: list[FetchStatistic] = []
    config = CrawlConfig.create(roots or [ROOT], **options)  # type: ignore[arg-type]
    return CrawlState(config, on_record=written.append), written


def html(*hrefs: str, status: int = 200) -> Response:
    body = "".join(f'<a href="{href}">x</a>' for href in hrefs).encode()
    return Response(status=status, content_type="text/html; charset=utf-8", body=body)


def counts(state: CrawlState) -> CrawlCounts:
    return state.statistics()


def take(state: CrawlState) -> FetchRequest:
    request = state.next_request(now=0.0)
    assert request is not None
    return request


def test_roots_are_queued_in_order_without_repeats() -> None:
    state, _ = make_state("b.com", "http://a.com/#x", "http://a.com/", "B.com")
    assert state.config.roots == ("http://b.com/", "http://a.com/")
    assert state.seen_urls == {"http://b.com/", "http://a.com/"}
    assert counts(state) == CrawlCounts(queued=2, in_flight=0, done=0, seen=2, failed=0)
    assert not state.finished
    assert take(state).url == "http://b.com/"
    assert take(state).url == "http://a.com/"


def test_one_page_with_links_then_finished() -> None:
    state, written = make_state(max_redirect=3)
    root = take(state)
    assert root == FetchRequest(url=ROOT, redirects_left=3, attempt=1, depth=0)
    assert counts(state) == CrawlCounts(queued=0, in_flight=1, done=0, seen=1, failed=0)
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
    assert counts(state) == CrawlCounts(queued=2, in_flight=0, done=1, seen=3, failed=0)
    # Links are queued sorted, with the full redirect budget, one hop deeper.
    assert take(state) == FetchRequest(url=ROOT + "a", redirects_left=3, depth=1)
    page_b = take(state)
    assert finish(state, page_b, html("/a", "/b"), now=0.0) is None
    assert state.done[-1].num_urls == 2
    assert state.done[-1].num_new_urls == 0
    assert not state.finished  # /a is still in flight
    page_a = FetchRequest(url=ROOT + "a", redirects_left=3, depth=1)
    assert finish(state, page_a, html(), now=0.0) is None
    assert state.finished
    assert counts(state) == CrawlCounts(queued=0, in_flight=0, done=3, seen=3, failed=0)


def test_finishing_a_url_not_in_flight_is_an_engine_bug() -> None:
    state, _ = make_state()
    with pytest.raises(RuntimeError, match="not in flight"):
        finish(state, FetchRequest(url=ROOT, redirects_left=10), html(), now=0.0)
    request = take(state)
    finish(state, request, html(), now=0.0)
    with pytest.raises(RuntimeError, match="finished it twice"):
        finish(state, request, html(), now=0.0)


def test_redirect_is_recorded_and_its_target_queued_with_one_redirect_fewer() -> None:
    state, _ = make_state(max_redirect=2)
    root = take(state)
    finish(state, root, Response(status=301, location="/next#frag"), now=0.0)
    assert state.done == [FetchStatistic(url=ROOT, next_url=ROOT + "next", status=301)]
    target = take(state)
    assert target == FetchRequest(url=ROOT + "next", redirects_left=1, depth=0)
    finish(state, target, Response(status=308, location="http://www.example.com/x"), now=0.0)
    last = take(state)
    assert last == FetchRequest(url="http://www.example.com/x", redirects_left=0)
    assert state.seen_urls == {ROOT, ROOT + "next", "http://www.example.com/x"}


def test_redirect_limit_reached_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    state, _ = make_state(max_redirect=0)
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
    state, _ = make_state()
    finish(state, take(state), Response(status=307, location=location), now=0.0)
    assert state.done == [FetchStatistic(url=ROOT, next_url=next_url, status=307)]
    assert (state.next_request(now=0.0) is not None) is followed


@pytest.mark.parametrize("location", [None, "", "http://[::1"])
def test_redirect_without_usable_location_is_recorded_like_an_error_status(
    location: str | None,
) -> None:
    state, _ = make_state()
    finish(state, take(state), Response(status=302, location=location, body=b"moved"), now=0.0)
    assert state.done == [FetchStatistic(url=ROOT, status=302, size=5)]
    assert state.finished


def test_network_errors_are_retried_then_recorded(caplog: pytest.LogCaptureFixture) -> None:
    state, written = make_state(max_tries=3)
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
    assert counts(state) == CrawlCounts(queued=0, in_flight=0, done=1, seen=1, failed=1)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        f"try 1 for {ROOT} raised ConnectError: refused",
        f"try 2 for {ROOT} raised ConnectError: refused",
        f"try 3 for {ROOT} raised ConnectError: refused",
        f"{ROOT} failed after 3 tries",
    ]
    assert caplog.records[-1].levelno == logging.WARNING


def test_a_success_on_a_later_try_is_an_ordinary_record() -> None:
    state, _ = make_state(max_tries=4)
    retry = finish(state, take(state), FetchError(error="ReadError", retryable=True), now=0.0)
    assert retry is not None
    assert finish(state, retry, html(), now=0.0) is None
    assert state.done[0].status == 200
    assert state.done[0].exception is None


def test_errors_a_retry_cannot_fix_are_recorded_at_once() -> None:
    state, _ = make_state(max_tries=4)
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
    state, _ = make_state()
    body = b'<a href="/link">x</a>'
    finish(state, take(state), Response(status=200, content_type=content_type, body=body), now=0.0)
    [record] = state.done
    assert (record.content_type, record.encoding, record.size) == (media_type, encoding, len(body))
    assert record.num_urls == record.num_new_urls == (1 if parsed else 0)
    assert (ROOT + "link" in state.seen_urls) is parsed


def test_error_statuses_have_no_type_encoding_or_links() -> None:
    state, _ = make_state()
    finish(state, take(state), html("/a", status=404), now=0.0)
    assert state.done == [FetchStatistic(url=ROOT, status=404, size=state.done[0].size)]
    assert state.done[0].size > 0
    assert state.finished


def test_exclude_and_strictness_apply_to_links() -> None:
    state, _ = make_state(exclude=r"/private", strict=False)
    page = html("/private/x", "/public", "http://sub.example.com/", "http://example.org/")
    finish(state, take(state), page, now=0.0)
    assert state.seen_urls == {ROOT, ROOT + "public", "http://sub.example.com/"}


def test_stop_scheduling_lets_in_flight_urls_finish() -> None:
    state, _ = make_state("a.com", "b.com")
    first = take(state)
    state.stop_scheduling()
    assert state.next_request(now=0.0) is None
    assert not state.finished
    finish(state, first, html("/more"), now=0.0)
    assert state.finished
    assert counts(state).todo == 2  # b.com and a.com/more were never fetched


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

"""Page interpretation as a pure function: a response in, a record and links out."""

from __future__ import annotations

import pytest

import trio_crawler._page as page_module
from trio_crawler._events import FetchError, Response
from trio_crawler._page import read_failure, read_page, redirect_target
from trio_crawler._stats import FetchStatistic
from trio_crawler._urls import Scope

URL = "http://example.com/dir/page.html"
SCOPE = Scope([URL], strict=True, exclude=None)


def html(body: str, *, status: int = 200, content_type: str = "text/html") -> Response:
    return Response(status=status, content_type=content_type, body=body.encode())


def test_a_page_gives_its_record_and_its_in_scope_links_sorted_and_distinct() -> None:
    body = '<a href="b">x</a><a href="a#top">x</a><a href="a">x</a><a href="http://else.org/">x</a>'
    reading = read_page(URL, html(body), scope=SCOPE, max_url_length=2083)
    assert reading.links == ("http://example.com/dir/a", "http://example.com/dir/b")
    assert reading.too_long == 0
    assert reading.record == FetchStatistic(
        url=URL,
        status=200,
        size=len(body),
        content_type="text/html",
        encoding="utf-8",
        num_urls=2,
    )
    assert reading.with_new(1).num_new_urls == 1
    assert reading.with_new(0) is reading.record


def test_links_longer_than_the_limit_are_counted_not_kept() -> None:
    long_href = "/" + "x" * 100
    reading = read_page(
        URL, html(f'<a href="{long_href}">x</a><a href="/s">x</a>'), scope=SCOPE, max_url_length=50
    )
    assert reading.links == ("http://example.com/s",)
    assert reading.too_long == 1


@pytest.mark.parametrize(
    ("status", "content_type"), [(404, "text/html"), (200, "text/css"), (200, "image/png")]
)
def test_only_parsed_pages_of_status_200_have_links(status: int, content_type: str) -> None:
    reading = read_page(
        URL,
        html('<a href="/a">x</a>', status=status, content_type=content_type),
        scope=SCOPE,
        max_url_length=2083,
    )
    assert reading.links == ()
    assert reading.record.num_urls == 0
    assert reading.record.status == status


def test_an_extractor_that_raises_becomes_the_records_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> set[str]:
        raise ValueError("no")

    monkeypatch.setattr(page_module, "extract_links", broken)
    reading = read_page(URL, html('<a href="/a">x</a>'), scope=SCOPE, max_url_length=2083)
    assert reading.record.exception == "ValueError: no"
    assert reading.links == ()


def test_a_failure_after_a_200_keeps_its_type_and_gets_an_encoding() -> None:
    failure = FetchError(
        error="ResponseTooLarge: body exceeds 10 bytes",
        retryable=False,
        status=200,
        content_type="text/html; charset=ISO-8859-1",
    )
    assert read_failure(URL, failure) == FetchStatistic(
        url=URL,
        status=200,
        exception="ResponseTooLarge: body exceeds 10 bytes",
        content_type="text/html",
        encoding="iso-8859-1",
    )
    refused = FetchError(error="ConnectError: refused", retryable=True)
    assert read_failure(URL, refused) == FetchStatistic(url=URL, exception="ConnectError: refused")


@pytest.mark.parametrize(
    ("location", "target"),
    [
        ("../x#frag", "http://example.com/x"),
        ("ftp://files.example.com/a#b", "ftp://files.example.com/a"),
        ("http://[::1", None),
        ("mailto:\ud800@example.com", None),
    ],
)
def test_redirect_targets(location: str, target: str | None) -> None:
    assert redirect_target(location, URL) == target

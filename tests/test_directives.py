"""A page's crawl directives: robots ``<meta>`` tags and ``X-Robots-Tag`` headers.

The extractor hands back the robots ``<meta>`` contents from the parse the links come from;
the page reader decides what they and the headers mean: ``nofollow`` or ``none``, for every
robot or for ours, means the page's links are not followed, unless robots are ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

import trio_crawler._page as page_module
from trio_crawler._events import Response
from trio_crawler._links import extract_links
from trio_crawler._page import read_page
from trio_crawler._stats import FetchStatistic
from trio_crawler._urls import Scope

PAGE = "http://example.com/dir/page.html"
SCOPE = Scope([PAGE], strict=True, exclude=None)
LINKS = '<a href="/a">a</a><a href="/b" rel="nofollow">b</a>'
FOLLOWED = ("http://example.com/a", "http://example.com/b")


@pytest.mark.parametrize(
    ("markup", "contents"),
    [
        pytest.param('<meta name="robots" content="nofollow">', ["nofollow"], id="robots"),
        pytest.param(
            '<meta name="trio-crawler" content="noindex, nofollow">',
            ["noindex, nofollow"],
            id="our-product-token",
        ),
        pytest.param('<META NAME="ROBOTS" CONTENT="NoFollow">', ["NoFollow"], id="upper-case"),
        pytest.param('<meta name=" Trio-Crawler " content="none">', ["none"], id="padded-name"),
        pytest.param('<meta name="googlebot" content="nofollow">', [], id="another-robot"),
        pytest.param('<meta name="description" content="nofollow">', [], id="not-a-robot"),
        pytest.param('<meta name="robots">', [], id="no-content"),
        pytest.param('<meta content="nofollow">', [], id="no-name"),
        pytest.param('<!-- <meta name="robots" content="nofollow"> -->', [], id="comment"),
        pytest.param(
            '<meta name="robots" content="noindex"><body><meta name="robots" content="nofollow">',
            ["noindex", "nofollow"],
            id="several-in-order-body-too",
        ),
    ],
)
def test_the_robots_meta_contents_come_back_from_the_same_parse(
    markup: str, contents: list[str]
) -> None:
    found: list[str] = []
    links = extract_links(
        f'<html><head>{markup}</head><a href="/a">a</a>'.encode(), PAGE, "utf-8", robots_meta=found
    )
    assert found == contents
    assert links == {"http://example.com/a"}  # the extractor reports, it does not decide


def test_without_a_list_no_meta_is_looked_up_and_the_links_are_the_same() -> None:
    body = b'<meta name="robots" content="nofollow"><a href="/a">a</a>'
    assert extract_links(body, PAGE, "utf-8") == {"http://example.com/a"}


def read(
    head: str = "",
    *,
    x_robots_tags: Sequence[str] = (),
    obey_robots: bool = True,
    content_type: str = "text/html",
    status: int = 200,
) -> page_module.PageReading:
    body = f"<html><head>{head}</head><body>{LINKS}</body></html>".encode()
    return read_page(
        PAGE,
        Response(status=status, content_type=content_type, body=body),
        scope=SCOPE,
        max_url_length=2083,
        obey_robots=obey_robots,
        x_robots_tags=x_robots_tags,
    )


META_CASES = [
    # (head markup, links not followed)
    pytest.param("", False, id="no-directive"),
    pytest.param('<meta name="robots" content="nofollow">', True, id="robots-nofollow"),
    pytest.param('<meta name="robots" content="none">', True, id="robots-none"),
    pytest.param('<meta name="robots" content="noindex, nofollow">', True, id="in-a-list"),
    pytest.param('<meta name="robots" content=" NOINDEX ,NoFollow ">', True, id="case-spaces"),
    pytest.param('<META NAME="Robots" CONTENT="NONE">', True, id="upper-case-tag"),
    pytest.param('<meta name="trio-crawler" content="nofollow">', True, id="our-token"),
    pytest.param('<meta name="TRIO-CRAWLER" content="None">', True, id="our-token-case"),
    pytest.param('<meta name="googlebot" content="nofollow">', False, id="another-robot"),
    pytest.param('<meta name="trio-crawler-x" content="nofollow">', False, id="another-name"),
    pytest.param('<meta name="robots" content="noindex">', False, id="noindex-alone"),
    pytest.param('<meta name="robots" content="index, follow">', False, id="follow"),
    pytest.param('<meta name="robots" content="all">', False, id="all"),
    pytest.param('<meta name="robots" content="nofollowing">', False, id="a-longer-word"),
    pytest.param('<meta name="robots" content="noindex nofollow">', False, id="no-comma"),
    pytest.param(
        '<meta name="robots" content="noindex"><meta name="trio-crawler" content="nofollow">',
        True,
        id="second-meta",
    ),
    pytest.param(
        '<meta name="robots" content="follow"><meta name="robots" content="nofollow">',
        True,
        id="the-stricter-wins",
    ),
    pytest.param('<meta name="description" content="none">', False, id="not-a-directive"),
]


@pytest.mark.parametrize(("head", "nofollow"), META_CASES)
def test_robots_meta_tags(head: str, nofollow: bool) -> None:
    reading = read(head)
    assert reading.nofollow is nofollow
    assert reading.links == (() if nofollow else FOLLOWED)
    assert reading.record.num_urls == len(reading.links)


HEADER_CASES = [
    # (X-Robots-Tag header values, one per header line; links not followed)
    pytest.param([], False, id="none-sent"),
    pytest.param(["nofollow"], True, id="nofollow"),
    pytest.param(["none"], True, id="none"),
    pytest.param(["NoFollow"], True, id="case"),
    pytest.param(["noindex, nofollow"], True, id="in-a-list"),
    pytest.param(["noindex"], False, id="noindex-alone"),
    pytest.param(["noarchive", "nofollow"], True, id="second-header"),
    pytest.param(["noarchive", "noindex"], False, id="several-without"),
    pytest.param(["trio-crawler: nofollow"], True, id="our-token"),
    pytest.param(["Trio-Crawler: NONE"], True, id="our-token-case"),
    pytest.param(["trio-crawler/0.2: nofollow"], True, id="our-user-agent"),
    pytest.param(["trio-crawler: noindex, nofollow"], True, id="ours-for-the-list"),
    pytest.param(["googlebot: nofollow"], False, id="another-robot"),
    pytest.param(["googlebot: noindex, nofollow"], False, id="theirs-for-the-list"),
    pytest.param(["googlebot: nofollow", "noindex"], False, id="a-line-for-them"),
    pytest.param(["googlebot: noindex", "nofollow"], True, id="a-line-for-all"),
    pytest.param(["nofollow, googlebot: noindex"], True, id="all-then-them"),
    pytest.param(["googlebot: nofollow, trio-crawler: noindex"], False, id="them-then-us"),
    pytest.param(["googlebot: noindex, trio-crawler: nofollow"], True, id="us-after-them"),
    pytest.param(["otherbot: noindex, nofollow", "googlebot: nofollow"], False, id="google-doc"),
    pytest.param(["unavailable_after: 25 Jun 2010 15:00:00 PST, nofollow"], True, id="date"),
    pytest.param(
        ["unavailable_after: Saturday, 01-Jul-00 07:00:00 PST, nofollow"],
        True,
        id="date-with-comma",
    ),
    pytest.param(["max-snippet: 20, max-image-preview: large"], False, id="rule-values"),
    pytest.param(["max-snippet: 20, none"], True, id="rule-value-then-none"),
    pytest.param(["nofollowing"], False, id="a-longer-word"),
    pytest.param([""], False, id="empty"),
]


@pytest.mark.parametrize(("values", "nofollow"), HEADER_CASES)
def test_x_robots_tag_headers(values: list[str], nofollow: bool) -> None:
    reading = read(x_robots_tags=values)
    assert reading.nofollow is nofollow
    assert reading.links == (() if nofollow else FOLLOWED)


@pytest.mark.parametrize(
    ("head", "values"),
    [
        ('<meta name="robots" content="nofollow">', []),
        ('<meta name="trio-crawler" content="none">', []),
        ("", ["nofollow"]),
        ("", ["trio-crawler: none"]),
    ],
)
def test_ignoring_robots_ignores_the_directives(head: str, values: list[str]) -> None:
    reading = read(head, x_robots_tags=values, obey_robots=False)
    assert reading.nofollow is False
    assert reading.links == FOLLOWED


def test_rel_nofollow_on_a_link_is_not_a_crawl_directive() -> None:
    reading = read()
    assert "http://example.com/b" in reading.links  # LINKS marks it rel="nofollow"


def test_a_nofollow_pages_record_counts_no_links(caplog: pytest.LogCaptureFixture) -> None:
    long_link = '<a href="/' + "x" * 100 + '">long</a>'
    body = f'<meta name="robots" content="nofollow">{LINKS}{long_link}'
    with caplog.at_level(logging.INFO, logger="trio_crawler"):
        reading = read_page(
            PAGE,
            Response(status=200, content_type="text/html; charset=utf-8", body=body.encode()),
            scope=SCOPE,
            max_url_length=50,
        )
    assert reading.nofollow
    assert reading.links == ()
    assert reading.too_long == 0  # none were followed, so none were too long to follow
    assert reading.record == FetchStatistic(
        url=PAGE,
        status=200,
        size=len(body),
        content_type="text/html",
        encoding="utf-8",
        num_urls=0,
    )
    assert reading.with_new(0).num_new_urls == 0
    assert f"not following the links on {PAGE}" in caplog.text


def test_a_header_that_says_nofollow_spares_the_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_parse(*args: object, **kwargs: object) -> set[str]:
        raise AssertionError("the page was parsed")

    monkeypatch.setattr(page_module, "extract_links", no_parse)
    reading = read(x_robots_tags=["nofollow"])
    assert reading.nofollow
    assert reading.record.exception is None


@pytest.mark.parametrize(
    ("status", "content_type"), [(404, "text/html"), (200, "image/png"), (200, "text/css")]
)
def test_only_a_page_read_for_links_is_a_nofollow_page(status: int, content_type: str) -> None:
    reading = read(x_robots_tags=["nofollow"], status=status, content_type=content_type)
    assert reading.nofollow is False
    assert reading.links == ()

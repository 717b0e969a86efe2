"""A page's crawl directives: robots ``<meta>`` tags and ``X-Robots-Tag`` headers.

The extractor hands back the robots ``<meta>`` contents from the parse the links come from;
what they mean is the page reader's to decide.
"""

from __future__ import annotations

import pytest

from trio_crawler._links import extract_links

PAGE = "http://example.com/dir/page.html"


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

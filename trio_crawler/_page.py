"""Page interpretation: what one response means, as a record and the links it offers.

A pure function of the response and the crawl's scope, with no memory of the crawl: it
does not know which links are new (the frontier does) or whether the next hop is too deep
(the core does). Keeping it apart lets the core's decision code stay short, and lets a
frontier that lives in a database or a Redis server be told "these links" in one call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import urldefrag, urljoin, urlsplit

from ._events import describe_exception
from ._links import PARSED_MEDIA_TYPES, choose_encoding, extract_links, parse_content_type
from ._sitemaps import read_sitemap
from ._stats import FetchStatistic
from ._urls import normalize_url

if TYPE_CHECKING:
    from ._events import FetchError, Response
    from ._urls import Scope

LOGGER = logging.getLogger("trio_crawler")


@dataclass(frozen=True, slots=True, kw_only=True)
class PageReading:
    """A response read: its record, and the links it offers the crawl.

    Attributes:
        record: The URL's record, with ``num_new_urls`` still 0: only the frontier knows
            which links are new (:meth:`with_new`).
        links: The distinct in-scope links, sorted, so that a crawl visits pages in the
            same order on every run (sets of str iterate in a hash order that changes per
            process).
        too_long: Links skipped for being longer than ``--max-url-length``.
    """

    record: FetchStatistic
    links: tuple[str, ...] = ()
    too_long: int = 0

    def with_new(self, count: int) -> FetchStatistic:
        """The record, with ``count`` of its links new to the crawl."""
        return replace(self.record, num_new_urls=count) if count else self.record


def read_page(url: str, response: Response, *, scope: Scope, max_url_length: int) -> PageReading:
    """Read a response that is not a redirect into a record and its in-scope links.

    Only status 200 pages of the parsed media types have links. A page the link extractor
    breaks on (it promises never to raise) gets a record saying so, and the crawl goes on.
    """
    if response.status != 200:
        return PageReading(
            record=FetchStatistic(url=url, status=response.status, size=len(response.body))
        )
    media_type, charset = parse_content_type(response.content_type)
    parsed = media_type in PARSED_MEDIA_TYPES
    encoding = choose_encoding(response.body if parsed else b"", charset)
    links: set[str] = set()
    exception = None
    if parsed:
        try:
            links = extract_links(response.body, url, encoding, normalized=True)
        except Exception as exc:
            LOGGER.exception("could not extract links from %s", url)
            exception = describe_exception(exc)
    too_long = 0
    in_scope = []
    for link in links:
        if len(link) > max_url_length:
            too_long += 1
        elif scope.allows(link):
            in_scope.append(link)
    if too_long:
        LOGGER.debug("skipped %d links longer than %d on %s", too_long, max_url_length, url)
    if in_scope:
        LOGGER.debug("got %d distinct urls from %s", len(in_scope), url)
        in_scope.sort()
    record = FetchStatistic(
        url=url,
        status=response.status,
        exception=exception,
        size=len(response.body),
        content_type=media_type,
        encoding=encoding,
        num_urls=len(in_scope),
    )
    return PageReading(record=record, links=tuple(in_scope), too_long=too_long)


@dataclass(frozen=True, slots=True, kw_only=True)
class SitemapReading:
    """A sitemap read: its record, and the pages and sitemaps it lists, in scope.

    Attributes:
        record: The sitemap's record, ``num_urls`` counting both kinds of ``<loc>`` and
            ``num_new_urls`` still 0 (see :meth:`PageReading.with_new`).
        pages: The in-scope page URLs it lists, in its order, without repeats.
        sitemaps: The in-scope sitemap URLs an index lists, likewise.
        too_long: ``<loc>`` entries skipped for being longer than ``--max-url-length``.
    """

    record: FetchStatistic
    pages: tuple[str, ...] = ()
    sitemaps: tuple[str, ...] = ()
    too_long: int = 0

    def with_new(self, count: int) -> FetchStatistic:
        """The record, with ``count`` of its URLs new to the crawl."""
        return replace(self.record, num_new_urls=count) if count else self.record


def read_sitemap_response(
    url: str, response: Response, *, scope: Scope, max_url_length: int, max_size: int
) -> SitemapReading:
    """Read a sitemap's response into its record and the URLs it lists.

    A status other than 200 is a record like any page's. A 200 is read as a sitemap
    whatever its Content-Type (gzip by its first bytes, XML, or text); what could not be
    read (a DTD, broken XML, a gzip bomb cut at the limit) is the record's ``exception``,
    and the entries read before it are kept.
    """
    if response.status != 200:
        return SitemapReading(
            record=read_page(url, response, scope=scope, max_url_length=max_url_length).record
        )
    content = read_sitemap(response.body, max_size=max_size)
    pages, pages_too_long = _locs_in_scope(content.pages, scope, max_url_length)
    sitemaps, sitemaps_too_long = _locs_in_scope(content.sitemaps, scope, max_url_length)
    too_long = pages_too_long + sitemaps_too_long
    media_type, charset = parse_content_type(response.content_type)
    record = FetchStatistic(
        url=url,
        status=200,
        exception=content.problem,
        size=len(response.body),
        content_type=media_type,
        encoding=choose_encoding(b"", charset),
        num_urls=len(pages) + len(sitemaps),
    )
    if content.problem is not None:
        LOGGER.info("sitemap %s: %s", url, content.problem)
    return SitemapReading(record=record, pages=pages, sitemaps=sitemaps, too_long=too_long)


def _locs_in_scope(
    locs: tuple[str, ...], scope: Scope, max_url_length: int
) -> tuple[tuple[str, ...], int]:
    """The ``<loc>`` URLs, in scope and without repeats; and how many were too long.

    The protocol's URLs are absolute, and only absolute ones are taken: a relative one,
    resolved, would make a URL of any line of junk in a text sitemap.
    """
    kept: dict[str, None] = {}  # a dict keeps the sitemap's order
    too_long = 0
    for loc in locs:
        link = normalize_url(loc)
        if link is None:
            continue
        if len(link) > max_url_length:
            too_long += 1
        elif scope.allows(link):
            kept[link] = None
    return tuple(kept), too_long


def read_failure(url: str, failure: FetchError) -> FetchStatistic:
    """The record of a URL whose last attempt failed.

    Every status-200 record has a type and an encoding. A failure after a 200 (a body too
    large, undecodable) has no body read, so its encoding is the one a page of a type we
    do not parse gets: the Content-Type charset, else UTF-8.
    """
    media_type: str | None = None
    encoding: str | None = None
    if failure.status == 200:
        media_type, charset = parse_content_type(failure.content_type)
        encoding = choose_encoding(b"", charset)
    return FetchStatistic(
        url=url,
        status=failure.status,
        exception=failure.error,
        content_type=media_type,
        encoding=encoding,
    )


def redirect_target(location: str, base: str) -> str | None:
    """The absolute, fragment-free target of a Location header, or None if it has none.

    http(s) targets are normalised like every other URL; a target with another scheme is
    kept as written (made absolute) so the record shows where the server pointed.
    """
    target = normalize_url(location, base)
    if target is not None:
        return target
    try:
        other = urldefrag(urljoin(base, location.strip())).url
        scheme = urlsplit(other).scheme
    except ValueError:
        return None
    if not scheme or scheme in ("http", "https"):
        # An http(s) URL that failed to normalise has a bad host or port: no usable target.
        return None
    try:
        other.encode("utf-8")
    except UnicodeEncodeError:
        return None  # lone surrogates: no JSON Lines writer could write this next_url
    return other

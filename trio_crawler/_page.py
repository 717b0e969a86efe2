"""Page interpretation: what one response means, as a record and the links it offers.

A pure function of the response and the crawl's scope, with no memory of the crawl: it
does not know which links are new (the frontier does) or whether the next hop is too deep
(the core does). Keeping it apart lets the core's decision code stay short, and lets a
frontier that lives in a database or a Redis server be told "these links" in one call.

A page may ask crawlers not to follow its links: ``<meta name="robots" content="nofollow">``
(``none`` means the same, plus ``noindex``), the same under our own name
(``<meta name="trio-crawler">``), or an ``X-Robots-Tag: nofollow`` response header. Such a
page's reading has no links and says ``nofollow``; its record counts none. Only ``nofollow``
and ``none`` matter to a crawler that keeps no index: ``noindex`` alone still lets the links
be followed. ``rel="nofollow"`` on one link is a hint about that link's endorsement, not a
crawl directive, and is followed. The header is read first, so a page it rules out is not
even parsed; the ``<meta>`` tags come from the parse the links come from.

The header's grammar is Google's ("Robots meta tag, data-nosnippet, and X-Robots-Tag
specifications"; MDN's X-Robots-Tag page says the same): each header line is a
comma-separated list of rules, and a rule written ``bot: rule`` names the robot that it and
the rules after it on that line are for; rules before any such name are for every robot.
Some rules carry a value after a colon themselves (``unavailable_after: 25 Jun 2010
15:00:00 PST``, ``max-snippet: 20``), so those names are not taken for robots'. A robot's
name is ours when it is our product token, compared as robots.txt compares them
(case-insensitively, cut at the first character that is not a letter, ``-`` or ``_``, so
``trio-crawler/0.2`` is ours too).

A crawl with a page handler asks for more (``for_handler``): the parse the links came from,
the URL they resolve against and the in-scope links in page order, for the handler's
:class:`~trio_crawler._handler.Page`. A page that a header rules out is not parsed here then
either: the handler parses it if it asks for the tree.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import urldefrag, urljoin, urlsplit

from ._events import describe_exception
from ._frontier import Completion, Offer
from ._links import (
    PARSED_MEDIA_TYPES,
    ParsedDocument,
    choose_encoding,
    extract_links,
    parse_content_type,
)
from ._robots import PRODUCT_TOKEN
from ._sitemaps import MAX_SITEMAP_LEVELS, read_sitemap
from ._stats import FetchStatistic, Stamp
from ._urls import normalize_url

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from collections.abc import Set as AbstractSet

    from ._config import CrawlConfig
    from ._events import FetchError, FetchRequest, Response
    from ._urls import Scope

LOGGER = logging.getLogger("trio_crawler")

# The rules that stop a crawler following a page's links: "nofollow", and "none", which is
# "noindex, nofollow" (Google's robots meta tag reference; rules are case-insensitive).
_NOFOLLOW_RULES = frozenset({"nofollow", "none"})
# Google's rules that carry a value after a colon: "max-snippet: 20" is a rule, not a rule
# "20" for a robot named "max-snippet".
_RULES_WITH_VALUES = frozenset(
    {"max-snippet", "max-image-preview", "max-video-preview", "unavailable_after"}
)
# What may stand before a colon as a robot's name: one word (a date's "07:00" has a space
# or a comma before it, so it never does).
_ROBOT_NAME = re.compile(r"[^\s:,]+")
# A product token (RFC 9309 2.2.1), as _robots_parser reads robots.txt group lines.
_PRODUCT_TOKEN_PREFIX = re.compile(r"[A-Za-z_-]*")


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
        nofollow: The page asked not to have its links followed (a robots ``<meta>`` or an
            ``X-Robots-Tag`` header), and was obeyed: it has no links, and none are too long.
        parsed: For a page handler (``read_page(for_handler=True)``), a page read for links:
            the parse, the base, and :attr:`links` in page order; None otherwise.
    """

    record: FetchStatistic
    links: tuple[str, ...] = ()
    too_long: int = 0
    nofollow: bool = False
    parsed: ParsedDocument | None = None

    def with_new(self, count: int) -> FetchStatistic:
        """The record, with ``count`` of its links new to the crawl."""
        return replace(self.record, num_new_urls=count) if count else self.record


def read_page(
    url: str,
    response: Response,
    *,
    scope: Scope,
    max_url_length: int,
    obey_robots: bool = True,
    x_robots_tags: Sequence[str] = (),
    for_handler: bool = False,
) -> PageReading:
    """Read a response that is not a redirect into a record and its in-scope links.

    Only status 200 pages of the parsed media types have links, and of those only the ones
    that do not ask to have their links left alone (see the module docstring). A page the
    link extractor breaks on (it promises never to raise) gets a record saying so, and the
    crawl goes on.

    Args:
        url: The URL the response answers.
        response: The response, not a redirect.
        scope: Which links the crawl may follow.
        max_url_length: Links longer than this are counted (``too_long``), not kept.
        obey_robots: Heed the page's robots directives; False for ``--ignore-robots``.
        x_robots_tags: The response's ``X-Robots-Tag`` header values, one per header line.
        for_handler: Keep what a page handler is given (:attr:`PageReading.parsed`).
    """
    if response.status != 200:
        return PageReading(
            record=FetchStatistic(url=url, status=response.status, size=len(response.body))
        )
    media_type, charset = parse_content_type(response.content_type)
    parsed = media_type in PARSED_MEDIA_TYPES
    encoding = choose_encoding(response.body if parsed else b"", charset)
    links: AbstractSet[str] = set()
    exception = None
    nofollow = False
    document = ParsedDocument() if parsed and for_handler else None
    if document is not None:
        document.base = url
    if parsed:
        if obey_robots and _header_says_nofollow(x_robots_tags):
            nofollow = True  # decided before the parse, which it spares
        else:
            robots_meta: list[str] | None = [] if obey_robots else None
            try:
                links = extract_links(
                    response.body,
                    url,
                    encoding,
                    normalized=True,
                    robots_meta=robots_meta,
                    parsed=document,
                )
            except Exception as exc:
                LOGGER.exception("could not extract links from %s", url)
                exception = describe_exception(exc)
            if robots_meta and _meta_says_nofollow(robots_meta):
                nofollow, links = True, set()
        if nofollow:
            LOGGER.info("not following the links on %s: the page says nofollow", url)
    too_long = 0
    in_scope = []
    for link in links:
        if len(link) > max_url_length:
            too_long += 1
        elif scope.allows(link):
            in_scope.append(link)
    if too_long:
        LOGGER.debug("skipped %d links longer than %d on %s", too_long, max_url_length, url)
    if document is not None:  # the handler's links: extract_links kept them in page order
        document.links = tuple(in_scope)
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
    return PageReading(
        record=record,
        links=tuple(in_scope),
        too_long=too_long,
        nofollow=nofollow,
        parsed=document,
    )


def page_completion(
    request: FetchRequest,
    reading: PageReading,
    response: Response,
    config: CrawlConfig,
    stamp: Stamp | None = None,
    items: tuple[str, ...] = (),
) -> Completion:
    """A page done, as one change to the frontier: its record, the links it offers one
    hop deeper (only counted beyond ``--max-depth``), what a recrawl keeps of it, and the
    items its handler made (JSON lines)."""
    depth = request.depth + 1
    offers: tuple[Offer, ...] = ()
    if reading.links:
        # Links beyond --max-depth are only counted (the new ones), not queued.
        beyond = config.max_depth is not None and depth > config.max_depth
        offers = (
            Offer(
                reading.links,
                depth=depth,
                redirects_left=config.max_redirect,
                queue=not beyond,
                referrer=request.url,
            ),
        )
    # What a recrawl needs of a page it may find unchanged.
    stored_links = reading.links if reading.record.status in (200, 304) else None
    return Completion(
        request,
        True,
        reading.record,
        offers,
        links=stored_links,
        etag=response.etag,
        last_modified=response.last_modified,
        items=items,
        stamp=stamp,
    )


def _meta_says_nofollow(contents: Iterable[str]) -> bool:
    """Whether any robots ``<meta>`` content (a comma-separated list of rules) says so."""
    return any(
        rule.strip().lower() in _NOFOLLOW_RULES
        for content in contents
        for rule in content.split(",")
    )


def _header_says_nofollow(values: Iterable[str]) -> bool:
    """Whether any ``X-Robots-Tag`` header value says nofollow to every robot, or to us."""
    for value in values:
        for_us = True  # until a robot's name says otherwise
        for item in value.split(","):
            rule = item
            name, colon, rest = item.partition(":")
            name = name.strip()
            if colon and name.lower() not in _RULES_WITH_VALUES and _ROBOT_NAME.fullmatch(name):
                for_us = _is_our_name(name)
                rule = rest
            if for_us and rule.strip().lower() in _NOFOLLOW_RULES:
                return True
    return False


def _is_our_name(name: str) -> bool:
    """Whether a robot's name in a directive is our product token."""
    match = _PRODUCT_TOKEN_PREFIX.match(name)
    return match is not None and match.group().lower() == PRODUCT_TOKEN


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
    sitemaps, sitemaps_too_long = _locs_in_scope(
        content.sitemaps, scope, max_url_length, as_page=False
    )
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
    locs: tuple[str, ...], scope: Scope, max_url_length: int, *, as_page: bool = True
) -> tuple[tuple[str, ...], int]:
    """The ``<loc>`` URLs, in scope (as pages, or ``as_page`` false as sitemaps: see
    :meth:`~trio_crawler._urls.Scope.allows`) and without repeats; and how many were too
    long.

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
        elif scope.allows(link, as_page=as_page):
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


def root_sitemaps(
    origin: str,
    named: tuple[str, ...],
    *,
    robots: str | None,
    scope: Scope,
    max_url_length: int,
    max_redirect: int,
) -> tuple[Offer, int]:
    """What a root origin offers as its sitemaps, to be queued first in its line: those
    its robots.txt (at ``robots``, their referrer) ``named``, or ``/sitemap.xml`` when it
    names none (with no referrer: found as a root is); and how many were longer than
    ``max_url_length``. Each must be in scope as a sitemap (``--include`` and
    ``--no-parent`` choose among pages, not sitemaps) and no longer than that."""
    base = origin + "/"
    urls = [normalize_url(url, base) for url in named] or [origin + "/sitemap.xml"]
    sitemaps = []
    too_long = 0
    for url in urls:
        if url is None or not scope.allows(url, as_page=False):
            continue
        if len(url) > max_url_length:
            too_long += 1
        else:
            sitemaps.append(url)
    LOGGER.debug("sitemaps of %s: %s", origin, sitemaps)
    offer = Offer(
        tuple(sitemaps),
        depth=0,
        redirects_left=max_redirect,
        sitemap=1,
        first=True,
        referrer=robots if named else None,
    )
    return offer, too_long


def sitemap_offers(
    url: str,
    reading: SitemapReading,
    *,
    level: int,
    max_redirect: int,
    max_depth: int | None,
) -> tuple[Offer, ...]:
    """What a sitemap of ``level`` offers the frontier: the sitemaps an index names, read
    in turn up to MAX_SITEMAP_LEVELS deep (deeper ones only counted), and its pages, one
    hop from the root as a link on it would be (queued unless ``max_depth`` is 0); the
    sitemap ``url`` is the referrer of each."""
    offers = []
    if reading.sitemaps:
        nested = level < MAX_SITEMAP_LEVELS
        if not nested:
            LOGGER.info("%s: sitemap indexes nested deeper than %d", url, level)
        offers.append(
            Offer(
                reading.sitemaps,
                depth=0,
                redirects_left=max_redirect,
                sitemap=level + 1,
                queue=nested,
                over_depth=False,
                referrer=url,
            )
        )
    if reading.pages:
        offers.append(
            Offer(
                reading.pages,
                depth=1,
                redirects_left=max_redirect,
                queue=max_depth is None or max_depth >= 1,
                referrer=url,
            )
        )
    return tuple(offers)


def redirect_completion(
    request: FetchRequest, response: Response, config: CrawlConfig, stamp: Stamp | None
) -> tuple[Completion, bool] | None:
    """A redirect done: its record, and its target offered one redirect fewer, at the
    source's depth, unless out of scope, over ``--max-url-length`` (the flag says so) or
    out of redirects (logged). None when its ``Location`` is unusable: no redirect at all,
    as the chapter records a 3xx without one."""
    assert response.location is not None
    target = redirect_target(response.location, request.url)
    if target is None:
        LOGGER.info("unusable Location %r from %s", response.location, request.url)
        return None
    record = FetchStatistic(url=request.url, next_url=target, status=response.status)
    offers: tuple[Offer, ...] = ()
    too_long = False
    if not config.scope.allows(target, as_page=not request.sitemap):
        LOGGER.info("redirect to %s from %s is out of scope", target, request.url)
    elif len(target) > config.max_url_length:
        too_long = True
        LOGGER.info("redirect to a URL longer than --max-url-length from %s", request.url)
    elif request.redirects_left > 0:
        # Queued unless already seen: the frontier alone knows, and says so.
        LOGGER.info("redirect to %s from %s", target, request.url)
        offer = Offer(
            (target,),
            redirects_left=request.redirects_left - 1,
            depth=request.depth,
            sitemap=request.sitemap,
            referrer=request.url,
        )
        offers = (offer,)
    else:
        LOGGER.warning("redirect limit reached for %s from %s", target, request.url)
    return Completion(request, True, record, offers, False, stamp=stamp), too_long

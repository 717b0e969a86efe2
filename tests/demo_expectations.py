"""What a correct crawl of the demo site records, worked out from the site's data.

The demo site (``trio_crawler._demo``) ships in the package because ``--demo`` serves it;
what a crawl of it *should* find is the tests' business, so it lives here. The media types
and redirect statuses below are the crawler's documented behaviour (docs/usage.md, "Where
this departs from the chapter, on purpose"), written out rather than imported from the
core: a change to the core's constants then shows up as a failing test instead of moving
the expectation with it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from trio_crawler._demo import NOT_FOUND, DemoPage, DemoSite

# Media types the crawler parses for links.
PARSED_TYPES = frozenset({"text/html", "application/xhtml+xml", "application/xml", "text/xml"})
# Statuses the crawler treats as redirects when a Location comes with them (308 included).
REDIRECT_STATUSES = frozenset({300, 301, 302, 303, 307, 308})


def media_type(page: DemoPage) -> str | None:
    """The Content-Type without parameters, lower-cased, or None."""
    content_type = page.header("content-type")
    if content_type is None:
        return None
    return content_type.split(";", 1)[0].strip().lower()


def is_redirect(page: DemoPage) -> bool:
    """Whether the crawler treats this as a redirect: a 3xx status with a Location."""
    return page.status in REDIRECT_STATUSES and page.header("location") is not None


def linked_pages(site: DemoSite) -> dict[str, DemoPage]:
    """The site's pages but those only ``--sitemaps`` reaches."""
    return {path: page for path, page in site.pages.items() if path not in site.sitemap_paths}


def html_paths(site: DemoSite) -> frozenset[str]:
    """Paths of 200 responses the crawler parses for links (HTML and XHTML)."""
    return frozenset(
        path
        for path, page in linked_pages(site).items()
        if page.status == 200 and media_type(page) in PARSED_TYPES and not page.is_truncated
    )


def file_paths(site: DemoSite) -> frozenset[str]:
    """Paths of 200 responses recorded but not parsed (CSV, text, PNG, CSS)."""
    return frozenset(
        path
        for path, page in linked_pages(site).items()
        if page.status == 200 and media_type(page) not in PARSED_TYPES
    )


def redirect_paths(site: DemoSite) -> frozenset[str]:
    """Paths answering a 3xx with a Location, in scope or not."""
    return frozenset(path for path, page in site.pages.items() if is_redirect(page))


def error_paths(site: DemoSite) -> frozenset[str]:
    """Paths recorded with an error status: the 404s and the 3xx without a Location."""
    listed = (
        path
        for path, page in site.pages.items()
        if page.status >= 300 and not is_redirect(page) and not page.is_truncated
    )
    return frozenset(listed) | site.missing_paths


def failing_paths(site: DemoSite) -> frozenset[str]:
    """Paths whose every fetch fails with a network error (status null in the record)."""
    return frozenset(path for path, page in site.pages.items() if page.is_truncated)


def expected_statuses(
    site: DemoSite, root: str, *, sitemaps: bool = False
) -> dict[str, int | None]:
    """Every URL a correct crawl of ``root`` records, mapped to its record's ``status``
    (None for a failure), spelt as the crawler spells URLs.

    Only the root's scheme and authority are used. The URLs are every page of the site
    (parsed pages, redirects, redirect targets, files, the failing page) and every missing
    path; off-site redirect targets are not included (they are recorded as ``next_url``).
    The sitemap and the pages only it lists are included with ``sitemaps``.
    """
    parts = urlsplit(root)
    origin = f"{parts.scheme}://{parts.netloc}"
    pages = site.pages if sitemaps else linked_pages(site)
    statuses: dict[str, int | None] = {
        origin + path: None if page.is_truncated else page.status for path, page in pages.items()
    }
    statuses.update((origin + path, NOT_FOUND.status) for path in site.missing_paths)
    return statuses


def expected_urls(site: DemoSite, root: str, *, sitemaps: bool = False) -> set[str]:
    """The URLs of :func:`expected_statuses`."""
    return set(expected_statuses(site, root, sitemaps=sitemaps))

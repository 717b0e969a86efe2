"""The bundled demo site: a few hundred pages that show every kind of record the crawler makes.

``trio-crawler --demo`` needs a site that works offline, on a fresh machine, and gives the same
report every run. So the site is generated in memory from a seed (:func:`build_demo_site`),
served by Hypercorn from a plain ASGI callable (:func:`demo_app`) on 127.0.0.1, and stopped
when the caller's scope is cancelled (:func:`serve_demo`). Nothing is read from disk and
nothing leaves the machine.

Layout (paths, and the crawler behaviour each one shows)::

    /                                   home: links to the six sections, /features/, /archive
    /<section>/                         6 sections (coroutines, nurseries, ...), id="intro"
    /<section>/topic-<n>/               8 topics per section (relative links to their pages)
    /<section>/topic-<n>/page-<k>.html  5 pages per topic; "see also" cross links, "#top",
                                        "#details" fragments, ../ and ./ relative links
    /archive?page=1..3                  pages told apart by query; "?page=2" is a query-only link
    /features/                          one link to each feature below, plus ones never fetched:
                                        http://example.com/, https://www.python.org/ (out of
                                        scope), mailto:, javascript:, ftp: (other schemes)
    /redirect/start -> step-2 -> step-3 -> step-4 -> step-5 -> /redirect/landing.html
                                        a five-hop chain: 301, 302, 303, 307, 308, with
                                        path-relative, dot-segment and fragment Locations
    /foo, /bar -> /baz                  two redirects to one target: /baz is fetched once
    /redirect/offsite -> https://www.python.org/
                                        a redirect out of scope: recorded, not followed
    /redirect/nowhere                   302 without Location: a record like a 404
    /missing.html                       linked but absent: 404 with a small text/html body
    /broken/truncated.html              declares 4096 bytes, sends 512, drops the connection:
                                        a network error on every try, so a failure record
    /files/data.csv, /files/readme.txt, /files/logo.png, /static/style.css
                                        non-HTML (text/csv, text/plain, image/png, text/css):
                                        recorded, never parsed (readme.txt holds an <a href>)
    /intl/latin1.html                   iso-8859-1 from the Content-Type header; links to
    /intl/café.html                     (written in Latin-1 bytes, fetched as /intl/caf%C3%A9.html)
    /intl/cyrillic.html                 charset only from <meta charset="windows-1251">; links to
    /intl/привет.html                   (written in cp1251 bytes, fetched percent-encoded UTF-8)
    /links/base.html                    <base href="/links/target/">: its <a>, <area> and <link>
    /links/target/{one,map,next}.html   hrefs resolve there; ignoring <base> gives 404s instead
    /links/tricky.html                  hrefs read by the WHATWG URL Standard (dot segments,
    /links/tricky-targets/*.html        %2e%2e, backslashes, a tab, "http:" without "//"),
                                        each leading to a page only a browser's reading finds
    /compressed.html                    served with Content-Encoding: gzip
    /xhtml/page.xhtml -> /xhtml/child.html
                                        application/xhtml+xml is parsed for links too
    /robots.txt                         404 for now: everything is allowed
    /sitemap.xml                        the default sitemap (robots.txt names none): three
                                        linked pages and two that no link reaches,
    /sitemap-only/{archive-index,changelog}.html
                                        which only --sitemaps finds

Pages reached only through a feature (the redirect landing page, café, привет, the <base>
targets, the XHTML child) are the proof: a crawler that mishandles the feature never finds them.
A correct crawl of ``/`` makes 333 records (the tests work them out from the site's data;
with ``--sitemaps``, 336):
318 parsed pages (317 HTML, 1 XHTML), 8 redirects, 2 error statuses (the 404 and the 302
without Location), 4 other files and 1 failure.

Serving: :func:`serve_demo` binds the listening socket itself, so it knows the real port before
Hypercorn starts (no race), and hands the socket over as ``fd://N``. Hypercorn's
``Config.create_sockets`` wraps that descriptor in a new ``socket.socket(fileno=N)`` which it
closes when serving ends (Trio's ``SocketListener.aclose``, asyncio's ``Server.close``); so this
module ``detach()``es its own object first, or the descriptor would have two owners, be closed
twice and warn.

Stopping: cancelling the caller asks Hypercorn to shut down through its ``shutdown_trigger``,
and Hypercorn runs in a shielded scope meanwhile, rather than being cancelled. Its asyncio
flavour cannot take a cancel: its ``finally`` block awaits (closing the server, gathering the
connection tasks, the lifespan shutdown), AnyIO's level cancellation interrupts each of those
awaits, and it ends in ``InvalidStateError`` plus "exception was never retrieved" errors. Its
Trio flavour copes with a cancel, but one path for both keeps them alike. The trigger matters
for another reason: without one, the asyncio flavour installs its own SIGINT and SIGTERM
handlers, which would take Ctrl-C away from the CLI.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import logging
import random
import socket
import struct
import types
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

import anyio
import sniffio
from hypercorn.config import Config

if TYPE_CHECKING:
    from anyio.abc import TaskStatus
    from hypercorn.typing import (
        ASGIFramework,
        ASGIReceiveCallable,
        ASGISendCallable,
        HTTPScope,
        Scope,
    )

logger = logging.getLogger(__name__)

# The site's shape: 6 sections x 8 topics x 5 pages gives 294 tree pages, which with the feature
# pages makes "a few hundred": enough that max_tasks matters, small enough to crawl in a second.
_SECTIONS = (
    ("coroutines", "Coroutines"),
    ("nurseries", "Nurseries"),
    ("cancellation", "Cancellation"),
    ("channels", "Channels"),
    ("sockets", "Sockets"),
    ("protocols", "Protocols"),
)
_TOPICS_PER_SECTION = 8
_PAGES_PER_TOPIC = 5
_ARCHIVE_PAGES = 3
# Page bodies land between 1 KB and 10 KB, the size of a small real page: big enough that
# html_bytes in the report means something, small enough that the demo stays quick.
_MIN_PAGE_BYTES = 1200
_MAX_FILLER_BYTES = 7000

_UTF8_HTML = "text/html; charset=utf-8"
# Characters left alone when a request path is re-encoded for lookup: RFC 3986's reserved
# and unreserved characters, and "%". The crawler's URL normalisation uses the same set,
# but the site keeps its own copy on purpose: it is a server, and must answer the same
# way whatever the crawler does, so that a change in the crawler's spelling of URLs shows
# up as 404s in the tests rather than moving the site with it.
_SAFE_PATH = "/%:@!$&'()*+,;=-._~"

# Hypercorn waits this long for requests in flight when asked to stop (its default is 3 s).
# Every demo response is ready at once, so 1 s is plenty and keeps Ctrl-C snappy.
_GRACEFUL_TIMEOUT = 1.0
# Backstop on Hypercorn's whole shutdown (graceful wait plus lifespan shutdown, both immediate
# here), so that a Hypercorn bug cannot hang the caller's cancellation forever.
_SHUTDOWN_LIMIT = 5.0

# Filler text: sentences from the chapter's world, shuffled by the seed. Real sentences make the
# pages read like pages, and give the Latin-1 and Cyrillic pages characters outside ASCII.
_SENTENCES = (
    "A crawler starts from a root URL and follows every link it finds.",
    "Each coroutine waits for the network without blocking the others.",
    "A nursery makes sure no task outlives the block that started it.",
    "Cancelling a scope stops every task inside it at its next checkpoint.",
    "A channel carries one request from the frontier to an idle worker.",
    "The seen set keeps the crawler from fetching a page twice.",
    "A redirect is recorded, and its target is queued with one redirect fewer.",
    "Network errors are retried; an HTTP error status is simply a record.",
    "The report lists every URL with its status, type, encoding and size.",
    "Links are resolved against the page URL, or against its base element.",
    "Fragments name a place in a page, so they never make a new URL.",
    "A deadline bounds the whole crawl, and a timeout bounds one request.",
    "The event loop runs whichever task is ready and parks the rest.",
    "Structured concurrency means errors always have somewhere to go.",
    "Generators became coroutines when yield learned to return a value.",
    "The chapter began with callbacks and ended with async and await.",
)
_LATIN1_SENTENCES = (
    "Le café crème est servi à la façade du château.",
    "Über den Dächern von Zürich und Köln scheint die Sonne.",
    "Señor, la piñata está en Málaga.",
    "Smørrebrød og kaffe på en grå dag i Århus.",
    "Déjà vu: the naïve crawler read this page as UTF-8.",
    "São Paulo não é a capital, mas é a maior cidade.",
)
_CYRILLIC_SENTENCES = (
    "Паук обходит сайт страница за страницей.",
    "Каждая сопрограмма ждёт ответа сервера, не мешая другим.",
    "Отмена останавливает все задачи в области.",
    "Канал передаёт запрос свободному работнику.",
    "Кодировка страницы указана только в теге meta.",
    "Ссылки разрешаются относительно адреса страницы.",
)


@dataclass(frozen=True, slots=True)
class DemoPage:
    """One response the demo server gives, exactly as sent.

    Attributes:
        status: The HTTP status code.
        headers: Lower-case names and values, including ``content-type`` (and ``location`` for
            a redirect). ``content-length`` is added when served, unless a page declares its
            own: a page declaring more than its body is cut short on purpose.
        body: The bytes on the wire (gzip-compressed for the gzip page).
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (lower-case), or None when the page has none."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def is_truncated(self) -> bool:
        """Whether the page declares more bytes than it sends, so every fetch of it fails."""
        declared = self.header("content-length")
        return declared is not None and int(declared) > len(self.body)


NOT_FOUND = DemoPage(
    status=404,
    headers=(("content-type", _UTF8_HTML),),
    body=(
        b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n"
        b"<body><h1>Not Found</h1><p>The demo site has no page here.</p></body></html>\n"
    ),
)
METHOD_NOT_ALLOWED = DemoPage(
    status=405,
    headers=(("content-type", "text/plain; charset=utf-8"), ("allow", "GET, HEAD")),
    body=b"The demo site only answers GET and HEAD.\n",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoSite:
    """The whole demo site as data: what each path answers, and what a crawl should record.

    Attributes:
        pages: Path (percent-encoded, with ``?query`` when there is one) to response. Paths not
            in it answer :data:`NOT_FOUND`.
        missing_paths: Paths the site links to that are not in ``pages``: each is a 404 record.
        sitemap_paths: Paths a crawl reaches only with ``--sitemaps``: ``/sitemap.xml`` and
            the pages no link reaches that it lists.
        sitemap_locs: The paths ``/sitemap.xml`` lists, in order.
    """

    pages: Mapping[str, DemoPage]
    missing_paths: frozenset[str]
    sitemap_paths: frozenset[str]
    sitemap_locs: tuple[str, ...]

    def lookup(self, target: str) -> DemoPage:
        """The response for a request target (path plus optional ``?query``)."""
        return self.pages.get(target, NOT_FOUND)


# The one sitemap: robots.txt is a 404, so it is where a crawler with --sitemaps looks.
SITEMAP_PATH = "/sitemap.xml"


def sitemap_body(site: DemoSite, origin: str) -> bytes:
    """``/sitemap.xml`` for the site served at ``origin`` (``http://127.0.0.1:8000``)."""
    entries = "".join(
        f"  <url><loc>{origin}{path.replace('&', '&amp;')}</loc></url>\n"
        for path in site.sitemap_locs
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        f"{entries}</urlset>\n"
    ).encode()


def build_demo_site(seed: int = 0) -> DemoSite:
    """Generate the demo site. The same seed gives an identical site, byte for byte.

    Args:
        seed: Varies the filler text, page sizes and cross links, never the layout.
    """
    return _SiteBuilder(random.Random(seed)).build()


@functools.cache
def _default_site() -> DemoSite:
    # Safe to share: a DemoSite is immutable (frozen, pages behind a MappingProxyType).
    return build_demo_site()


# --- generation -----------------------------------------------------------------------------


def _tree_paths() -> tuple[list[str], list[str], list[str]]:
    sections = [f"/{slug}/" for slug, _ in _SECTIONS]
    topics = [
        f"{section}topic-{topic}/"
        for section in sections
        for topic in range(1, _TOPICS_PER_SECTION + 1)
    ]
    leaves = [
        f"{topic}page-{page}.html" for topic in topics for page in range(1, _PAGES_PER_TOPIC + 1)
    ]
    return sections, topics, leaves


def _html_page(body: str, *, content_type: str = _UTF8_HTML, charset: str = "utf-8") -> DemoPage:
    return DemoPage(
        status=200, headers=(("content-type", content_type),), body=body.encode(charset)
    )


def _redirect(status: int, location: str) -> DemoPage:
    return DemoPage(status=status, headers=(("location", location),), body=b"")


def _file(content_type: str, body: bytes) -> DemoPage:
    return DemoPage(status=200, headers=(("content-type", content_type),), body=body)


def _document(
    title: str,
    content: str,
    *,
    head: str = "",
    meta_charset: str | None = "utf-8",
    top_link: bool = True,
) -> str:
    meta = f'<meta charset="{meta_charset}">\n' if meta_charset else ""
    footer = '<a href="#top">Back to top</a> · ' if top_link else ""
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en">\n<head>\n{meta}<title>{title}</title>\n'
        f"{head}</head>\n"
        f'<body id="top">\n<h1>{title}</h1>\n{content}\n'
        f'<footer>{footer}<a href="/">Demo home</a></footer>\n</body>\n</html>\n'
    )


def _link_list(links: Iterable[tuple[str, str]]) -> str:
    items = "".join(f'<li><a href="{href}">{text}</a></li>\n' for href, text in links)
    return f"<ul>\n{items}</ul>\n"


def _png(width: int = 16, height: int = 16) -> bytes:
    """A real PNG (8-bit RGB, a two-colour checkerboard), built from bytes so no file ships."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data)
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    dark, light = bytes((0x2E, 0x34, 0x40)), bytes((0xD8, 0xDE, 0xE9))
    rows = b"".join(
        b"\x00" + b"".join(dark if (x // 4 + y // 4) % 2 else light for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


class _SiteBuilder:
    """Builds the pages in a fixed order from one Random: that is what makes a seed reproducible."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.pages: dict[str, DemoPage] = {}
        self.sections, self.topics, self.leaves = _tree_paths()

    def build(self) -> DemoSite:
        self._home()
        self._tree()
        self._archive()
        self._features()
        self._redirects()
        self._broken()
        self._files()
        self._charsets()
        self._base_and_markup()
        self._tricky_links()
        sitemap_paths, sitemap_locs = self._sitemap()
        return DemoSite(
            pages=types.MappingProxyType(dict(sorted(self.pages.items()))),
            missing_paths=frozenset({"/missing.html"}),
            sitemap_paths=sitemap_paths,
            sitemap_locs=sitemap_locs,
        )

    # Text ------------------------------------------------------------------------------

    def _paragraph(self, sentences: Sequence[str]) -> str:
        count = min(len(sentences), self.rng.randint(3, 6))
        return " ".join(self.rng.sample(sentences, count))

    def _filler(self, min_chars: int, sentences: Sequence[str] = _SENTENCES) -> str:
        paragraphs: list[str] = []
        total = 0
        while total < min_chars:
            paragraphs.append(f"<p>{self._paragraph(sentences)}</p>\n")
            total += len(paragraphs[-1])
        return "".join(paragraphs)

    def _page_filler(self) -> str:
        return self._filler(self.rng.randint(_MIN_PAGE_BYTES, _MAX_FILLER_BYTES))

    # The tree --------------------------------------------------------------------------

    def _home(self) -> None:
        sections = [
            (path, title) for path, (_, title) in zip(self.sections, _SECTIONS, strict=True)
        ]
        content = (
            "<p>A generated site for trying the crawler: "
            "<code>trio-crawler --demo</code> crawls it.</p>\n"
            f"<h2>Sections</h2>\n{_link_list(sections)}"
            "<h2>Everything else</h2>\n"
            + _link_list(
                [
                    ("/features/", "Things a crawler meets (redirects, errors, charsets, ...)"),
                    ("/archive?page=1", "The archive, paged by query string"),
                ]
            )
            + self._filler(_MIN_PAGE_BYTES)
        )
        self.pages["/"] = _html_page(_document("Trio crawler demo site", content))

    def _tree(self) -> None:
        for index, (slug, name) in enumerate(_SECTIONS):
            section = self.sections[index]
            topics = [topic for topic in self.topics if topic.startswith(section)]
            elsewhere = self.rng.choice(
                [leaf for leaf in self.leaves if not leaf.startswith(section)]
            )
            content = (
                f'<p id="intro">Everything about {slug}, in {len(topics)} topics.</p>\n'
                + _link_list(
                    (topic.removeprefix(section), f"{name}, topic {number}")
                    for number, topic in enumerate(topics, start=1)
                )
                + f'<p>Compare <a href="{elsewhere}#details">a page elsewhere</a>.</p>\n'
                + self._page_filler()
            )
            self.pages[section] = _html_page(_document(name, content))
            for number, topic in enumerate(topics, start=1):
                self._topic(topic, f"{name}, topic {number}")

    def _topic(self, topic: str, title: str) -> None:
        leaves = [f"page-{page}.html" for page in range(1, _PAGES_PER_TOPIC + 1)]
        content = (
            '<p><a href="../">Up to the section</a></p>\n'
            + _link_list((leaf, f"{title}, page {n}") for n, leaf in enumerate(leaves, start=1))
            + self._page_filler()
        )
        self.pages[topic] = _html_page(_document(title, content))
        for number, leaf in enumerate(leaves, start=1):
            self._leaf(topic, leaf, number, f"{title}, page {number}")

    def _leaf(self, topic: str, leaf: str, number: int, title: str) -> None:
        neighbours = []
        if number > 1:
            neighbours.append(f'<a href="page-{number - 1}.html">Previous</a>')
        if number < _PAGES_PER_TOPIC:
            neighbours.append(f'<a href="page-{number + 1}.html">Next</a>')
        see_also = [
            (path + ("#details" if self.rng.random() < 0.5 else ""), "See also")
            for path in self.rng.sample(self.leaves, self.rng.randint(2, 4))
            if path != topic + leaf
        ]
        content = (
            '<nav><a href="/">Home</a> / <a href="../">Section</a> / '
            f'<a href="./">Topic</a> · {" · ".join(neighbours)}</nav>\n'
            + self._page_filler()
            + f'<h2 id="details">Details</h2>\n{_link_list(see_also)}'
        )
        self.pages[topic + leaf] = _html_page(_document(title, content))

    def _archive(self) -> None:
        for number in range(1, _ARCHIVE_PAGES + 1):
            # Query-only references ("?page=2") resolve against the current path.
            pager = [
                (f"?page={other}", f"Archive page {other}")
                for other in (number - 1, number + 1)
                if 1 <= other <= _ARCHIVE_PAGES
            ]
            picks = [(leaf, "An old page") for leaf in self.rng.sample(self.leaves, 4)]
            content = _link_list(pager + picks) + self._page_filler()
            self.pages[f"/archive?page={number}"] = _html_page(
                _document(f"Archive, page {number}", content)
            )

    # Features --------------------------------------------------------------------------

    def _features(self) -> None:
        content = (
            '<p>Each link below shows one crawler behaviour. <a name="anchor">An anchor with '
            "no href</a> is not a link.</p>\n"
            '<h2 id="redirects">Redirects</h2>\n'
            + _link_list(
                [
                    ("/redirect/start", "A five-hop chain: 301, 302, 303, 307, 308"),
                    ("/foo", "/foo redirects to /baz"),
                    ("/bar", "/bar redirects to /baz as well: /baz is fetched once"),
                    ("/redirect/offsite", "A redirect off the site: recorded, not followed"),
                    ("/redirect/nowhere", "A 302 without a Location"),
                ]
            )
            + '<h2 id="errors">Errors</h2>\n'
            + _link_list(
                [
                    ("/missing.html", "A page that does not exist (404)"),
                    ("/broken/truncated.html", "A response cut short: a network error"),
                ]
            )
            + '<h2 id="files">Files that are not HTML</h2>\n'
            + _link_list(
                [
                    ("/files/data.csv", "CSV"),
                    ("/files/readme.txt", "Plain text (with markup that is not parsed)"),
                    ("/files/logo.png", "PNG image"),
                ]
            )
            + '<p><img src="/files/logo.png" alt="An img src is not a link"></p>\n'
            + '<h2 id="skipped">Links that are never fetched</h2>\n'
            + _link_list(
                [
                    ("http://example.com/", "example.com: another host, out of scope"),
                    ("https://www.python.org/", "python.org: out of scope"),
                    ("mailto:crawler@example.com", "mailto: is not http"),
                    ("javascript:void(0)", "javascript: is not http"),
                    ("ftp://ftp.example.com/pub/", "ftp: is not http"),
                ]
            )
            + '<h2 id="fragments">Fragments</h2>\n'
            + _link_list(
                [
                    ("#top", "The top of this page: the same URL"),
                    ("#redirects", "The redirects above"),
                    ("/baz#details", "/baz, at its details"),
                    (f"{self.sections[0]}#intro", "A section, at its intro"),
                ]
            )
            + '<h2 id="charsets">Charsets</h2>\n'
            + _link_list(
                [
                    ("/intl/latin1.html", "ISO-8859-1, declared in the Content-Type header"),
                    ("/intl/cyrillic.html", "windows-1251, declared only in a meta tag"),
                ]
            )
            + '<h2 id="markup">Markup</h2>\n'
            + _link_list(
                [
                    ("/links/base.html", "<base href> with a, area and link elements"),
                    ("/compressed.html", "A gzip-compressed page"),
                    ("/xhtml/page.xhtml", "An XHTML page"),
                    ("/links/tricky.html", "Hrefs a browser reads by the URL Standard"),
                ]
            )
        )
        self.pages["/features/"] = _html_page(_document("Things a crawler meets", content))

    def _redirects(self) -> None:
        # Locations as servers really write them: path-absolute, path-relative, with dot
        # segments and with a fragment (which next_url must drop).
        self.pages["/redirect/start"] = _redirect(301, "/redirect/step-2")
        self.pages["/redirect/step-2"] = _redirect(302, "step-3")
        self.pages["/redirect/step-3"] = _redirect(303, "../redirect/step-4")
        self.pages["/redirect/step-4"] = _redirect(307, "./step-5#landing")
        self.pages["/redirect/step-5"] = _redirect(308, "/redirect/landing.html")
        self.pages["/redirect/landing.html"] = _html_page(
            _document(
                "The end of the redirect chain",
                "<p>Five redirects led here.</p>\n" + self._filler(_MIN_PAGE_BYTES),
            )
        )
        # The chapter's example: two URLs redirect to one target, which is fetched once.
        self.pages["/foo"] = _redirect(302, "/baz")
        self.pages["/bar"] = _redirect(301, "/baz")
        self.pages["/baz"] = _html_page(
            _document(
                "Baz",
                "<p>Both /foo and /bar lead here.</p>\n"
                + self._filler(_MIN_PAGE_BYTES)
                + '<h2 id="details">Details</h2>\n<p>Fragments name places in a page.</p>\n',
            )
        )
        self.pages["/redirect/offsite"] = _redirect(302, "https://www.python.org/")
        self.pages["/redirect/nowhere"] = DemoPage(
            status=302,
            headers=(("content-type", _UTF8_HTML),),
            body=b"<!DOCTYPE html>\n<title>Found</title><p>A redirect with nowhere to go.</p>\n",
        )

    def _broken(self) -> None:
        body = _document("Truncated", self._filler(_MIN_PAGE_BYTES)).encode()
        self.pages["/broken/truncated.html"] = DemoPage(
            status=200,
            headers=(("content-type", _UTF8_HTML), ("content-length", "4096")),
            body=body[:512],
        )

    def _files(self) -> None:
        rows = "".join(
            f"{leaf},{len(self.pages[leaf].body)}\n" for leaf in self.rng.sample(self.leaves, 20)
        )
        self.pages["/files/data.csv"] = _file(
            "text/csv; charset=utf-8",
            f"path,bytes\n{rows}http://example.com/in-a-csv-cell,0\n".encode(),
        )
        self.pages["/files/readme.txt"] = _file(
            "text/plain; charset=utf-8",
            b"This is text/plain, so the crawler does not look for links in it.\n"
            b'This markup is just text: <a href="/files/never-fetched.html">not a link</a>\n',
        )
        self.pages["/files/logo.png"] = _file("image/png", _png())
        self.pages["/static/style.css"] = _file(
            "text/css; charset=utf-8",
            b"body { font-family: sans-serif; max-width: 40em; margin: auto; }\n"
            b"/* url(/static/never-fetched.png) is not a link the crawler follows */\n",
        )

    def _tricky_links(self) -> None:
        """A page of hrefs that a browser resolves by the WHATWG URL Standard and a
        resolver of RFC 3986 leftovers does not; each leads to a page only that reading
        finds, so a crawler that resolves them otherwise gets 404s instead."""
        hrefs = [
            ("tricky/../tricky-targets/dots.html", "dots.html", "dot segments"),
            ("x/%2e%2e/tricky-targets/encoded-dots.html", "encoded-dots.html", "%2e%2e"),
            ("\\links\\tricky-targets\\backslash.html", "backslash.html", "backslashes"),
            ("tricky-tar&#9;gets/tab.html", "tab.html", "a tab, which is dropped"),
            ("http:tricky-targets/scheme.html", "scheme.html", "http: with no //"),
        ]
        items = "".join(f'<li><a href="{href}">{what}</a></li>\n' for href, _, what in hrefs)
        self.pages["/links/tricky.html"] = _html_page(
            _document("Tricky hrefs", f"<ul>\n{items}</ul>\n{self._page_filler()}")
        )
        for _, target, what in hrefs:
            self.pages[f"/links/tricky-targets/{target}"] = _html_page(
                _document(
                    "Found", f"<p>Reached through an href with {what}.</p>{self._page_filler()}"
                )
            )

    def _sitemap(self) -> tuple[frozenset[str], tuple[str, ...]]:
        """``/sitemap.xml`` (robots.txt is a 404, so it is the default one): a few linked
        pages and two that no link reaches, which only ``--sitemaps`` finds.

        Returns the paths only ``--sitemaps`` reaches, and the paths the sitemap lists. Its
        ``<loc>``s must be absolute, and the site's origin is known only when it is served,
        so the body is written per request (:func:`sitemap_body`).
        """
        hidden = ("/sitemap-only/archive-index.html", "/sitemap-only/changelog.html")
        for path in hidden:
            self.pages[path] = _html_page(
                _document(
                    "Listed only in the sitemap",
                    f"<p>No page links here: {path} is found through /sitemap.xml.</p>"
                    f"<p>{self._paragraph(_SENTENCES)}</p>",
                )
            )
        self.pages[SITEMAP_PATH] = _file("application/xml; charset=utf-8", b"")
        return frozenset([SITEMAP_PATH, *hidden]), ("/", "/features/", "/archive?page=1", *hidden)

    def _charsets(self) -> None:
        # The link path is written in the page's own charset, so it only resolves to the
        # real page when the crawler decodes the page with the right charset.
        latin1 = _document(
            "Café and friends",
            f"<p>{self._paragraph(_LATIN1_SENTENCES)}</p>\n"
            '<p>Next: <a href="/intl/café.html">the café</a>.</p>\n'
            + self._filler(_MIN_PAGE_BYTES, _LATIN1_SENTENCES),
            # No <meta>: the Content-Type header alone declares the charset.
            meta_charset=None,
        )
        self.pages["/intl/latin1.html"] = _html_page(
            latin1, content_type="text/html; charset=iso-8859-1", charset="iso-8859-1"
        )
        self.pages[quote("/intl/café.html")] = _html_page(
            _document("Café", "<p>Reached through a Latin-1 link.</p>\n" + self._page_filler())
        )
        cyrillic = _document(
            "Привет, мир",
            f"<p>{self._paragraph(_CYRILLIC_SENTENCES)}</p>\n"
            '<p>Дальше: <a href="/intl/привет.html">привет</a>.</p>\n'
            + self._filler(_MIN_PAGE_BYTES, _CYRILLIC_SENTENCES),
            meta_charset="windows-1251",
        )
        self.pages["/intl/cyrillic.html"] = _html_page(
            cyrillic, content_type="text/html", charset="windows-1251"
        )
        self.pages[quote("/intl/привет.html")] = _html_page(
            _document(
                "Привет", "<p>Reached through a windows-1251 link.</p>\n" + self._page_filler()
            )
        )

    def _base_and_markup(self) -> None:
        # With <base>, every relative href (and "#top") resolves against /links/target/, so
        # this page leaves out the usual "#top" footer link.
        content = (
            '<p><a href="one.html">One</a> is an a element.</p>\n'
            '<p><img src="/files/logo.png" usemap="#shapes" alt="A map" width="16" height="16">\n'
            '<map name="shapes"><area shape="rect" coords="0,0,16,16" href="map.html" '
            'alt="An area element"></map></p>\n' + self._filler(_MIN_PAGE_BYTES)
        )
        head = (
            '<base href="/links/target/">\n'
            '<link rel="stylesheet" href="/static/style.css">\n'
            '<link rel="next" href="next.html">\n'
        )
        self.pages["/links/base.html"] = _html_page(
            _document("A page with a base", content, head=head, top_link=False)
        )
        for name, how in (("one", "an a"), ("map", "an area"), ("next", "a link")):
            self.pages[f"/links/target/{name}.html"] = _html_page(
                _document(
                    f"Target {name}",
                    f"<p>Reached through {how} element and the base.</p>\n"
                    + self._filler(_MIN_PAGE_BYTES),
                )
            )
        compressed = _document("Compressed", self._page_filler()).encode()
        self.pages["/compressed.html"] = DemoPage(
            status=200,
            headers=(("content-type", _UTF8_HTML), ("content-encoding", "gzip")),
            # mtime=0 keeps the gzip header, and so the site, the same every run.
            body=gzip.compress(compressed, mtime=0),
        )
        xhtml = (
            '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n'
            '<html xmlns="http://www.w3.org/1999/xhtml" lang="en">\n'
            "<head><title>An XHTML page</title></head>\n"
            '<body id="top">\n<h1>An XHTML page</h1>\n'
            '<p><a href="child.html">Its child</a> is found only if XHTML is parsed.</p>\n'
            + self._filler(_MIN_PAGE_BYTES)
            + "</body>\n</html>\n"
        )
        self.pages["/xhtml/page.xhtml"] = _html_page(
            xhtml, content_type="application/xhtml+xml; charset=utf-8"
        )
        self.pages["/xhtml/child.html"] = _html_page(
            _document("The XHTML page's child", self._filler(_MIN_PAGE_BYTES))
        )


# --- the ASGI application ------------------------------------------------------------------


def demo_app(site: DemoSite) -> ASGIFramework:
    """A plain ASGI 3 application serving ``site``: no framework, GET and HEAD only.

    Lifespan events are acknowledged (Hypercorn sends them and waits for the answers), HTTP
    requests are answered from :attr:`DemoSite.pages`, and WebSocket connections are refused.
    """

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            await _run_lifespan(receive, send)
        elif scope["type"] == "http":
            await _respond(site, scope, send)
        else:
            # Refuse a WebSocket: a close before any accept is answered with HTTP 403 (the
            # ASGI spec); returning without either would make Hypercorn answer 500.
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1000, "reason": None})

    return app


async def _run_lifespan(receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            # Return at once: Hypercorn's asyncio flavour cancels the lifespan task as soon as
            # it sees "complete", and a task still running then is cancelled mid-await.
            return


async def _respond(site: DemoSite, scope: HTTPScope, send: ASGISendCallable) -> None:
    if scope["method"] not in ("GET", "HEAD"):
        page = METHOD_NOT_ALLOWED
    elif (target := _request_target(site, scope)) == SITEMAP_PATH:
        page = dataclasses.replace(site.lookup(target), body=sitemap_body(site, _origin(scope)))
    else:
        page = site.lookup(target)
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in page.headers]
    if page.header("content-length") is None:
        headers.append((b"content-length", str(len(page.body)).encode("ascii")))
    await send({"type": "http.response.start", "status": page.status, "headers": headers})
    if scope["method"] == "HEAD":
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    # A truncated page promises more body and then returns: Hypercorn sees the application
    # finish mid-response and closes the connection, which the client reports as a protocol
    # error. Nothing is logged, so the failure is quiet on the server side.
    await send({"type": "http.response.body", "body": page.body, "more_body": page.is_truncated})


def _origin(scope: HTTPScope) -> str:
    """The origin the client asked for: its Host header, else the address it reached."""
    for name, value in scope["headers"]:
        if name.lower() == b"host":
            return f"{scope['scheme']}://{value.decode('latin-1')}"
    host, port = scope["server"] or ("127.0.0.1", 80)
    return f"{scope['scheme']}://{host}:{port}"


def _request_target(site: DemoSite, scope: HTTPScope) -> str:
    # raw_path is the path as the client sent it; the crawler sends it percent-encoded the
    # way pages are keyed. Another client may escape differently ("%c3%a9"), so fall back to
    # re-encoding the decoded path.
    query = scope["query_string"].decode("latin-1")
    suffix = f"?{query}" if query else ""
    raw = scope["raw_path"].decode("latin-1") + suffix
    if raw in site.pages:
        return raw
    return quote(scope["path"], safe=_SAFE_PATH) + suffix


# --- serving ---------------------------------------------------------------------------------


async def serve_demo(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    site: DemoSite | None = None,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the demo site until cancelled.

    Start it with ``await nursery.start(serve_demo)`` on Trio or ``await
    task_group.start(serve_demo)`` on AnyIO (either backend). The listening socket is bound
    before ``task_status.started(root_url)`` is called, so the caller can connect at once.

    Args:
        host: The address to listen on; the CLI and the tests use 127.0.0.1 only.
        port: The port, or 0 for a free one chosen by the OS.
        site: The site to serve; by default ``build_demo_site()``, built once per process
            (generating it is about 0.1 s of CPU work that would otherwise block the event
            loop on every start).
        task_status: Receives the root URL, such as ``"http://127.0.0.1:54321/"``, with the
            real bound port.

    Cancellation: cancelling the enclosing scope asks Hypercorn to shut down gracefully
    (requests in flight get up to 1 s), waits for it in a shielded scope bounded by a 5 s
    backstop, then re-raises the cancellation. The listening socket is closed by then.

    Returns:
        Only if Hypercorn stops on its own. One way it can: Hypercorn treats a
        ``KeyboardInterrupt`` raised inside its own tasks as a request to stop and swallows it,
        so a CLI that wants exit status 130 should take SIGINT with a signal receiver rather
        than rely on ``KeyboardInterrupt`` reaching it.

    Raises:
        OSError: The address could not be bound (for example, the port is in use); raised
            before ``task_status.started()``, so ``start()`` raises it unwrapped.
        RuntimeError: The running async library is neither Trio nor asyncio.
    """
    serve = _hypercorn_serve()
    app = demo_app(_default_site() if site is None else site)
    listener = _listening_socket(host, port)
    bound_port = listener.getsockname()[1]
    root_url = f"http://{f'[{host}]' if ':' in host else host}:{bound_port}/"
    # From here on Hypercorn owns the descriptor: see the module docstring.
    config = _hypercorn_config(listener.detach())
    stop_requested = anyio.Event()
    serving_scope = anyio.CancelScope(shield=True)
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(_stop_when_cancelled, stop_requested, serving_scope)
        task_status.started(root_url)
        with serving_scope:
            await serve(app, config, shutdown_trigger=stop_requested.wait)
        task_group.cancel("demo server stopped")


async def _stop_when_cancelled(
    stop_requested: anyio.Event, serving_scope: anyio.CancelScope
) -> None:
    try:
        await anyio.sleep_forever()
    finally:
        # Synchronous on purpose: this runs while the task is being cancelled.
        stop_requested.set()
        serving_scope.deadline = anyio.current_time() + _SHUTDOWN_LIMIT


# The demo is crawled by crawlers with no concurrency cap (the chapter's first two stages,
# examples/01 and 02), which open a connection per URL at once: a few hundred. Hypercorn's
# defaults (a backlog of 100, 5 s to read a request on a new connection) drop some of them
# on a loaded machine. 1024 is Linux's default somaxconn since 5.4.
_BACKLOG = 1024
_KEEP_ALIVE_TIMEOUT = 30.0


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        # SO_REUSEADDR, as Hypercorn sets on sockets it makes, so that --serve-demo --port N
        # can be restarted at once while old connections sit in TIME_WAIT.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(_BACKLOG)
    except BaseException:
        listener.close()
        raise
    return listener


def _hypercorn_config(fileno: int) -> Config:
    config = Config()
    config.bind = [f"fd://{fileno}"]
    config.graceful_timeout = _GRACEFUL_TIMEOUT
    config.backlog = _BACKLOG
    config.keep_alive_timeout = _KEEP_ALIVE_TIMEOUT
    # No access log (the crawler's own report says what was fetched). The error log goes to a
    # logger of ours, so the CLI's logging setup governs it (its INFO line "Running on ..."
    # shows with -v). Given a string instead (the default is "-"), Hypercorn replaces the
    # handlers of the global "hypercorn.error" logger with its own stderr handler at INFO.
    config.accesslog = None
    config.errorlog = logger.getChild("hypercorn")
    return config


_Serve = Callable[..., Awaitable[object]]


def _hypercorn_serve() -> _Serve:
    """Hypercorn's ``serve`` for the running library: it has one flavour per event loop."""
    library = sniffio.current_async_library()
    if library == "trio":
        from hypercorn.trio import serve as trio_serve

        return trio_serve
    if library == "asyncio":
        from hypercorn.asyncio import serve as asyncio_serve

        return asyncio_serve
    raise RuntimeError(f"serve_demo runs on trio or asyncio, not {library!r}")

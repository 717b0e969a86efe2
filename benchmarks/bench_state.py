"""The core alone, no network and no event loop: what a million-URL frontier costs.

The question: a crawl of a large site remembers every URL it has seen and queues every one
it has not fetched yet. How many bytes does :class:`~trio_crawler._state.CrawlState` keep
per URL, and how fast does it take links in and hand requests out? The target is at most
150 bytes per URL for a 1 000 000-URL frontier.

How it measures
---------------
The script drives a ``CrawlState`` the way an engine does: ``next_request()``, then
``attempt_finished(request, Response(status=200, content_type="text/html", body=...))``,
with robots.txt off (or answered 404 if this version of the core fetches it anyway). Every
page links to 100 URLs: 80 never seen before and the same 20 "navigation" links on every
page, so the seen-set test answers both ways. This goes on until 1 000 000 URLs have been
seen; almost all of them are then queued (one page in 80 has been fetched).

* **Memory**: every object reachable from the state, each counted once with
  ``sys.getsizeof`` (which includes a set's hash table, a list's array and the garbage
  collector's header), less the same walk over a state that holds only its root. The
  walk groups the bytes by type: ``str`` is the URL strings themselves (their size is the
  URL's length plus CPython's 49-byte string header; no bookkeeping can shrink them short
  of storing something else), ``set`` mostly the seen-set's hash table, ``list`` the
  frontier's batches of URLs and the ``done`` list, ``FetchStatistic`` the records of the
  pages fetched so far. Everything but the strings is bookkeeping.

  Why not ``tracemalloc`` throughout: it tracks every allocation, including the core's
  many short-lived ones, and made a 100 000-URL fill seven times slower here (8 s instead
  of 1.1 s), so a million URLs per shape would take minutes. It checks the walk instead: at
  ``--tracemalloc-urls`` (50 000 by default; pass 1 000 000 for the full size, slowly),
  the state is filled under ``tracemalloc`` and the bytes allocated and still alive after
  a full garbage collection are set beside the walk's figure for the same state; the
  table shows both.
* **Speed**, without ``tracemalloc``, in operations per second of this process's CPU
  time (``time.process_time``: other tenants of the machine slow the wall clock, not
  this): links taken in by ``attempt_finished``, with the real link extraction
  (selectolax plus URL normalisation) on real HTML, and with it replaced by a stand-in that
  returns the page's links ready-made (``_page.extract_links`` patched), which isolates
  the core's own bookkeeping (scope test, seen-set, frontier, record; this is the pass
  that fills the million-URL frontier whose memory is then walked); ``extract_links``
  timed alone on the same pages; and ``next_request`` hand-outs from the full frontier,
  taken 100 at a time as ``max_tasks=100`` workers would, each then finished with a 404
  (timed separately).

Two URL shapes: ``http://127.0.0.1:8000/p/<n>.html`` (about 30 characters, like the
benchmark sites) and an 80-character one, more like a real site's.

At the defaults it should take about a minute on the 2-CPU machine (a 100 000-URL run took
26 s of CPU, most of it in the fixed-size parts). From the repository root::

    python benchmarks/bench_state.py [--urls 1000000] [--parse-pages 200] [--handouts 200000]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import sys
import time
import tracemalloc
import types
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):
    # Run as a script: make the `benchmarks` folder importable as a package. Appended, not
    # prepended, so that trio_crawler still comes from PYTHONPATH (run.py's snapshot).
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import markdown_table
from trio_crawler import _page, _state
from trio_crawler._config import CrawlConfig
from trio_crawler._events import Response
from trio_crawler._links import extract_links

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from trio_crawler._events import FetchRequest, Outcome

# Per page: links never seen before, and links every page repeats (a site's menu).
FRESH_LINKS = 80
NAVIGATION_LINKS = 20
# Hand-outs are taken in batches this size, as max_tasks=100 workers would take them.
HANDOUT_BATCH = 100
# Hand-outs timed: enough for a stable rate, few enough to leave the frontier mostly full.
DEFAULT_HANDOUTS = 200_000
TARGET_BYTES_PER_URL = 150
# Filler text on each real page, so the parser sees about as much HTML as on the
# synthetic site's pages (5-15 KB).
FILLER = "<p>" + "structured concurrency with nurseries and cancel scopes " * 80 + "</p>\n"
HTML_RESPONSE_TYPE = "text/html"


@dataclass(frozen=True, slots=True, kw_only=True)
class UrlShape:
    """One kind of URL: the crawl's root, and the URL and the href of link ``n``."""

    name: str
    root: str
    url: Callable[[int], str]
    href: Callable[[int], str]


SHAPES = (
    UrlShape(
        name="short",
        root="http://127.0.0.1:8000/",
        url=lambda n: f"http://127.0.0.1:8000/p/{n}.html",
        href=lambda n: f"/p/{n}.html",
    ),
    UrlShape(
        name="long",
        root="http://www.example-bookshop.com/",
        url=lambda n: (
            f"http://www.example-bookshop.com/catalogue/books/fiction/item-{n:07d}/index.html"
        ),
        href=lambda n: f"/catalogue/books/fiction/item-{n:07d}/index.html",
    ),
)


class Driver:
    """Drives a CrawlState as an engine would, across versions of the core's API.

    The core's ``next_request`` and ``attempt_finished`` have gained a ``now=`` clock
    reading; robots.txt may be handed out first. The driver passes a clock that advances
    one second per call (so no per-host delay can hold a request back) and answers
    robots.txt with a 404 (which allows everything), so the measured work is the pages'.
    """

    def __init__(self, root: str) -> None:
        options: dict[str, Any] = {}
        if "obey_robots" in inspect.signature(CrawlConfig.create).parameters:
            options["obey_robots"] = False
        config = CrawlConfig.create([root], **options)
        try:  # the factory of the stores, where this tree has one
            from trio_crawler._stores import open_store
        except ImportError:
            self.state = _state.CrawlState(config)
        else:
            self.state = _state.CrawlState(config, frontier=open_store(config))
        self._clocked = "now" in inspect.signature(self.state.next_request).parameters
        self._now = 0.0

    def next_request(self) -> FetchRequest:
        """The next page request.

        Raises:
            RuntimeError: If the core has nothing to hand out (the frontier ran dry).
        """
        while True:
            self._now += 1.0
            if self._clocked:
                request = self.state.next_request(now=self._now)
            else:
                request = self.state.next_request()
            if request is None:
                raise RuntimeError("the core handed out nothing; the frontier ran dry")
            if not getattr(request, "robots", False):
                return request
            self.finish(request, Response(status=404))

    def finish(self, request: FetchRequest, outcome: Outcome) -> None:
        if self._clocked:
            self.state.attempt_finished(request, outcome, now=self._now)
        else:
            self.state.attempt_finished(request, outcome)


class ReadyMadeLinks:
    """Stands in for ``extract_links``: each call returns the next page's links, made now.

    Making the strings here, rather than ahead of time, means they are allocated while the
    state is being measured, as the real extractor's would be.
    """

    def __init__(self, shape: UrlShape) -> None:
        self._url = shape.url
        self._navigation = frozenset(shape.url(n) for n in range(1, NAVIGATION_LINKS + 1))
        self._next = NAVIGATION_LINKS + 1

    def __call__(self, body: bytes, page_url: str, encoding: str, **options: object) -> set[str]:
        first = self._next
        self._next += FRESH_LINKS
        url = self._url
        links = {url(n) for n in range(first, first + FRESH_LINKS)}
        links.update(self._navigation)
        return links


@contextmanager
def links_ready_made(shape: UrlShape) -> Iterator[None]:
    """Replace the core's link extractor with :class:`ReadyMadeLinks` for the block."""
    if not hasattr(_page, "extract_links"):
        raise RuntimeError(
            "trio_crawler._page no longer imports extract_links; update links_ready_made() "
            "in benchmarks/bench_state.py to patch where the core now extracts links"
        )
    real = _page.extract_links
    # A callable object where mypy expects the function; same signature, so ignored.
    _page.extract_links = ReadyMadeLinks(shape)  # type: ignore[assignment]
    try:
        yield
    finally:
        _page.extract_links = real


# The body of a page whose links come ready-made: the core still checks its charset.
TINY_PAGE = Response(status=200, content_type=HTML_RESPONSE_TYPE, body=b"<html></html>")


def fill_frontier(shape: UrlShape, urls: int) -> tuple[Driver, int]:
    """A state that has seen ``urls`` URLs, links ready-made; returns it and the pages fed."""
    driver = Driver(shape.root)
    seen = driver.state.seen_urls
    pages = 0
    with links_ready_made(shape):
        while len(seen) < urls:
            driver.finish(driver.next_request(), TINY_PAGE)
            pages += 1
    return driver, pages


# Objects a state refers to that are not its own: classes, modules, functions. A walk that
# followed them would count the interpreter.
_NOT_STATE = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
)


def reachable_bytes(root: object) -> Counter[str]:
    """Bytes of every object reachable from ``root``, each counted once, by type name."""
    visited: set[int] = set()
    pending = [root]
    by_type: Counter[str] = Counter()
    while pending:
        item = pending.pop()
        if id(item) in visited or isinstance(item, _NOT_STATE):
            continue
        visited.add(id(item))
        by_type[type(item).__name__] += sys.getsizeof(item)
        pending.extend(gc.get_referents(item))
    return by_type


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory:
    """Bytes per URL seen, by the walk: all of it, and by type.

    Attributes:
        urls: URLs seen.
        queued: URLs in the frontier.
        by_type: Bytes per URL for each type the walk met, the root-only state subtracted.
    """

    urls: int
    queued: int
    by_type: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.by_type.values())

    def of(self, *names: str) -> float:
        return sum(self.by_type.get(name, 0.0) for name in names)


def measure_memory(driver: Driver) -> Memory:
    """What the state behind ``driver`` keeps, per URL seen, by the walk."""
    baseline = reachable_bytes(Driver(driver.state.config.roots[0]).state)
    gc.collect()
    walked = reachable_bytes(driver.state)
    count = len(driver.state.seen_urls)
    return Memory(
        urls=count,
        queued=driver.state.statistics().queued,
        by_type={name: (walked[name] - baseline[name]) / count for name in walked},
    )


def check_with_tracemalloc(shape: UrlShape, urls: int) -> tuple[float, float]:
    """(tracemalloc, walk) bytes per URL for one ``urls``-URL state; see the module doc."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    driver, _ = fill_frontier(shape, urls)
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    count = len(driver.state.seen_urls)
    return retained / count, measure_memory(driver).total


@dataclass(frozen=True, slots=True, kw_only=True)
class Speed:
    """Operations per second."""

    links_bookkeeping: float
    links_with_parsing: float
    links_extract_alone: float
    handouts: float
    finishes_404: float
    url_length: float


def measure(shape: UrlShape, *, urls: int, parse_pages: int, handouts: int) -> tuple[Memory, Speed]:
    """Fill a frontier (timed), walk it, time hand-outs from it, then time real pages."""
    # Links taken in, the core's own work only.
    started = time.process_time()
    driver, pages = fill_frontier(shape, urls)
    bookkeeping_seconds = time.process_time() - started
    links = pages * (FRESH_LINKS + NAVIGATION_LINKS)
    url_length = sum(map(len, driver.state.seen_urls)) / len(driver.state.seen_urls)
    memory = measure_memory(driver)

    # Hand-outs from the full frontier, a batch at a time; each finished with a 404.
    handout_seconds = finish_seconds = 0.0
    not_found = Response(status=404)
    for _ in range(handouts // HANDOUT_BATCH):
        started = time.process_time()
        batch = [driver.next_request() for _ in range(HANDOUT_BATCH)]
        handout_seconds += time.process_time() - started
        started = time.process_time()
        for request in batch:
            driver.finish(request, not_found)
        finish_seconds += time.process_time() - started
    handed_out = handouts // HANDOUT_BATCH * HANDOUT_BATCH
    del driver
    gc.collect()

    # Links taken in with the real extractor, on real HTML.
    bodies = [_page_html(shape, page) for page in range(parse_pages)]
    driver = Driver(shape.root)
    started = time.process_time()
    for body in bodies:
        request = driver.next_request()
        driver.finish(request, Response(status=200, content_type=HTML_RESPONSE_TYPE, body=body))
    parsing_seconds = time.process_time() - started
    page_url = shape.url(0)
    started = time.process_time()
    for body in bodies:
        extract_links(body, page_url, "utf-8")
    extract_seconds = time.process_time() - started
    parsed_links = parse_pages * (FRESH_LINKS + NAVIGATION_LINKS)
    return memory, Speed(
        links_bookkeeping=links / bookkeeping_seconds,
        links_with_parsing=parsed_links / parsing_seconds,
        links_extract_alone=parsed_links / extract_seconds,
        handouts=handed_out / handout_seconds,
        finishes_404=handed_out / finish_seconds,
        url_length=url_length,
    )


def _page_html(shape: UrlShape, page: int) -> bytes:
    """Page ``page`` of the real-HTML pass: its fresh links, the navigation, some text."""
    first = NAVIGATION_LINKS + 1 + page * FRESH_LINKS
    numbers = [*range(1, NAVIGATION_LINKS + 1), *range(first, first + FRESH_LINKS)]
    items = "".join(f'<li><a href="{shape.href(n)}">item {n}</a></li>\n' for n in numbers)
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Page {page}</title>'
        f"</head>\n<body><ul>\n{items}</ul>\n{FILLER}</body></html>\n"
    ).encode()


def report(
    memory: dict[str, Memory],
    speed: dict[str, Speed],
    checks: dict[str, tuple[float, float]],
    args: argparse.Namespace,
) -> str:
    """Two markdown tables: bytes per URL, and operations per second."""
    memory_rows = []
    for name, result in memory.items():
        strings = result.of("str")
        bookkeeping = result.total - strings
        other = result.total - result.of("str", "set", "list", "FetchStatistic")
        verdict = "yes" if result.total <= TARGET_BYTES_PER_URL else "no"
        check = checks.get(name)
        memory_rows.append(
            [
                f"{name} ({speed[name].url_length:.0f} chars)",
                f"{result.urls:,}",
                f"{result.queued:,}",
                f"{result.total:.0f}",
                f"{strings:.0f}",
                f"{bookkeeping:.0f}",
                f"{result.of('set'):.0f}",
                f"{result.of('list'):.0f}",
                f"{result.of('FetchStatistic'):.1f}",
                f"{other:.1f}",
                f"{check[0]:.0f} / {check[1]:.0f}" if check else "",
                f"{verdict}; {bookkeeping:.0f} without the strings",
            ]
        )
    speed_rows = [
        [
            f"{name} ({result.url_length:.0f} chars)",
            f"{result.links_bookkeeping:,.0f}",
            f"{result.links_with_parsing:,.0f}",
            f"{result.links_extract_alone:,.0f}",
            f"{result.handouts:,.0f}",
            f"{result.finishes_404:,.0f}",
        ]
        for name, result in speed.items()
    ]
    return (
        f"### The core alone: a {args.urls:,}-URL frontier\n\n"
        f"Bytes per URL seen, after {args.urls:,} URLs ({FRESH_LINKS} new and "
        f"{NAVIGATION_LINKS} repeated links per page), counted by walking the state; "
        f"the check column gives tracemalloc / walk for a {args.tracemalloc_urls:,}-URL "
        "state:\n\n"
        + markdown_table(
            [
                "URLs",
                "seen",
                "queued",
                "B/URL",
                "str (URLs)",
                "bookkeeping",
                "set",
                "list",
                "FetchStatistic",
                "other",
                "check",
                f"<= {TARGET_BYTES_PER_URL} B/URL",
            ],
            memory_rows,
        )
        + "\n\nOperations per second (links through attempt_finished; parsing excluded = "
        f"links handed over ready-made; with parsing = {args.parse_pages} real pages of "
        f"about {len(_page_html(SHAPES[0], 0)) // 1024} KB; hand-outs from the full "
        f"frontier, {args.handouts:,} of them):\n\n"
        + markdown_table(
            [
                "URLs",
                "links/s, parsing excluded",
                "links/s, with parsing",
                "extract_links alone, links/s",
                "next_request hand-outs/s",
                "404 finishes/s",
            ],
            speed_rows,
        )
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Measure CrawlState's memory and speed.")
    parser.add_argument("--urls", type=int, default=1_000_000, help="URLs in the frontier")
    parser.add_argument("--parse-pages", type=int, default=200, help="real pages to parse")
    parser.add_argument(
        "--handouts",
        type=int,
        help=f"next_request calls (default {DEFAULT_HANDOUTS:,}, or half of --urls if less)",
    )
    parser.add_argument(
        "--tracemalloc-urls",
        type=int,
        default=50_000,
        help="size of the tracemalloc cross-check (0: none)",
    )
    parser.add_argument(
        "--shapes", nargs="+", choices=[shape.name for shape in SHAPES], default=None
    )
    return parser


def run(args: argparse.Namespace) -> str:
    """Measure every URL shape; return the markdown tables."""
    memory = {}
    speed = {}
    checks = {}
    for shape in SHAPES:
        if args.shapes and shape.name not in args.shapes:
            continue
        memory[shape.name], speed[shape.name] = measure(
            shape, urls=args.urls, parse_pages=args.parse_pages, handouts=args.handouts
        )
        gc.collect()
        if args.tracemalloc_urls:
            checks[shape.name] = check_with_tracemalloc(shape, args.tracemalloc_urls)
            gc.collect()
    return report(memory, speed, checks, args)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.handouts is None:
        args.handouts = min(DEFAULT_HANDOUTS, args.urls // 2)
    if args.urls < 1000 or args.parse_pages < 1:
        raise SystemExit("bench_state: --urls must be >= 1000 and --parse-pages >= 1")
    if not HANDOUT_BATCH <= args.handouts <= args.urls // 2:
        raise SystemExit(
            f"bench_state: --handouts must be from {HANDOUT_BATCH} to half of --urls, "
            f"not {args.handouts}"
        )
    started = time.perf_counter()
    print(run(args))
    print(f"bench_state: {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()

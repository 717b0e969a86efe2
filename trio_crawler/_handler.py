"""The page handler: your code on every page, and the :class:`Page` it is given.

Theory of operation
-------------------
A crawl can run a function of the user's on every page it reads for links: to extract data
(the items it returns go to ``--items``, one JSON line each) and to steer the crawl (it may
take links out of ``page.links`` and add others with ``page.follow(href)``). The handler
runs where the page was fetched: in the worker's task, inside the crawl's cancel scope,
after the page is read and before its links are queued. The core stays pure:

1. With a handler, ``CrawlState.attempt_finished`` answers a page read for links with a
   :class:`~trio_crawler._events.PageRead` instead of settling it. The URL stays in flight.
2. The engine shell makes a :class:`Page` of it and awaits
   :func:`run_handler`, which calls the handler, collects what it returns and writes each
   item as a line of JSON, or catches what it raised: a :class:`Handled`.
3. ``CrawlState.page_handled`` takes that outcome: the record (with ``handler_error`` when
   the handler raised), the links to queue and the items go to the store as one change,
   so a durable store keeps a page's items with its record.

Without a handler nothing here runs: the core answers as it always did.

What may go wrong, and where it goes. An exception from the handler (an ``Exception``, in
the call, in awaiting it, in iterating what it returned, or in writing an item as JSON) is
the page's: its record says ``handler_error``, its items are dropped, the links it had
before the handler ran are queued, the traceback is logged at INFO (``-v``), and the crawl
goes on. Cancellation (the deadline, Ctrl-C, SIGTERM) is not an error: it goes through the
handler like through a fetch in flight, and the page gets no record (a ``--state`` crawl
fetches it again when resumed).

This module imports nothing async: a handler is awaited as a plain coroutine, on whatever
event loop the engine runs.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any, TypeAlias

from ._events import describe_exception
from ._links import decode_text, parse_document
from ._options import ConfigError
from ._urls import normalize_url

if TYPE_CHECKING:
    from collections.abc import Mapping

    from selectolax.lexbor import LexborHTMLParser

    from ._config import CrawlConfig
    from ._events import PageRead
    from ._page import PageReading

__all__ = ["Handled", "Handler", "Page", "check_handler", "load_handler", "run_handler"]

LOGGER = logging.getLogger("trio_crawler")

# A page handler: called with a Page, it returns None, a dict, or an iterable of dicts (a
# generator; an async generator), or an awaitable of one of those (an async function).
Handler: TypeAlias = Callable[["Page"], Any]


class Page:
    """A page the crawler read for links, as its page handler sees it.

    The crawler makes one for each page it reads for links, and hands it to the handler.
    Every attribute but :attr:`links` is the page as fetched; :attr:`links` is the handler's
    to edit. A handler that extracts, and one that steers::

        def extract(page):
            title = page.tree.css_first("title")
            return {"url": page.url, "title": title.text(strip=True) if title else None}

        def steer(page):
            page.links[:] = [link for link in page.links if "/blog/" in link]
            page.follow("/sitemap.html")  # resolved against the page, as a link would be

    Attributes:
        url: The URL fetched (absolute, no fragment).
        status: The HTTP status: always 200 (only those pages are read for links).
        headers: The response's headers, case-insensitive (``page.headers["ETag"]``).
        content: The body, with any Content-Encoding undone.
        encoding: The charset :attr:`text` is decoded with, as the record's ``encoding``.
        content_type: The media type without parameters (``text/html``, ``application/xml``).
        depth: Link hops from a root (a root is 0).
        referrer: The URL of the page through which this URL was first queued; None for a
            root.
        links: The page's distinct in-scope links, in page order, resolved: what the crawl
            will queue once the handler returns (seen before or not; the frontier knows
            which are new). Remove links to leave them unqueued; add with :meth:`follow`.
    """

    __slots__ = (
        "_admissible",
        "_max_url_length",
        "_parsed",
        "_scope",
        "_text",
        "content",
        "content_type",
        "depth",
        "encoding",
        "headers",
        "links",
        "referrer",
        "status",
        "url",
    )

    def __init__(self, read: PageRead, config: CrawlConfig) -> None:
        reading, response, request = read.reading, read.response, read.request
        assert reading.parsed is not None, "a page handler is given pages read for links"
        record = reading.record
        self.url = request.url
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers if response.headers is not None else {}
        self.content = response.body
        self.encoding = record.encoding or "utf-8"
        self.content_type = record.content_type or ""
        self.depth = request.depth
        self.referrer = request.referrer
        self.links = list(reading.parsed.links)
        self._parsed = reading.parsed
        self._text: str | None = None
        self._scope = config.scope
        self._max_url_length = config.max_url_length
        # A page that says nofollow (and is obeyed) offers no link, not even a followed one.
        self._admissible = not reading.nofollow

    def __repr__(self) -> str:
        return f"<Page {self.url} depth={self.depth} links={len(self.links)}>"

    @property
    def text(self) -> str:
        """The body decoded with :attr:`encoding` (bad bytes replaced), made once."""
        if self._text is None:
            self._text = decode_text(self.content, self.encoding)
        return self._text

    @property
    def tree(self) -> LexborHTMLParser:
        """The page parsed by selectolax's Lexbor parser: the same parse the crawler read
        the links from (``page.tree.css("h1")``, ``page.tree.css_first("title")``).

        A page the crawler did not parse (an ``X-Robots-Tag: nofollow`` header spares the
        parse) is parsed here, once, on first use.
        """
        parsed = self._parsed
        if parsed.tree is None:
            parsed.tree = parse_document(self.content, self.encoding)
        return parsed.tree

    def follow(self, href: str) -> str | None:
        """Add a link to :attr:`links`: ``href`` resolved against the page (its ``<base
        href>``, else its URL) as a link on it would be, fragment dropped.

        The crawl's rules still apply: a URL out of scope (``--exclude`` included), longer
        than ``--max-url-length``, not http(s), or on a page that says ``nofollow`` is not
        added; robots.txt, ``--max-depth`` and ``--max-pages`` apply when it is queued,
        and a URL the crawl has seen is not fetched again.

        Returns:
            The URL added (or already there), or None when the crawl may not follow it.
        """
        url = self._admit(href)
        if url is not None and url not in self.links:
            self.links.append(url)
        return url

    def _admit(self, href: str) -> str | None:
        if not isinstance(href, str):
            raise TypeError(f"a link must be a string, not {type(href).__name__}")
        if not self._admissible:
            return None
        url = normalize_url(href, self._parsed.base)
        if url is None or len(url) > self._max_url_length or not self._scope.allows(url):
            return None
        return url

    def _links_to_queue(self) -> tuple[str, ...] | None:
        """:attr:`links` as the handler left them: each read as :meth:`follow` reads an
        href (the page's own links pass as they are), without repeats; None when the
        handler left them as they were."""
        if tuple(self.links) == self._parsed.links:
            return None
        own = set(self._parsed.links)
        kept: dict[str, None] = {}
        for link in self.links:
            url = link if link in own else self._admit(link)
            if url is not None:
                kept[url] = None
        return tuple(kept)


@dataclass(frozen=True, slots=True)
class Handled:
    """What the page handler made of a page: the core's input to ``page_handled``.

    Attributes:
        links: The links to queue, in order; None to queue the page's own, as without a
            handler (the handler left them alone, or raised).
        items: The items, each one line of JSON.
        error: ``"ExceptionClassName: message"`` when the handler raised, else None.
    """

    links: tuple[str, ...] | None = None
    items: tuple[str, ...] = ()
    error: str | None = None

    def reading(self, read: PageReading) -> PageReading:
        """The page's reading with this outcome in it: the record's ``handler_error``, or
        the links to queue (the record's ``num_urls`` counts them)."""
        if self.error is not None:
            return replace(read, record=replace(read.record, handler_error=self.error))
        if self.links is None:
            return read
        record = replace(read.record, num_urls=len(self.links))
        return replace(read, record=record, links=self.links)


async def run_handler(handler: Handler, page: Page) -> Handled:
    """Call ``handler`` on ``page``, await and collect what it returns, write its items.

    Returns:
        The outcome: links and items, or the error the handler raised (logged with its
        traceback at INFO).

    Raises:
        BaseException: Cancellation, and any other ``BaseException`` that is not an
            ``Exception`` (KeyboardInterrupt), pass through untouched.
    """
    try:
        result = handler(page)
        if type(result) is not dict and inspect.isawaitable(result):  # dict: the usual item
            result = await result
        items = await _collect(result)
        lines = tuple(_item_line(item) for item in items)
        return Handled(page._links_to_queue(), lines)
    except Exception as exc:
        LOGGER.info("the page handler raised on %s", page.url, exc_info=exc)
        return Handled(error=describe_exception(exc))


async def _collect(result: object) -> list[object]:
    """The items a handler returned: None, one dict, or an iterable (a generator, an
    async generator) of them."""
    if result is None:
        return []
    if isinstance(result, dict):
        return [result]
    if hasattr(result, "__aiter__"):
        async with contextlib.AsyncExitStack() as stack:
            if hasattr(result, "aclose"):  # an async generator, closed however this ends
                stack.push_async_callback(result.aclose)
            return [item async for item in result]
    if isinstance(result, str | bytes) or not hasattr(result, "__iter__"):
        raise TypeError(
            f"the page handler returned {type(result).__name__}: return None, a dict or "
            "an iterable of dicts"
        )
    with contextlib.ExitStack() as stack:
        if hasattr(result, "close"):  # a generator, closed however this ends
            stack.callback(result.close)
        return list(result)


# One encoder for every item: json.dumps with any option but the defaults makes a new one for
# each call, a third of the cost of writing a small item.
_ITEM_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def _item_line(item: object) -> str:
    """One item as the line of JSON ``--items`` gets; the error when it cannot be one."""
    if not isinstance(item, dict):
        raise TypeError(f"an item must be a dict, not {type(item).__name__}")
    line = _ITEM_ENCODER.encode(item)
    line.encode("utf-8")  # a lone surrogate is no UTF-8, so no JSON Lines file holds it
    return line


# -- checking and loading a handler ------------------------------------------------------


def check_handler(handler: object) -> Handler:
    """Refuse, when the crawl is built, a handler the crawl could not call with a page.

    Plain functions, ``async`` functions, generator and async generator functions, bound
    methods and callable objects are all taken; what they return is read when they run.

    Raises:
        ConfigError: ``handler`` is not callable, or cannot take one positional argument.
    """
    if not callable(handler):
        raise ConfigError("handler", f"must be a function taking the page, not {handler!r}")
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # some builtins have none to read: called as they are
        return handler
    try:
        signature.bind(None)
    except TypeError:
        described = getattr(handler, "__qualname__", None) or type(handler).__qualname__
        raise ConfigError(
            "handler", f"must take one argument, the page, not {described}{signature}"
        ) from None
    return handler


# What --handler takes: a file and a name in it, or an importable module and a name.
_SPEC = re.compile(r"(?P<where>[^:]+):(?P<name>[A-Za-z_][\w.]*)")


def load_handler(spec: str) -> Handler:
    """The handler ``--handler`` names: ``PATH.py:NAME`` or ``package.module:NAME``.

    A file is loaded as ``python PATH.py`` would load it (its directory first on
    ``sys.path`` while it is imported, so that it can import its neighbours), but under a
    name of its own rather than ``__main__``: its ``if __name__ == "__main__":`` block does
    not run. A module is imported as ``import`` would (installed, or on ``PYTHONPATH``).
    Each is loaded once per process, however many times it is asked for.

    Raises:
        ConfigError: The spec is malformed; the file or module is missing, has a syntax
            error or raises when imported; it has no such name; or what it names is no
            handler (see :func:`check_handler`).
    """
    return check_handler(_load(spec))


@cache
def _load(spec: str) -> object:
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise ConfigError("handler", f"must be PATH.py:NAME or package.module:NAME, not {spec!r}")
    where, name = match["where"], match["name"]
    try:
        if where.endswith(".py") or os.sep in where or "/" in where:
            module = _load_file(spec, where)
        else:
            module = importlib.import_module(where)
    except ConfigError:
        raise
    except SyntaxError as exc:
        place = f"{exc.filename}, line {exc.lineno}" if exc.filename else where
        raise ConfigError("handler", f"{spec!r}: syntax error in {place}: {exc.msg}") from None
    except ModuleNotFoundError as exc:
        raise ConfigError("handler", f"{spec!r}: no module named {exc.name!r}") from None
    except Exception as exc:
        raise ConfigError(
            "handler", f"{spec!r}: importing {where} raised {describe_exception(exc)}"
        ) from None
    found: object = module
    for part in name.split("."):
        if not hasattr(found, part):
            raise ConfigError("handler", f"{spec!r}: {where} has no {name!r}")
        found = getattr(found, part)
    return found


def _load_file(spec: str, path: str) -> object:
    if not os.path.isfile(path):
        raise ConfigError("handler", f"{spec!r}: no such file {path!r}")
    directory = os.path.dirname(os.path.abspath(path))
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    module_name = f"trio_crawler_handler_{stem}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    assert loader_spec is not None
    assert loader_spec.loader is not None
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module  # as import does: dataclasses in it look it up
    sys.path.insert(0, directory)
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(directory)
    return module

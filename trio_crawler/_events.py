"""The vocabulary the core and the engines speak.

An engine asks the core for a :class:`FetchRequest`, performs one HTTP attempt for it, and
hands back exactly one outcome: a :class:`Response` when an HTTP exchange completed (whatever
its status), or a :class:`FetchError` when it did not. The core decides everything else:
whether to retry, what to record, which links to queue. Keeping the outcomes as plain frozen
values is what lets four engines with different schedulers share one core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._page import PageReading
    from ._stats import FetchStatistic, Stamp


@dataclass(frozen=True, slots=True)
class KnownPage:
    """What an earlier pass of a stored crawl kept of a page, for a recrawl.

    Attributes:
        etag: Its ``ETag``, sent back as ``If-None-Match``.
        last_modified: Its ``Last-Modified``, sent back as ``If-Modified-Since``.
        links: Its in-scope links, followed again if it answers 304 Not Modified.
        num_urls: Its record's ``num_urls`` (links in and out of scope).
    """

    etag: str | None
    last_modified: str | None
    links: tuple[str, ...]
    num_urls: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequest:
    """One attempt the core wants made.

    Attributes:
        url: Absolute, normalised URL without a fragment.
        redirects_left: How many more redirects may be followed from the chain this URL is in.
        attempt: 1 for the first try; the core hands out ``attempt + 1`` for a retry.
        depth: Link hops from a root (a redirect is not a hop).
        sitemap: 0 for a page; for a sitemap (``--sitemaps``), its level: 1 for one that
            robots.txt names (or ``/sitemap.xml``), 2 for one that an index of level 1
            names, and so on.
        known: In a recrawl, what the last pass kept of this URL (conditional requests).
        referrer: The URL through which this URL was first queued (the page that links to
            it, the sitemap that lists it, the redirect that points to it); None for a root.
        robots: True for a :class:`RobotsRequest` (a class attribute, so a million queued
            requests don't each carry it).
    """

    robots: ClassVar[bool] = False
    url: str
    redirects_left: int
    attempt: int = 1
    depth: int = 0
    sitemap: int = 0
    known: KnownPage | None = None
    referrer: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RobotsRequest(FetchRequest):
    """A fetch of an origin's robots.txt. It makes no record; its outcome sets the rules.

    Attributes:
        origin: The origin whose rules it decides (``url`` may be a redirect's target).
    """

    robots: ClassVar[bool] = True
    origin: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Exchange:
    """One HTTP attempt as it went over the wire, for archiving (``--warc``).

    The core never reads it; an engine hands it to the crawl's ``on_exchange`` hook. It is
    only built when such a hook is set, since it keeps a second copy of every body.

    Attributes:
        url: The URL requested.
        request_headers: The request's header lines, in the order sent.
        http_version: ``"HTTP/1.1"`` and so on; empty when no response came.
        status: The response's status, or None when none came (the attempt failed first).
        reason: The response's reason phrase.
        response_headers: The response's header lines as received.
        body: The payload as it came off the wire: Content-Encoding kept, Transfer-Encoding
            (chunking) removed.
        truncated: True when the body was cut off (``max_size``, or the connection broke).
        error: ``"Name: message"`` of the failure that ended the attempt, or None.
        robots: True for a robots.txt fetch.
    """

    url: str
    request_headers: tuple[tuple[str, str], ...] = ()
    http_version: str = ""
    status: int | None = None
    reason: str = ""
    response_headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    truncated: bool = False
    error: str | None = None
    robots: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    """An HTTP exchange that completed, whatever its status.

    Attributes:
        status: The HTTP status code.
        content_type: The raw ``Content-Type`` header, or None.
        location: The raw ``Location`` header, or None.
        body: The body with any Content-Encoding undone; empty for redirects.
        retry_after: Seconds from a ``Retry-After`` header, or None. Either form: a date
            is measured at the boundary from the response's ``Date`` (else from the local
            clock at receipt), since the core has no wall clock.
        etag: The raw ``ETag`` header, or None (kept by ``--state`` for recrawls).
        last_modified: The raw ``Last-Modified`` header, or None (likewise).
        x_robots_tags: The ``X-Robots-Tag`` header values, one per header line as
            received (a page may ask not to be followed: ``nofollow``).
        headers: Every response header, case-insensitive (the HTTP library's own mapping,
            handed over as it is, for the page handler); the core reads none of it.
        exchange: The attempt as sent and received, when the crawl archives them.
        arrived: When the answer's last bytes reached this machine, on the engine's
            clock, where the transport knows it from the kernel (the crawler's own, on
            Trio, on Linux), else None: the moment a host's delay runs from with one
            request at a time, which a process busy with other pages reads later.
    """

    status: int
    content_type: str | None = None
    location: str | None = None
    body: bytes = b""
    retry_after: float | None = None
    etag: str | None = None
    last_modified: str | None = None
    x_robots_tags: tuple[str, ...] = ()
    headers: Mapping[str, str] | None = field(default=None, repr=False, compare=False)
    exchange: Exchange | None = field(default=None, repr=False, compare=False)
    arrived: float | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchError:
    """An attempt that did not produce a usable response.

    Attributes:
        error: ``"ExceptionClassName: message"`` (just the class name when the message is empty).
        retryable: True for network errors (connect, read, write, timeout, protocol), which the
            core retries while the URL has tries left; False for errors another try cannot fix.
        status: The HTTP status when one was received before the failure, else None.
        content_type: The Content-Type header that came with ``status``, if any: a body too
            large to keep is still a page of some type, and its record says which.
        exchange: The attempt as sent and received, when the crawl archives them.
        withdrawn: True when the crawl withdrew the request before its head was written
            (its origin was told to wait while the connection was made): no attempt was
            made, and the engine gives the request back rather than record anything.
    """

    error: str
    retryable: bool
    status: int | None = None
    content_type: str | None = None
    exchange: Exchange | None = field(default=None, repr=False, compare=False)
    withdrawn: bool = False


Outcome = Response | FetchError


# How far down an exception's causes describe_exception looks for a message.
_MAX_CAUSES = 8


def describe_exception(exc: BaseException) -> str:
    """Render an exception the way records carry it: ``"Name: message"``, or ``"Name"``.

    An exception with no message of its own borrows the first message among its causes
    and contexts, even a context its raiser suppressed (``from None`` hides it from a
    traceback, not from this search): on Trio, a refused certificate reaches us as a bare
    ``ConnectError``, over a bare ``BrokenResourceError``, over the
    ``SSLCertVerificationError`` that says what went wrong, and a record reading only
    "ConnectError" would hide it.
    """
    name = type(exc).__name__
    message = str(exc)
    cause: BaseException | None = exc
    for _ in range(_MAX_CAUSES):
        if message or cause is None:
            break
        cause = cause.__cause__ or cause.__context__
        message = str(cause) if cause is not None else ""
    return f"{name}: {message}" if message else name


# -- what the core answers when an attempt is finished (CrawlState.attempt_finished) -----


@dataclass(frozen=True, slots=True)
class Retry:
    """Make another attempt now, on the same worker: a network error with tries left, or a
    robots.txt redirect. The URL stays in flight."""

    request: FetchRequest


@dataclass(frozen=True, slots=True)
class Recorded:
    """The URL is done: this is its record (already handed to ``on_record``)."""

    record: FetchStatistic


@dataclass(frozen=True, slots=True)
class Requeued:
    """The request went back to the frontier, first in its origin's line, to wait out its
    host's delay, a ``Retry-After`` or a backoff; it will be handed out again."""

    request: FetchRequest


@dataclass(frozen=True, slots=True)
class RobotsSettled:
    """An origin's robots.txt is decided (rules, or the failure to fetch them); its URLs
    may go out now."""

    origin: str


@dataclass(frozen=True, slots=True)
class Committing:
    """The URL is done, and a durable store is keeping it: its record is made (and handed
    to ``on_record``) when the store's transaction commits. It stays in flight until then."""

    request: FetchRequest


@dataclass(frozen=True, slots=True)
class PageRead:
    """The URL is a page read for links, and the crawl has a page handler: the engine
    runs the handler on it, then hands the outcome to ``CrawlState.page_handled``. The
    URL stays in flight until then. Only a crawl with a handler is ever answered this.

    Attributes:
        request: The request the page answers.
        response: The page's response (body, headers, ``ETag``...).
        reading: The page as the core read it: its record, its links, and the parse
            they came from.
        stamp: When its attempt started and how long it took, for its record.
    """

    request: FetchRequest
    response: Response
    reading: PageReading
    stamp: Stamp | None = None


AttemptResult = Retry | Recorded | Committing | Requeued | RobotsSettled | PageRead

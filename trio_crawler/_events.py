"""The vocabulary the core and the engines speak.

An engine asks the core for a :class:`FetchRequest`, performs one HTTP attempt for it, and
hands back exactly one outcome: a :class:`Response` when an HTTP exchange completed (whatever
its status), or a :class:`FetchError` when it did not. The core decides everything else:
whether to retry, what to record, which links to queue. Keeping the outcomes as plain frozen
values is what lets four engines with different schedulers share one core.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequest:
    """One attempt the core wants made.

    Attributes:
        url: Absolute, normalised URL without a fragment.
        redirects_left: How many more redirects may be followed from the chain this URL is in.
        attempt: 1 for the first try; the core hands out ``attempt + 1`` for a retry.
        depth: Link hops from a root (a redirect is not a hop).
    """

    url: str
    redirects_left: int
    attempt: int = 1
    depth: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    """An HTTP exchange that completed, whatever its status.

    Attributes:
        status: The HTTP status code.
        content_type: The raw ``Content-Type`` header, or None.
        location: The raw ``Location`` header, or None.
        body: The body with any Content-Encoding undone; empty for redirects.
    """

    status: int
    content_type: str | None = None
    location: str | None = None
    body: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchError:
    """An attempt that did not produce a usable response.

    Attributes:
        error: ``"ExceptionClassName: message"`` (just the class name when the message is empty).
        retryable: True for network errors (connect, read, write, timeout, protocol), which the
            core retries while the URL has tries left; False for errors another try cannot fix.
        status: The HTTP status when one was received before the failure, else None.
    """

    error: str
    retryable: bool
    status: int | None = None


Outcome = Response | FetchError


def describe_exception(exc: BaseException) -> str:
    """Render an exception the way records carry it: ``"Name: message"``, or ``"Name"``."""
    message = str(exc)
    name = type(exc).__name__
    return f"{name}: {message}" if message else name

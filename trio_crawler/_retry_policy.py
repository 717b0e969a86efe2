"""Which answers are worth another try, and how long to wait before it.

The core (:mod:`trio_crawler._state`) decides that a URL is tried again; this module is the
policy it decides by, kept apart so that it reads as one page: the statuses that mean "not
now" rather than "no", whether such an answer is tried again and after how long
(:func:`retry_wait`), and the backoff when the answer gives no ``Retry-After``. Pure
numbers: the jitter is an input, drawn from a source the core owns (a test seeds it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ._events import FetchError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._events import FetchRequest, Outcome, Response

LOGGER = logging.getLogger("trio_crawler")

# Statuses that mean "not now" rather than "no", retried like network errors: 408 Request
# Timeout (RFC 9110 section 15.5.9), 429 Too Many Requests (RFC 6585 section 4), 502 Bad
# Gateway, 503 Service Unavailable and 504 Gateway Timeout (RFC 9110 sections 15.6.3-15.6.5).
# Scrapy's RETRY_HTTP_CODES has these and 500, which stays a record here: a server's bug
# answers the same the next time.
RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})
# Of those, the answers that say the server is overloaded or rate-limiting this client, so
# that its origin's pace slows down (with timeouts and failed connections): 502, 504 and
# 408 speak of a gateway or of the request, not of load the crawler put on the server.
PUSHBACK_STATUSES = frozenset({429, 503})
# Without a Retry-After, the wait before a retry is an exponential backoff: about 1 s, then
# 2, 4... up to 60 s (the adaptive-manners contract), each drawn within 20 % either side of
# its step (gRPC's connection-backoff JITTER), so that clients a server turned away at one
# moment do not all come back at the same next one.
BACKOFF_FIRST = 1.0
BACKOFF_CAP = 60.0
BACKOFF_JITTER = 0.2


def backoff_wait(attempt: int, jitter: float) -> float:
    """Seconds to wait after try ``attempt`` got a status worth a retry but no Retry-After.

    Args:
        attempt: The try that got the answer: 1 waits about :data:`BACKOFF_FIRST`, each
            later one twice the one before, up to :data:`BACKOFF_CAP`.
        jitter: A draw from [0, 1): where the wait falls within :data:`BACKOFF_JITTER`
            of its step (0.5 is the step itself).

    Returns:
        The wait, to the millisecond (enough to spread retries, and readable in the log).
    """
    step = BACKOFF_FIRST * 2.0 ** min(attempt - 1, 16)  # 2**16 s is far past the cap
    spread = 1.0 + BACKOFF_JITTER * (2.0 * jitter - 1.0)
    return round(min(BACKOFF_CAP, step * spread), 3)


def retry_wait(
    request: FetchRequest,
    response: Response,
    *,
    max_tries: int,
    max_retry_after: float,
    draw: Callable[[], float],
) -> float | None:
    """Seconds to wait before the next try of ``request``, whose try got ``response``, an
    answer of :data:`RETRY_STATUSES`; None when it is not tried again (logged, as is the
    wait): its tries are spent (``max_tries``), or its ``Retry-After`` asks for longer than
    ``max_retry_after``. The wait is the ``Retry-After``, else a backoff whose jitter is
    ``draw()`` (called only then).
    """
    if request.attempt >= max_tries:
        LOGGER.info(
            "try %d for %s got %d; no tries left", request.attempt, request.url, response.status
        )
        return None
    if response.retry_after is None:
        wait = backoff_wait(request.attempt, draw())
    elif response.retry_after <= max_retry_after:
        wait = response.retry_after
    else:
        LOGGER.info(
            "try %d for %s got %d asking to wait %g s, longer than --max-retry-after "
            "(%g s): not retried",
            request.attempt,
            request.url,
            response.status,
            response.retry_after,
            max_retry_after,
        )
        return None
    LOGGER.info(
        "try %d for %s got %d; retrying after %g s",
        request.attempt,
        request.url,
        response.status,
        wait,
    )
    return wait


def pushes_back(outcome: Outcome) -> bool:
    """Whether an attempt's outcome says its server is overloaded or limiting this client:
    a :data:`PUSHBACK_STATUSES` answer, or a network error worth a retry (refused, reset,
    timed out). The origin's pace learns from it (:mod:`trio_crawler._pace`)."""
    if isinstance(outcome, FetchError):
        return outcome.retryable
    return outcome.status in PUSHBACK_STATUSES

"""Helpers shared by the test modules: one copy of each, imported by bare name (pytest puts
``tests/`` on ``sys.path``)."""

from __future__ import annotations

from trio_crawler._events import (
    FetchRequest,
    Outcome,
    Recorded,
    Requeued,
    Retry,
    RobotsSettled,
)
from trio_crawler._state import CrawlState


def finish(
    state: CrawlState, request: FetchRequest, outcome: Outcome, *, now: float
) -> FetchRequest | None:
    """``attempt_finished``, answered as a worker reads it: the request to attempt again at
    once, or None when the worker is done with this one (whichever way it ended)."""
    result = state.attempt_finished(request, outcome, now=now)
    if isinstance(result, Retry):
        return result.request
    assert isinstance(result, Recorded | Requeued | RobotsSettled), result
    return None

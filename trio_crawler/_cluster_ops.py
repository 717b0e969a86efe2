"""The operations a process sends to a shared crawl, written and read back.

A process says everything it has to say to the server of a shared crawl as a list of
operations in one step call (``lua/step.lua``, whose header lists them: ``add``, ``seen``,
``done``, ``drop``, ``back``, ``robots``, ``rback``, ``started``, ``renew``, ``lease``).
This module writes them from the core's values, and reads what the server answers back
into the core's values: which links were new (:func:`settled_from`), what was leased
(:func:`read_leases`), an origin's robots.txt state (:func:`origin_state`). Pure functions:
no I/O, no clock. Everything read back is checked like input from the web: a damaged
entry is reported, never trusted.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._cluster import entry_of, entry_url, parse_entry
from ._frontier import Settled
from ._pace import Pace, PaceSignal
from ._robots import RobotsRules, origin_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._events import FetchRequest
    from ._frontier import Completion
    from ._scheduler import OriginScheduler
    from ._stats import FetchStatistic

LOGGER = logging.getLogger("trio_crawler")

Operation = dict[str, Any]
# The operations after which work may be ready at once that was not: links queued,
# robots.txt settled (its origin's pages), requests given back, a URL done (a slot under
# --max-per-host). A start is not: the origin it frees may go a delay later at the soonest
# (only starts at origins with a delay are told), which the server announces to the
# processes that wait with a timed "work" message (lua/prelude.lua's finish_check).
MAKES_WORK = frozenset({"add", "seen", "robots", "back", "rback", "done", "drop"})


def seconds(answer: object) -> float:
    """A wait the server answered, rounded to its clock's microseconds; inf for none."""
    if isinstance(answer, int | float) and answer >= 0:
        return round(float(answer), 6)
    return math.inf


def link_operations(completion: Completion, turns_away: Callable[[str], bool]) -> list[Operation]:
    """The operations that add a completion's links: for each queued offer, the links
    ``turns_away`` (robots.txt rules this process knows) turns away as ``seen``, and the
    rest as one ``add`` per origin; an offer only counted as one ``add`` that queues none."""
    ops: list[Operation] = []
    for offer in completion.offers:
        if not offer.queue:
            ops.append(
                {"k": "add", "o": "", "u": list(offer.urls), "q": False, "od": offer.over_depth}
            )
            continue
        by_origin: dict[str, list[str]] = {}
        turned_away: list[str] = []
        for url in offer.urls:
            if turns_away(url):  # by rules this process knows, as memory does
                turned_away.append(url)
            else:
                by_origin.setdefault(origin_of(url), []).append(url)
        if turned_away:
            ops.append({"k": "seen", "u": turned_away})
        for key, urls in by_origin.items():
            op: Operation = {
                "k": "add",
                "o": key,
                "u": urls,
                "d": offer.depth,
                "r": offer.redirects_left,
                "s": offer.sitemap,
                "f": offer.first,
                "q": True,
            }
            if offer.referrer is not None:
                op["ref"] = offer.referrer
            ops.append(op)
    return ops


def settled_from(ops: list[Operation], results: list[Any]) -> Settled:
    """The answer to a completion, from the results of the operations that added its links
    (logging each link robots.txt turned away)."""
    new = beyond = disallowed = 0
    for op, result in zip(ops, results, strict=True):
        if op["k"] == "seen":  # the new ones robots.txt turned away, by URL
            turned = (
                [url for url in result if isinstance(url, str)] if isinstance(result, list) else []
            )
            for url in turned:
                LOGGER.info("robots.txt disallows %s", url)
            new += len(turned)
            disallowed += len(turned)
            continue
        count = result if isinstance(result, int) and result > 0 else 0
        new += count
        if not op["q"] and op["od"]:
            beyond += count
    return Settled(new=new, disallowed=disallowed, beyond=beyond)


def done_operation(
    request: FetchRequest, record: FetchStatistic | None, *, ended: float | None = None
) -> Operation:
    """A URL done, with or without a record (and whether it is a failure's), and when its
    answer ended on the server's clock (None: it was not fetched)."""
    op: Operation = {
        "k": "done",
        "u": request.url,
        "o": origin_of(request.url),
        "rec": 0 if record is None else 1,
        "x": 1 if record is not None and record.exception is not None else 0,
    }
    if ended is not None:
        op["t"] = ended
    return op


def back_operation(
    request: FetchRequest, *, wait: float = 0.0, ended: float | None = None
) -> Operation:
    """A leased request given back, first in its origin's line, which waits ``wait``
    seconds; ``ended``: when the attempt it is a retry of ended, on the server's clock
    (None: it was not fetched)."""
    op: Operation = {"k": "back", "u": request.url, "e": entry_of(request)}
    if wait > 0:
        op["w"] = wait
    if ended is not None:
        op["t"] = ended
    return op


def give_back_operations(held: Mapping[str, FetchRequest | None]) -> list[Operation]:
    """Every lease in ``held`` (URL, or ``"r ORIGIN"`` for a robots.txt, leased or
    handed out) given back, as a process leaves."""
    ops: list[Operation] = []
    for member, request in held.items():
        if member.startswith("r "):
            ops.append({"k": "rback", "o": member[2:]})
        elif request is not None:
            ops.append(back_operation(request))
    return ops


@dataclass(frozen=True, slots=True)
class Leases:
    """What a step call leased, read: robots.txt fetches by origin, requests, the URLs of
    entries too damaged to fetch (to be dropped), and for each request the seconds from the
    call until its origin may go (lua/step.lua's lease_origin; 0 or less: it could go since
    then; more: it was leased ahead of its time)."""

    robots: list[str]
    pages: list[FetchRequest]
    damaged: list[str]
    waits: dict[str, float]

    @property
    def any_ready(self) -> bool:
        """Whether any lease is of work ready now (robots.txt, or a URL whose origin could
        go): a lease ahead alone says nothing of the origins that are ready."""
        return bool(self.robots) or any(wait <= 0 for wait in self.waits.values())


def read_leases(leased: list[Any]) -> Leases:
    """The answer's ``l``, read; what is not a lease is logged and skipped."""
    robots: list[str] = []
    pages: list[FetchRequest] = []
    damaged: list[str] = []
    waits: dict[str, float] = {}
    for item in leased:
        if not (
            isinstance(item, list)
            and (len(item) == 2 or (len(item) == 3 and _is_wait(item[2])))
            and (len(item) == 3 or item[0] == "r")
            and isinstance(item[1], str)
        ):
            LOGGER.warning("shared frontier: a lease that is not one (%r); skipped", item)
            continue
        kind, value = item[:2]
        if kind == "r":
            robots.append(value)
            continue
        request = parse_entry(value)
        if request is None:
            LOGGER.warning("shared frontier: a queued entry is damaged (%.200r); dropped", value)
            damaged.append(entry_url(value))
            continue
        pages.append(request)
        waits[request.url] = round(float(item[2]), 6)  # the server's clock's microseconds
    return Leases(robots, pages, damaged, waits)


def _is_wait(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class OriginState:
    """An origin as the server keeps it: its robots.txt rules or failure, and its delay."""

    rules: RobotsRules | None
    failure: str | None
    delay: float


def origin_state(key: str, answer: list[Any]) -> OriginState:
    """Origin ``key``'s hash fields ``rb``, ``rt``, ``rf``, ``dl``, read."""
    robots, text, failure, delay = answer
    try:
        wait = float(delay) if delay is not None else 0.0
    except ValueError:
        wait = 0.0
    wait = wait if math.isfinite(wait) and wait > 0 else 0.0
    if robots == "k" and isinstance(text, str) and text:
        return OriginState(RobotsRules.from_text(text), None, wait)
    if robots == "x":
        return OriginState(None, failure or "robots.txt failed", wait)
    # Pages of an origin whose robots.txt is not settled are not handed out; an entry
    # that says otherwise is damaged: fetch by the rules of none.
    LOGGER.warning("shared frontier: origin %s has no robots.txt state", key)
    return OriginState(RobotsRules(), None, wait)


# The answer of a pace operation for an origin its pace limits by the window alone.
PACE_ONLY_WINDOW = 1e-6
# How a pace operation names what an answer said (lua/step.lua's "pace").
PACE_CODES = {PaceSignal.PUSHBACK: "p", PaceSignal.PROMPT: "o", PaceSignal.SLOW: "w"}


class SharedPace:
    """What one process of a shared crawl keeps of the origins' paces, which the server
    keeps and changes (lua/step.lua's ``pace_answer``, the law of
    :mod:`trio_crawler._pace`): each origin's fastest answer, to tell a slow one, and the
    server's last word on each origin's pace. A prompt answer is sent only while the
    pace may change on it: until the server first answers for the origin (it starts in
    slow start) and while the pace limits it; a crawl that meets no pushback stops
    sending them once each origin's window opens.
    """

    def __init__(self, *, adapt: bool) -> None:
        self.adapt = adapt
        self._local: dict[str, Pace] = {}
        # Origin -> the server's last answer: its gap, PACE_ONLY_WINDOW for a window
        # alone, 0 for no limit; absent until the server first answers.
        self.paced: dict[str, float] = {}

    def operation(
        self,
        origin: str,
        pushback: bool,
        elapsed: float,
        started: float,
        *,
        ended: float | None = None,
    ) -> Operation | None:
        """The operation that tells the server of an answer that took ``elapsed`` seconds
        from ``started`` (the server's clock), learnt as of ``ended`` (the server's clock)
        when the call comes later than the attempt's end (its server waited for after a
        timeout); None when there is nothing to tell."""
        if not self.adapt:
            return None
        local = self._local.get(origin)
        if local is None:
            local = self._local[origin] = Pace(window=0)
        signal = PaceSignal.PUSHBACK if pushback else local.classify(elapsed)
        if signal is PaceSignal.PROMPT and self.paced.get(origin, 1.0) == 0:
            return None
        op: Operation = {"k": "pace", "o": origin, "s": PACE_CODES[signal], "t": started}
        if ended is not None:
            op["e"] = ended
        return op

    def learn(self, op: Operation, result: object) -> None:
        """The server's answer to a pace operation: the origin's gap when its pace limits
        it (a number above 0), else 0."""
        self.paced[op["o"]] = float(result) if isinstance(result, int | float) else 0.0

    def limits(self, origin: str) -> bool:
        """Whether the server said the origin's pace sets it a gap."""
        return self.paced.get(origin, 0.0) > PACE_ONLY_WINDOW

    def space(self, scheduler: OriginScheduler, url: str, now: float) -> None:
        """Hold ``url``'s origin in the window for the server's gap after it is handed out:
        the URLs this process leased before the origin was slowed go out at its new pace,
        as those the server leases from then on (one at a time, each after the gap)."""
        key = origin_of(url)
        if self.limits(key):
            scheduler.hold_origin(key, not_before=now + self.paced[key])

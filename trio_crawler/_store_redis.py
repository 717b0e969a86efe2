"""The Redis store (``--frontier``): one crawl shared by many processes.

Theory of operation
-------------------
The seen set, the queues, the per-origin rules and clocks, the leases and the pending count
live on the server, and change only inside the scripts of
:mod:`~trio_crawler._cluster_scripts`, each of which Redis runs whole (the client, errors
and status are :mod:`~trio_crawler._cluster`'s). A process holds a *window* of that
frontier: the requests it leased, in an :class:`~trio_crawler._scheduler.OriginScheduler`
that hands them to the core as usual (with no delay or host limit of its own: the server
applies those for every process at once).

Every change a process makes is an operation in a list; :meth:`RedisFrontier.flush` sends
the list as one script call (one round trip for the links of many pages, their
completions, lease renewals, and a lease of more work), and applies the answer. A finished
URL goes through two of them:

1. its links are added (the answer says which were new, which its record counts);
2. its record is written to this process's output, and only then is the URL marked done.

So a process killed between the two leaves the URL leased; its lease runs out and another
process fetches it again: a duplicate record, never a lost one.

A URL is leased for ``lease`` seconds, renewed every third of that while the process works
on it; a process that stops renewing (it died) loses its leases to whichever process asks
for work next. A process stopped by Ctrl-C gives its leases back on the way out.

Termination: the script that brings queued + leased to zero marks the crawl finished and
publishes ``finished``; every process listens on that channel, so none polls and none
waits for an idle timer. A process that finds nothing to lease tells the server so, and is
told (``work``) when something is queued or given back; it also wakes when the earliest
delay or lease ends, which the server's answer says.

Time. Leases and per-host delays are compared on the server, by its clock (``TIME`` in the
scripts): processes on different machines have clocks that differ, and the server's is the
one they share. This store reads no clock of its own: the give-up deadline of a lost
server and the idle wake-ups are timed on the engine's clock, from the session's runtime.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import os
import secrets
import socket
from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from ._cluster import (
    ANSWER_TIMEOUT,
    CONNECT_TIMEOUT,
    ClusterError,
    SharedCounts,
    entry_of,
    lost_errors,
    parse_entry,
    prefix_of,
    reason,
    redis_client,
    refusal,
)
from ._cluster_scripts import CLOCK, CREATE, STATUS, STEP
from ._config import redacted
from ._events import FetchRequest, RobotsRequest
from ._frontier import (
    GROUP_SIZE,
    GROUP_WINDOW,
    Completion,
    Disallowed,
    FrontierLost,
    OutputMode,
    Resumed,
    Settled,
    Taken,
)
from ._robots import RobotsRules, origin_of
from ._scheduler import OriginScheduler

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from ._config import CrawlConfig
    from ._frontier import StoreRuntime
    from ._output import ArchiveOutput, RecordOutput
    from ._stats import FetchStatistic

LOGGER = logging.getLogger("trio_crawler")


def _seconds(answer: object) -> float:
    """A wait the server answered, rounded to its clock's microseconds; inf for none."""
    if isinstance(answer, int | float) and answer >= 0:
        return round(float(answer), 6)
    return math.inf


Operation = dict[str, Any]
# The operations after which work may be ready that was not: links queued, robots.txt
# settled (its origin's pages), requests given back, a URL done or started (a slot under
# --max-per-host, or the start an origin with a delay waits for). Only a renewal is not.
_MAKES_WORK = frozenset({"add", "seen", "robots", "back", "rback", "done", "drop", "started"})
# A completion waiting for its links to be added: with its callback, and where its
# operations are in the call that carries them.
_Waiting = tuple[Completion, "Callable[[Completion, Settled], object]", int, int]


class RedisFrontier:
    """The window of a shared crawl that this process works on (see the module docstring).

    Args:
        config: The crawl's options: ``frontier``, ``crawl_id`` and ``lease`` say where
            and how; ``delay``, ``max_per_host`` and ``obey_robots`` are kept on the server
            by the process that creates the crawl.
    """

    output_mode = OutputMode.APPEND

    def __init__(self, config: CrawlConfig) -> None:
        # Politeness is the server's: locally, no delay and no host limit.
        self.scheduler = OriginScheduler(delay=0.0, obey_robots=True, max_per_host=None)
        # The URLs this process was handed or offered (the shared seen set is the server's).
        self._seen: set[str] = set()
        assert config.frontier is not None
        self.config = config
        self.url = config.frontier
        self.where = redacted(config.frontier)
        self.crawl_id = config.crawl_id
        self.lease = config.lease
        self.prefix = prefix_of(config.crawl_id)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.lost: str | None = None
        self._scheduling: Callable[[], bool] = lambda: True
        self._client: Any = None
        self._step: Any = None
        self._status: Any = None
        self._runtime: StoreRuntime | None = None
        # Changes not sent yet: operations, completions waiting for their links to be
        # added, and URLs whose record is written and which wait to be marked done.
        self._ops: list[Operation] = []
        self._waiting: list[tuple[Completion, Callable[[Completion, Settled], object]]] = []
        self._dones: list[Operation] = []
        # URLs a worker finished, until the call that marks them done is answered.
        self._unsettled: set[str] = set()
        self._flushing = False
        self._sending = 0  # operations in the call under way
        self._flushed: anyio.Event | None = None  # made in session()
        # Leases this process holds: URL (or "r ORIGIN") -> the request, or None while
        # its robots.txt waits to be taken.
        self._held: dict[str, FetchRequest | None] = {}
        self._robots_tickets: deque[str] = deque()
        self._delays: dict[str, float] = {}
        self._base_delay = config.delay  # the crawl's, as the server keeps it (_join)
        self._starting: set[str] = set()
        # The server's answer: the shared counts, and when to ask again if it had nothing.
        self.shared = SharedCounts(1, 0, 0, 0, False, 0)  # unknown until the crawl is joined
        self._idle_until: float | None = None
        self._closed = False
        self._joined = False
        # When the server stopped answering (on the engine's clock), while calls retry; and
        # whether self.shared is older than the end of this process's part (its report says).
        self._away_since: float | None = None
        # The number of the last step call answered that asked for a lease (see _listen).
        self._last_call = 0
        self.counts_stale = False

    # -- counts: the window, and the rest of the shared crawl ------------------------------

    @property
    def finished_shared(self) -> bool:
        """Whether the server said the shared crawl is finished."""
        return self.shared.finished

    @property
    def queued(self) -> int:
        """Queued here and on the server, and leased by other processes: all the work this
        process does not hold (so a stopped process is finished once its own is done)."""
        # A robots.txt leased ahead and not handed out yet counts nowhere, as in memory
        # (its origin's pages are queued on the server).
        window = self.scheduler.queued
        if self.shared.finished:
            return window
        others = max(0, self.shared.leased - len(self._held))
        if self._closed:
            return self.shared.queued + self.shared.leased
        return window + self.shared.queued + others

    @property
    def in_flight_count(self) -> int:
        """Requests in flight here, and changes that hold a lease until they are sent."""
        if self._closed:
            return 0
        return (
            self.scheduler.in_flight_count
            + len(self._waiting)
            + len(self._dones)
            + len(self._ops)
            + self._sending
        )

    @property
    def seen_count(self) -> int:
        return max(self.shared.seen, len(self._seen))

    @property
    def in_flight(self) -> frozenset[str]:
        return self.scheduler.in_flight

    def seen_urls(self) -> set[str]:
        """The URLs this process was handed or offered: the shared seen set is the
        server's (its size is :attr:`seen_count`), too big to copy into every process."""
        return self._seen

    # -- the core's changes ------------------------------------------------------------------

    def finish(self, completion: Completion, then: Callable[[Completion, Settled], object]) -> None:
        """Keep ``completion`` for the next call; ``then`` runs once its links are added."""
        self._waiting.append((completion, then))
        if completion.leased and completion.request is not None:
            self._unsettled.add(completion.request.url)
        for offer in completion.offers:
            if offer.queue:
                self._seen.update(offer.urls)  # seen by the crawl, once this is applied

    def take(self, *, now: float, start_new: bool) -> Taken | None:
        if self._robots_tickets:
            key = self._robots_tickets.popleft()
            request = self.scheduler.take_robots(key, now=now)
            self._held["r " + key] = request
            return request
        taken = self.scheduler.take(now=now, start_new=start_new)
        if isinstance(taken, Disallowed):
            self._leave(taken.request, {"k": "drop"})
        return taken

    def started(self, request: FetchRequest, *, now: float) -> None:
        self.scheduler.started(request, now=now)
        if not request.robots and self._delay_of(origin_of(request.url)) > 0:
            self._ops.append({"k": "started", "u": request.url})
            self._starting.add(request.url)

    async def before_attempt(self, request: FetchRequest) -> None:
        """Tell the server that ``request`` starts now, when its host has a delay, which
        every process times from that instant; a lost server stops the crawl."""
        if request.url in self._starting:
            try:
                await self.sync()
            except FrontierLost as exc:
                assert self._runtime is not None
                self._runtime.on_lost(exc)

    def retry(self, request: FetchRequest) -> bool:
        """A retry waits its turn on a host with a delay; elsewhere it is made at once."""
        if request.robots or self._delay_of(origin_of(request.url)) <= 0:
            return self.scheduler.retry(request)
        self._back(request, wait=0.0)
        return False

    def retry_later(self, request: FetchRequest, *, not_before: float, now: float) -> None:
        if request.robots:
            self.scheduler.retry_later(request, not_before=not_before)
            return
        # The server holds the origin for every process; the window holds what it has
        # of the origin already leased.
        self._back(request, wait=max(0.0, not_before - now))
        self.scheduler.hold_origin(origin_of(request.url), not_before=not_before)

    def is_leased(self, request: FetchRequest) -> bool:
        return self.scheduler.is_leased(request)

    def give_back(self, request: FetchRequest) -> None:
        """A request handed out and never attempted goes back to the front of the window,
        its lease still held (and renewed): it goes out next, as in memory. The server
        gets back what the window still holds when the session ends."""
        self.scheduler.give_back(request)
        if isinstance(request, RobotsRequest):
            self._robots_tickets.appendleft(request.origin)

    def robots_settled(
        self,
        request: RobotsRequest,
        *,
        rules: RobotsRules | None = None,
        failure: str | None = None,
        delay: float | None = None,
        now: float,
    ) -> None:
        self.scheduler.robots_settled(request, rules=rules, failure=failure, delay=delay, now=now)
        self._held.pop("r " + request.origin, None)
        op: Operation = {"k": "robots", "o": request.origin}
        if rules is not None:
            op.update(st="k", rt=rules.as_text())
        else:
            op.update(st="x", rf=failure or "robots.txt failed")
        if delay is not None:
            op["dl"] = delay
            self._delays[request.origin] = delay
        self._ops.append(op)

    def _back(self, request: FetchRequest, *, wait: float) -> None:
        """Give a request in flight back to the server, first in its origin's line."""
        self.scheduler.release(request)
        self._starting.discard(request.url)
        self._held.pop(request.url, None)
        op: Operation = {"k": "back", "u": request.url, "e": entry_of(request)}
        if wait > 0:
            op["w"] = wait
        self._ops.append(op)

    def _leave(self, request: FetchRequest, op: Operation) -> None:
        """A leased URL leaves the crawl with no record (robots.txt forbids it)."""
        self._held.pop(request.url, None)
        op.update(u=request.url, o=origin_of(request.url))
        self._ops.append(op)

    # -- what the engine asks ----------------------------------------------------------------

    def next_wakeup(self) -> float | None:
        local = self.scheduler.next_wakeup()
        remote = self._idle_until if self._idle_until is not None else None
        if remote is not None and math.isinf(remote):
            remote = None
        if local is None:
            return remote
        return local if remote is None else min(local, remote)

    def has_work(self, *, starved: bool) -> bool:
        """Whether :meth:`flush` would send anything now."""
        if self._flushing or self.lost is not None or self._closed:
            return False
        if self._ops or self._dones or self._waiting:
            return True
        return starved and self._want() > 0

    def _want(self) -> int:
        """How many more requests to lease: enough for the idle workers."""
        if self.shared.finished or not self._scheduling() or self.lost is not None:
            return 0
        if self._idle_until is not None and self._now() < self._idle_until:
            return 0
        busy = self.scheduler.queued + self.scheduler.in_flight_count + len(self._robots_tickets)
        return max(0, self.config.max_tasks - busy)

    async def settle(self, request: FetchRequest) -> None:
        """Return once ``request`` is done on the server: its links added, its record made
        and written, and the call that marks it done answered.

        Raises:
            FrontierLost: The server could not be reached for ``lease`` seconds.
        """
        while request.url in self._unsettled and self.lost is None:
            if self._flushing:
                assert self._flushed is not None
                await self._flushed.wait()
            else:
                await self._flush(starved=False, group=GROUP_WINDOW)

    async def sync(self) -> None:
        """Send what waits, and return only once it was sent (a flush under way counts
        once it ends: it takes whatever was added meanwhile)."""
        while self._flushing:
            assert self._flushed is not None
            await self._flushed.wait()
        await self._flush(starved=False, group=0.0)

    async def flush(self, *, starved: bool = False) -> None:
        """Send the waiting changes, a call at a time, until none wait (and lease work).

        Raises:
            FrontierLost: The server could not be reached for ``lease`` seconds.
        """
        await self._flush(starved=starved, group=0.0)

    async def _flush(self, *, starved: bool, group: float) -> None:
        """:meth:`flush`; with ``group`` seconds, the first call waits that long for more
        changes to join it (see :data:`~trio_crawler._frontier.GROUP_WINDOW`), unless
        enough already wait."""
        if self._flushing or self.lost is not None or self._client is None:
            return
        self._flushing = True
        self._flushed = anyio.Event()
        leased_once = False
        try:
            if group and len(self._waiting) + len(self._dones) < GROUP_SIZE:
                await anyio.sleep(group)  # let the pages finishing now join
            while True:
                ops, waiting = self._gather(lease=not leased_once)
                if not ops and not waiting:
                    break
                answer = None  # pages without links: nothing to send for them yet
                if ops:
                    leased_once = leased_once or ops[-1]["k"] == "lease"
                    self._sending = len(ops) + len(waiting)
                    try:
                        answer = await self._call(ops)
                    finally:
                        self._sending = 0
                await self._answered(answer, ops, waiting)
        finally:
            self._flushing = False
            self._flushed.set()
            self._wake_dispatcher()  # the dispatcher may have waited on this flush

    def _gather(self, *, lease: bool) -> tuple[list[Operation], list[_Waiting]]:
        """The next call's operations: done URLs first, then links, then the rest."""
        ops: list[Operation] = self._dones + self._ops
        self._dones, self._ops = [], []
        waiting = []
        for completion, then in self._waiting:
            first = len(ops)
            for offer in completion.offers:
                if not offer.queue:
                    urls = list(offer.urls)
                    ops.append({"k": "add", "o": "", "u": urls, "q": False, "od": offer.over_depth})
                    continue
                by_origin: dict[str, list[str]] = {}
                turned_away: list[str] = []
                turns_away = self.scheduler.turns_away
                for url in offer.urls:
                    if turns_away(url):  # by rules this process knows, as memory does
                        turned_away.append(url)
                    else:
                        by_origin.setdefault(origin_of(url), []).append(url)
                if turned_away:
                    ops.append({"k": "seen", "u": turned_away})
                for key, urls in by_origin.items():
                    ops.append(
                        {
                            "k": "add",
                            "o": key,
                            "u": urls,
                            "d": offer.depth,
                            "r": offer.redirects_left,
                            "s": offer.sitemap,
                            "f": offer.first,
                            "q": True,
                        }
                    )
            waiting.append((completion, then, first, len(ops)))
        self._waiting = []
        if any(op["k"] in _MAKES_WORK for op in ops):
            # This call itself may make work ready (before the lease it carries, which
            # the script applies last): no need to wait for the server's "work" message.
            self._idle_until = None
        want = self._want() if lease else 0
        if want > 0:
            ops.append({"k": "lease", "n": want})
        return ops, waiting

    async def _call(self, ops: list[Operation]) -> dict[str, Any]:
        """One script call, retried with backoff while the server is away, for up to
        ``lease`` seconds (after that, other processes may hold our leases anyway)."""
        assert self._runtime is not None
        run = self._runtime.shielded
        payload = json.dumps(ops, separators=(",", ":"))
        give_up = self._now() + self.lease
        pause = 0.1
        while True:
            try:
                raw = await run(
                    lambda: self._step(
                        keys=[self.prefix + "meta"],
                        args=[
                            self.prefix,
                            self._server_clock(),
                            self.owner,
                            str(self.lease),
                            payload,
                        ],
                    )
                )
                answer = json.loads(raw)
                if not isinstance(answer, dict):
                    raise ValueError(f"not an answer: {raw!r:.80}")
                if self._away_since is not None:
                    LOGGER.warning(
                        "shared frontier %s: the server is back after %.1f s",
                        self.where,
                        self._now() - self._away_since,
                    )
                    self._away_since = None
                return answer
            except lost_errors() as exc:
                if self._now() + pause > give_up:
                    self.lost = f"lost the shared frontier at {self.where}: {reason(exc)}"
                    raise FrontierLost(self.lost) from None
                # One line when the server goes away, saying until when; then one when it is
                # back, or when the crawl gives up: not one per retry.
                if self._away_since is None:
                    self._away_since = self._now()
                    assert self._runtime is not None
                    until = datetime.datetime.fromtimestamp(
                        self._runtime.wall_time(give_up)
                    ).strftime("%H:%M:%S")
                    LOGGER.warning(
                        "shared frontier %s: lost the server (%s); trying again until %s "
                        "(--lease %g s), then stopping",
                        self.where,
                        reason(exc),
                        until,
                        self.lease,
                    )
                else:
                    LOGGER.debug("shared frontier %s: still away: %s", self.where, reason(exc))
                await anyio.sleep(pause)
                pause = min(pause * 2, 2.0)
            except ValueError as exc:
                self.lost = f"the shared frontier at {self.where} answered nonsense: {exc}"
                raise FrontierLost(self.lost) from None

    async def _answered(
        self,
        answer: dict[str, Any] | None,
        ops: list[Operation],
        waiting: list[_Waiting],
    ) -> None:
        """Apply the server's answer to ``ops`` (None when there was nothing to send)."""
        results: list[Any] = []
        if answer is not None:
            if "bad" in answer:  # the script checked our changes and wrote none of them
                raise RuntimeError(
                    f"the shared frontier refused change {answer['bad']} of "
                    f"{json.dumps(ops)[:300]}: a bug in trio_crawler"
                )
            if answer.get("gone"):
                self.lost = f"the crawl {self.crawl_id!r} is gone from {self.where}"
                raise FrontierLost(self.lost)
            given = answer.get("r")
            results = given if isinstance(given, list) else []
            if len(results) != len(ops):
                self.lost = f"{self.where} answered {len(results)} of {len(ops)} changes"
                raise FrontierLost(self.lost)
            try:
                self.shared = SharedCounts.from_answer(answer.get("c"))
            except (ValueError, TypeError) as exc:
                self.lost = f"the shared frontier at {self.where} answered nonsense: {exc}"
                raise FrontierLost(self.lost) from None
        for op in ops:
            if op["k"] == "started":
                self._starting.discard(op["u"])
            elif op["k"] == "done":
                self._unsettled.discard(op["u"])
        for completion, then, first, last in waiting:
            new = beyond = disallowed = 0
            for op, result in zip(ops[first:last], results[first:last], strict=True):
                if op["k"] == "seen":  # the new ones robots.txt turned away, by URL
                    turned = (
                        [url for url in result if isinstance(url, str)]
                        if isinstance(result, list)
                        else []
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
            settled = Settled(new=new, disallowed=disallowed, beyond=beyond)
            request = completion.request
            if completion.leased:
                assert request is not None
                self.scheduler.complete(request)
            then(completion, settled)
            if request is not None and not request.robots:
                # The record is written (then() wrote it): now the URL may be marked done.
                self._held.pop(request.url, None)
                record = completion.record
                done: Operation = {
                    "k": "done",
                    "u": request.url,
                    "o": origin_of(request.url),
                    "rec": 0 if record is None else 1,
                    "x": 1 if record is not None and record.exception is not None else 0,
                }
                self._dones.append(done)
        if answer is None:
            return
        number = answer.get("n")
        if isinstance(number, int) and ops and ops[-1]["k"] == "lease":
            self._last_call = max(self._last_call, number)
        leased = answer.get("l")
        await self._take_leased(leased if isinstance(leased, list) else [])
        if isinstance(leased, list) and leased:
            self._idle_until = None
        elif ops and ops[-1]["k"] == "lease":
            # Woken by a "work" message before then. The server's clock is this engine's
            # (see _read_server_clock), to the microsecond of its TIME.
            seconds = _seconds(answer.get("w"))
            if self.shared.leased > len(self._held):  # another process's may run out
                seconds = min(seconds, _seconds(answer.get("x")), self.lease)
            # Nothing to wait for (inf): no lease is asked for until something changes
            # (a "work" message, or a change of this process's own, see _MAKES_WORK).
            self._idle_until = self._now() + seconds

    async def _take_leased(self, leased: list[Any]) -> None:
        """Queue what the server leased to this process in the window."""
        pages: list[FetchRequest] = []
        for item in leased:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], str)):
                LOGGER.warning("shared frontier: a lease that is not one (%r); skipped", item)
                continue
            kind, value = item
            if kind == "r":
                self._robots_tickets.append(value)
                self._held["r " + value] = None
                continue
            request = parse_entry(value)
            if request is None:
                LOGGER.warning(
                    "shared frontier: a queued entry is damaged (%.200r); dropped", value
                )
                url = value.split(" ", 4)[-1]
                self._ops.append({"k": "drop", "u": url, "o": ""})
                continue
            pages.append(request)
        unknown = [
            key
            for key in dict.fromkeys(origin_of(p.url) for p in pages)
            if not self.scheduler.knows_origin(key)
        ]
        if unknown:
            await self._learn_origins(unknown)
        for request in pages:
            self._held[request.url] = request
            self._seen.add(request.url)
            self.scheduler.enqueue_one(request, first=request.attempt > 1)

    async def _learn_origins(self, keys: list[str]) -> None:
        """Read the robots.txt state and delay of origins new to this process."""
        assert self._runtime is not None
        client = self._client

        async def read() -> list[Any]:
            answers = []
            for key in keys:
                answers.append(
                    await client.hmget(self.prefix + "o:" + key, ["rb", "rt", "rf", "dl"])
                )
            return answers

        try:
            answers = await self._runtime.shielded(read)
        except lost_errors() as exc:
            self.lost = f"lost the shared frontier at {self.where}: {reason(exc)}"
            raise FrontierLost(self.lost) from None
        for key, (robots, text, failure, delay) in zip(keys, answers, strict=True):
            try:
                seconds = float(delay) if delay is not None else 0.0
            except ValueError:
                seconds = 0.0
            self._delays[key] = seconds if math.isfinite(seconds) and seconds > 0 else 0.0
            if robots == "k" and isinstance(text, str) and text:
                self.scheduler.restore_origin(
                    key, rules=RobotsRules.from_text(text), failure=None, delay=None
                )
            elif robots == "x":
                self.scheduler.restore_origin(
                    key, rules=None, failure=failure or "robots.txt failed", delay=None
                )
            else:
                # Pages of an origin whose robots.txt is not settled are not handed out;
                # an entry that says otherwise is damaged: fetch by the rules of none.
                LOGGER.warning("shared frontier: origin %s has no robots.txt state", key)
                self.scheduler.restore_origin(key, rules=RobotsRules(), failure=None, delay=None)

    def close(self) -> None:
        """Nothing to do: :meth:`session` leaves the shared crawl when ``crawl()`` ends."""

    def resumed(self) -> Resumed | None:
        """None: each process's report and outputs hold the records it makes."""
        return None

    def records(self) -> list[FetchStatistic] | None:
        return None

    def attach_output(self, output: RecordOutput) -> None:
        """Nothing to reconcile: each process appends its own records."""

    def attach_archive(self, archive: ArchiveOutput) -> None:
        """Nothing to reconcile: each process appends its own exchanges."""

    def report_notes(self) -> list[str]:
        """One line for where the whole shared crawl is: each process reports its own
        records."""
        shared = self.shared
        return [
            f"Shared crawl {self.crawl_id}: {shared.done} done, "
            f"{shared.failed} failed, {shared.queued} queued, {shared.leased} leased"
            f"{', finished' if shared.finished else ''}"
            f"{' (last known)' if self.counts_stale else ''}"
        ]

    def _delay_of(self, key: str) -> float:
        """Origin ``key``'s delay, as the server keeps it: its Crawl-delay, or the
        crawl's ``--delay``."""
        return self._delays.get(key, self._base_delay)

    def _now(self) -> float:
        assert self._runtime is not None, "used outside a session"
        return self._runtime.clock()

    async def _read_server_clock(self) -> None:
        """Set the runtime's wall-clock offset to the server's clock, read once as the
        session opens: every process of the crawl then sends the scripts its engine's
        clock on the server's scale (see lua/prelude.lua), whatever its machine's clock
        says. The reading is taken halfway through the round trip that brought it."""
        assert self._runtime is not None
        read_clock = self._client.register_script(CLOCK)
        await read_clock(keys=[], args=[])  # loaded before the round trip that counts
        before = self._runtime.clock()
        seconds, microseconds = await read_clock(keys=[], args=[])
        after = self._runtime.clock()
        offset = int(seconds) + int(microseconds) / 1e6 - (before + after) / 2
        self._runtime = dataclasses.replace(self._runtime, wall_offset=offset)

    def _server_clock(self) -> str:
        """Now, on the server's clock, as a script's clock argument."""
        assert self._runtime is not None
        return repr(self._runtime.wall_time(self._now()))

    def _wake_dispatcher(self) -> None:
        if self._runtime is not None:
            self._runtime.wake()

    # -- the session: connect, create or join, listen, renew, give back ----------------------

    @asynccontextmanager
    async def session(self, runtime: StoreRuntime) -> AsyncIterator[None]:
        """Join the shared crawl for the length of a ``crawl()``.

        Raises:
            ClusterError: No server answers, or it holds another crawl under this name.
        """
        self._runtime = runtime
        self._scheduling = runtime.scheduling
        on_lost = runtime.on_lost
        self._flushed = anyio.Event()
        self._flushed.set()
        try:
            async with redis_client(self.url) as client:
                self._client = client
                self._step = client.register_script(STEP)
                self._status = client.register_script(STATUS)
                with anyio.fail_after(CONNECT_TIMEOUT + ANSWER_TIMEOUT):
                    await self._read_server_clock()
                await self._join()
                async with anyio.create_task_group() as tasks:
                    await tasks.start(self._listen)
                    tasks.start_soon(self._renew, on_lost)
                    try:
                        yield
                    finally:
                        with anyio.CancelScope(shield=True), anyio.move_on_after(self.lease):
                            await self._give_back_all(on_lost)
                            await self._read_counts()
                        tasks.cancel_scope.cancel()
        except BaseException as exc:
            refused = None if self._joined else refusal(exc, self.where)
            if refused is None:
                raise
            raise refused from None
        finally:
            self._closed = True

    async def _join(self) -> None:
        config = self.config
        roots = json.dumps(list(config.roots), separators=(",", ":"))
        options = {
            name: value
            for name, value in config.keywords().items()
            if name not in ("frontier", "crawl_id", "lease", "state", "recrawl")
        }
        args = [
            self.prefix,
            self._server_clock(),
            roots if config.roots else "[]",
            json.dumps(options, sort_keys=True),
            "1" if config.obey_robots else "0",
            repr(float(config.delay)),
            "" if config.max_per_host is None else str(config.max_per_host),
            str(config.max_redirect),
        ]
        for root in config.roots:
            args += [root, origin_of(root)]
        try:
            with anyio.fail_after(CONNECT_TIMEOUT + ANSWER_TIMEOUT):
                answer = await self._client.register_script(CREATE)(
                    keys=[self.prefix + "meta"], args=args
                )
        except BaseException as exc:
            refused = refusal(exc, self.where)
            if refused is None:
                raise
            raise refused from None
        if not isinstance(answer, list) or len(answer) != 3:
            raise ClusterError(f"{self.where} answered nonsense to joining the crawl")
        outcome, stored, counts = answer
        if outcome == "mismatch":
            raise ClusterError(
                f"crawl {self.crawl_id!r} on {self.where} has other roots: {stored}; "
                "give the same ROOTs, none, or another --crawl-id"
            )
        if outcome == "foreign":
            raise ClusterError(
                f"{self.where} holds keys for {self.crawl_id!r} that are not a trio-crawler crawl"
            )
        if outcome == "none":
            raise ClusterError(
                f"{self.where} holds no crawl named {self.crawl_id!r}; give the ROOTs to start one"
            )
        try:
            self.shared = SharedCounts.from_answer(counts)
        except (ValueError, TypeError):
            raise ClusterError(f"{self.where} answered nonsense to joining the crawl") from None
        self._joined = True
        # The crawl's delay is its creator's: a joiner's own --delay is not the server's.
        delay = await self._client.hget(self.prefix + "meta", "delay")
        try:
            self._base_delay = max(0.0, float(delay)) if delay is not None else 0.0
        except ValueError:
            self._base_delay = 0.0
        LOGGER.info(
            "%s crawl %r on %s as %s",
            "started" if outcome == "created" else "joined",
            self.crawl_id,
            self.where,
            self.owner,
        )

    async def _listen(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Wake the dispatcher when work comes, or the crawl is finished."""
        channel = self.prefix + "events"
        async with self._client.pubsub(
            channels=[channel], ignore_subscribe_messages=True
        ) as messages:
            task_status.started()
            try:
                async for message in messages:
                    data = message.get("data") if isinstance(message, dict) else None
                    if data == "finished":
                        self.shared = dataclasses.replace(
                            self.shared, queued=0, leased=0, finished=True
                        )
                    elif isinstance(data, str) and data.startswith("work"):
                        # A lease of this process's, answered after the call that made
                        # the work, already took what there was: that message is stale.
                        number = data.removeprefix("work").strip()
                        if number.isdigit() and int(number) <= self._last_call:
                            continue
                        self._idle_until = None
                    else:
                        continue
                    self._wake_dispatcher()
            except Exception as exc:
                # The calls notice a lost server and stop the crawl; until then an idle
                # process still wakes at least once a lease period.
                LOGGER.warning("shared frontier %s: stopped listening: %s", self.where, reason(exc))

    def queue_renewal(self) -> bool:
        """Have the next call renew every lease this process holds; say whether there
        was any (for the renewing task, and for a caller that drives the clock itself)."""
        held = list(self._held)
        if not held or self.lost is not None:
            return False
        self._ops.append({"k": "renew", "u": held})
        return True

    async def _renew(self, on_lost: Callable[[FrontierLost], None]) -> None:
        """Renew this process's leases every third of a lease."""
        while True:
            await anyio.sleep(self.lease / 3)
            if self.queue_renewal():
                try:
                    await self.sync()
                except FrontierLost as exc:
                    on_lost(exc)
                    return

    async def _read_counts(self) -> None:
        """Read the shared counts as this process leaves, for its report (``Todo:`` and
        the shared totals): the last answer may be older than other processes' work."""
        if self.lost is not None:
            self.counts_stale = True  # the last answer before the server was lost
            return
        failures: tuple[type[BaseException], ...] = (*lost_errors(), ValueError, TypeError)
        try:
            answer = await self._status(
                keys=[self.prefix + "meta"], args=[self.prefix, self._server_clock()]
            )
            self.shared = SharedCounts.from_answer(answer)
        except failures as exc:
            self.counts_stale = True
            LOGGER.warning("shared frontier %s: no final counts: %s", self.where, reason(exc))

    async def _give_back_all(self, on_lost: Callable[[FrontierLost], None]) -> None:
        """On the way out: send what waits, and give back every lease still held."""
        for key in list(self._robots_tickets):
            self._ops.append({"k": "rback", "o": key})
            self._held.pop("r " + key, None)
        self._robots_tickets.clear()
        for member, request in list(self._held.items()):
            if member.startswith("r "):
                self._ops.append({"k": "rback", "o": member[2:]})
            elif request is not None:
                self._ops.append({"k": "back", "u": request.url, "e": entry_of(request)})
        self._held.clear()
        if self.lost is not None:
            return
        try:
            self._scheduling = lambda: False
            await self.sync()
        except FrontierLost as exc:
            on_lost(exc)

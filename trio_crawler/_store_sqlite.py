"""The SQLite store (``--state FILE``): a crawl kept in its state file, a window in memory.

Theory of operation
-------------------
The seen set and the queue are the file's (:class:`~trio_crawler._statefile.StateFile`);
this store keeps only a *window* of the queue in memory, in an
:class:`~trio_crawler._scheduler.OriginScheduler` (per-origin queues, robots.txt state,
politeness clocks, restored from the file on resume), beside the requests in flight. So
memory does not grow with the frontier: a million queued URLs cost rows in the file, not
objects in RAM.

What is committed when. Every change the core makes arrives through the core's seam: a
:class:`~trio_crawler._frontier.Completion` (a URL done: its record, its links, what a
recrawl needs of it) or a small note (an origin's robots.txt, a ``Retry-After`` wait, a URL
robots.txt turned away). They collect in a :class:`~trio_crawler._statefile.Batch`, and
one transaction writes a batch. While one transaction runs in a worker thread (the
runtime's ``run_in_thread``), the next batch collects, so under load a transaction carries
many URLs and the event loop never waits on the disk. A URL stays in flight, and the crawl
unfinished, until the transaction holding it has committed; only then does the core make
its record and hand it on (``on_record``, the outputs).

What a SIGKILL costs. Nothing marks a URL as handed out, so a URL whose completion had not
committed is still queued in the file, and the next run fetches it again: only attempts in
flight (or finished in the last few milliseconds) are made twice. A worker holds its URL
until its transaction commits (:meth:`StoredFrontier.settle`), so that is at most one URL
per worker.

The store reads no clock: ``now`` comes from the core, and the runtime's clock and
:meth:`~trio_crawler._frontier.StoreRuntime.wall_time` from the shell.
"""

from __future__ import annotations

import functools
import logging
import math
import sqlite3
from collections import Counter
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from ._config import MAX_HOST_DELAY
from ._events import FetchRequest, RobotsRequest
from ._frontier import (
    GROUP_SIZE,
    GROUP_WINDOW,
    Completion,
    Disallowed,
    FrontierLost,
    OutputMode,
    Resumed,
    RobotsState,
    Settled,
    Taken,
)
from ._pace import Pace
from ._report import Listing, url_line
from ._robots import RobotsRules, origin_of
from ._scheduler import OriginScheduler
from ._statefile import Batch, Committed, StateFile
from ._statefile_rows import OriginNote, items_from_text, record_from_line, request_from_row
from ._stats import count_record

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

    from ._config import CrawlConfig
    from ._frontier import StoreRuntime
    from ._output import ArchiveOutput, RecordOutput
    from ._stats import FetchStatistic

LOGGER = logging.getLogger("trio_crawler")

# How often the -o files' positions are stored (seconds of the engine's clock): an older
# position only means that a resume writes more of the file's records again, so they need
# not go with every transaction; the WARC file's do (it is cut back to the position stored).
MARK_INTERVAL = 1.0

# The window: rows loaded into memory when fewer than LOW_WATER are queued there, a
# CHUNK at a time; up to MAX_WINDOW while every URL in memory has to wait (a host's delay,
# --max-per-host) and the file has more. Measured: a chunk of 500 rows loads in about a
# millisecond, and 10 000 queued URLs in memory cost about 1.5 MiB.
LOW_WATER = 256
CHUNK = 500
MAX_WINDOW = 10_000

# Beyond the window. Its rows are the file's first queued ones, in the order found, and in a
# broad crawl they may all be of the hosts read first: one round of links from 2 000 hosts
# is 16 000 URLs, and the hosts whose links lie beyond the window would have nothing to
# fetch until it drained (measured: 1.42 x the delays' bound, against 1.14 with no cap). So
# a host that has run out in memory, and has rows in the file, has its next REACH_ROWS
# loaded out of turn, by its origin's index: up to REACH_ORIGINS hosts a transaction,
# when the window is full and nothing may go. The window then holds up to MAX_WINDOW rows
# and REACH_ROWS more a host: memory grows with the hosts, as the scheduler's own does.
REACH_ROWS = 4
REACH_ORIGINS = 256

# What an origin learnt (its robots.txt, a new pace) waits for the next transaction, or
# this many seconds of the engine's clock, rather than making one of its own: a note lost
# to a kill costs one robots.txt fetched again, or a pace learnt again. At a broad crawl's
# start the robots.txt answers of 500 hosts otherwise made about a hundred transactions of
# three to seven notes each, one after another, while the first requests went out.
# A Retry-After wait does not wait: a restart must not knock sooner than the server asked.
NOTE_INTERVAL = 1.0

# A completion waiting for its transaction, with what to call once it has committed.
_Waiting = tuple[Completion, "Callable[[Completion, Settled], object]"]


def open_state_store(config: CrawlConfig) -> StoredFrontier:
    """Open (or create) the crawl's state file and the store over it.

    A finished crawl is left as it is, unless ``recrawl`` starts its next pass.

    Raises:
        StateFileError: The file cannot be used; nothing in it was changed.
    """
    assert config.state is not None
    # Not kept: the store's own options, and the headers, which say how to crawl (each run
    # gives its own) and may hold credentials, which a state file should not.
    options = {
        name: value
        for name, value in config.keywords().items()
        if name not in ("state", "recrawl", "headers")
    }
    state_file = StateFile(config.state, roots=config.roots, options=options)
    try:
        queued, _ = state_file.counts()
        if config.recrawl and queued == 0:
            state_file.new_pass()
        return StoredFrontier(
            state_file,
            delay=config.delay,
            obey_robots=config.obey_robots,
            max_per_host=config.max_per_host,
            adapt=config.adapt,
        )
    except BaseException:
        state_file.close()
        raise


class StoredFrontier:
    """The store of a crawl kept in a :class:`~trio_crawler._statefile.StateFile`.

    Args:
        state_file: The open file.
        delay, obey_robots, max_per_host: As for
            :class:`~trio_crawler._scheduler.OriginScheduler`.
    """

    output_mode = OutputMode.RECONCILE

    def __init__(
        self,
        state_file: StateFile,
        *,
        delay: float,
        obey_robots: bool,
        max_per_host: int | None,
        adapt: bool = True,
    ) -> None:
        self.file = state_file
        self.scheduler = OriginScheduler(
            delay=delay, obey_robots=obey_robots, max_per_host=max_per_host, adapt=adapt
        )
        self._unloaded, self._known = state_file.counts()
        self._cursor = 0  # the last row id loaded into the window in turn
        # Origins (as the file spells them) whose rows were loaded out of turn, and the last
        # such row of each: the rows in turn up to it are already in memory, or done.
        self._reached: dict[str, int] = {}
        # Origins that ran out in memory and may have rows in the file: at a resume, every
        # origin that has (when the window cannot take them all).
        self._wanting: set[str] = set()
        if self._unloaded > MAX_WINDOW:
            self._wanting.update(state_file.queued_origins())
        self._batch = Batch()
        self._waiting: list[_Waiting] = []
        self._unleased = 0  # completions not in flight (links alone, unfetchable URLs)
        self._flushing = False
        # Made by the first settle() that waits for the flush under way; set when its next
        # transaction has committed, or when it ends.
        self._committed: anyio.Event | None = None
        self._runtime: StoreRuntime | None = None
        # The outputs whose positions each transaction stores, and the last record made.
        self._outputs: list[RecordOutput] = []
        self._warc: ArchiveOutput | None = None
        self._last_record = state_file.last_record  # the last record made, by id
        self._next_marks = -math.inf  # when the -o files' marks are next written
        self._notes_due = -math.inf  # when the batch's origin notes need a transaction
        self._limits_written: dict[str, int] | None = None
        self.lost: str | None = None
        # Retry-After waits the last run kept, as times of day, until a runtime converts
        # them to this run's clock.
        self._restored_waits: dict[str, float] = {}
        # And when their robots.txt was decided, also as times of day.
        self._restored_robots: dict[str, float] = {}
        self._restore_origins()
        # A crawl the file held already: see _resume_on_this_clock().
        self._resuming = self._known > 0

    # -- counts: the file's queue, the window's flights -----------------------------------

    @property
    def queued(self) -> int:
        """URLs waiting: in the window, and in the file beyond it."""
        return self.scheduler.queued + self._unloaded

    @property
    def held_elsewhere(self) -> int:
        """0: no other process works on this crawl."""
        return 0

    @property
    def held_by_none(self) -> tuple[int, float] | None:
        """None: no other process works on this crawl."""
        return None

    @property
    def in_flight(self) -> frozenset[str]:
        return self.scheduler.in_flight

    @property
    def in_flight_count(self) -> int:
        """Requests in flight, and changes waiting for their transaction."""
        return self.scheduler.in_flight_count + self._unleased

    @property
    def seen_count(self) -> int:
        return self._known

    def seen_urls(self) -> set[str]:
        """Every URL the file knows: read from it, so for after the crawl."""
        return self.file.seen()

    # -- the core's side -------------------------------------------------------------------

    def finish(self, completion: Completion, then: Callable[[Completion, Settled], object]) -> None:
        """Keep ``completion`` for the next transaction; ``then`` runs once it committed."""
        if not completion.leased:
            self._unleased += 1
        turns_away = self.scheduler.turns_away
        for offer in completion.offers:
            if offer.queue:
                self._batch.turned_away.update(url for url in offer.urls if turns_away(url))
        self._waiting.append((completion, then))

    # The core's seam (Frontier), mostly handed to the store's OriginScheduler. The three
    # stores and the scheduler repeat the protocol's signatures here, alike on purpose: the
    # protocol in _frontier.py is where each is defined and checked.
    def take(self, *, now: float, start_new: bool) -> Taken | None:
        if self._resuming and self._runtime is not None:
            self._resuming = False
            self._resume_on_this_clock(now, self._runtime.wall_time(now))
        taken = self.scheduler.take(now=now, start_new=start_new)
        if isinstance(taken, Disallowed):
            self._batch.disallowed.append(taken.request.url)
        elif self._unloaded and isinstance(taken, FetchRequest) and not taken.robots:
            key = origin_of(taken.url)
            if not self.scheduler.queued_at(key):
                self._wanting.add(key)  # its last URL in memory
        return taken

    def _resume_on_this_clock(self, now: float, wall_now: float) -> None:
        """What the last run kept as times of day, on this run's clock, at its first take.

        The last run may also have sent any origin a request as it was killed, which
        nothing recorded: each origin waits its delay from now, however fast the restart.
        """
        self.scheduler.hold_every_origin(now)
        for key, wait_until in self._restored_waits.items():  # Retry-After
            self.scheduler.hold_origin(key, not_before=now + max(0.0, wait_until - wall_now))
        self._restored_waits.clear()
        for key, at in self._restored_robots.items():
            self.scheduler.robots_time(key, now - max(0.0, wall_now - at))
        self._restored_robots.clear()

    def next_wakeup(self) -> float | None:
        return self.scheduler.next_wakeup()

    def started(self, request: FetchRequest, *, now: float) -> bool:
        return self.scheduler.started(request, now=now)

    def answered(
        self,
        request: FetchRequest,
        *,
        pushback: bool,
        started: float,
        now: float,
        ended: float | None = None,
    ) -> None:
        if self.scheduler.answered(
            request, pushback=pushback, started=started, now=now, ended=ended
        ):
            self._note_origin(self._origin_key(request))

    @property
    def slowed(self) -> tuple[int, int]:
        return self.scheduler.slowed

    @property
    def paced(self) -> bool:
        return self.scheduler.paced

    def retry(self, request: FetchRequest, *, at_once: bool = False) -> bool:
        return self.scheduler.retry(request, at_once=at_once)

    def retry_later(self, request: FetchRequest, *, not_before: float, now: float) -> None:
        self.scheduler.retry_later(request, not_before=not_before)
        # Kept as a time of day: the engine's clock starts again with the next process.
        runtime = self._runtime
        wait = None if runtime is None else runtime.wall_time(max(not_before, now))
        self._note_origin(self._origin_key(request), wait_until=wait)

    def give_back(self, request: FetchRequest) -> None:
        self.scheduler.give_back(request)

    def held_back(self, request: FetchRequest, *, now: float) -> bool:
        return self.scheduler.held_back(request, now=now)

    def is_leased(self, request: FetchRequest) -> bool:
        return self.scheduler.is_leased(request)

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
        self._note_origin(request.origin)

    # -- the shell's side ------------------------------------------------------------------

    def resumed(self) -> Resumed | None:
        """This pass's record counts and limit counters so far, from the file."""
        return self.file.resumed()

    @asynccontextmanager
    async def session(self, runtime: StoreRuntime) -> AsyncIterator[None]:
        """Take the engine's runtime; the file is already open (and closed by
        :meth:`close`, after the crawl's tasks have ended)."""
        self.use_runtime(runtime)
        yield

    def use_runtime(self, runtime: StoreRuntime) -> None:
        """Use ``runtime``'s clock and worker threads from now on (what :meth:`session`
        does; synchronous, for a caller that drives the store by hand)."""
        self._runtime = runtime

    async def request_sent(self, request: FetchRequest) -> None:
        return

    def attach_output(self, output: RecordOutput) -> None:
        """Cut ``output`` back to what the file says it held, write the records (or, for
        an items file, the items) it missed, and store its position with the transactions
        from now on (see :mod:`trio_crawler._statefile`)."""
        mark = self.file.mark(output.name)
        size, last = mark if mark is not None else (0, 0)
        position = output.position()
        if position < 0:  # stdout or a pipe: this run's records only
            return
        if position < size:
            # Shorter than it was (a power loss lost its tail): write it again whole.
            size, last = 0, 0
        output.truncate(size)
        if output.kind == "items":
            for record_id, text in self.file.items(after=last):
                lines = items_from_text(text)
                if lines is None:  # a row that is no page's items is not copied
                    LOGGER.warning("state file: the items of record %d are damaged", record_id)
                else:
                    output.write_line(lines)
        else:
            for _, line in self.file.records(after=last):
                if record_from_line(line) is not None:  # a row that is no record: not copied
                    output.write_line(str(line))
        self._outputs.append(output)

    def attach_archive(self, archive: ArchiveOutput) -> None:
        """Cut the WARC file back to its size at the last commit, and store its size with
        every transaction from now on."""
        mark = self.file.mark(archive.name)
        archive.cut_back(None if mark is None else mark[0])
        self._warc = archive

    def has_work(self, *, starved: bool) -> bool:
        """Whether :meth:`flush` would do anything now: changes wait, or the window should
        grow. False while a flush runs (it takes what arrives meanwhile)."""
        if self._flushing or self.lost is not None:
            return False
        return (
            bool(self._waiting)
            or self._batch_due(starved=starved)
            or self._wants_rows(starved=starved) > 0
            or self._reach_due(starved=starved)
        )

    def _batch_due(self, *, starved: bool) -> bool:
        """Whether the changes waiting outside completions need a transaction now.

        Origin notes alone wait for company, up to :data:`NOTE_INTERVAL`, and then for a
        worker to write them: a ``starved`` dispatcher, to which writing them gives nothing
        to hand out, is not held by them (it would miss the hosts coming due meanwhile).
        A Retry-After wait is written at once, by either.
        """
        batch = self._batch
        if batch.beyond_notes():
            return True
        if not batch.origins:
            return False
        runtime = self._runtime
        if runtime is None or self._notes_due == -math.inf:
            return True
        return not starved and runtime.clock() >= self._notes_due

    def records(self) -> Iterator[FetchStatistic]:
        """This pass's records, read from the file one at a time; a row that is not one is
        logged and skipped (the file is checked as SQLite when opened, not row by row).

        A file that can no longer be read (removed since, a disk error) ends them with one
        error logged: they are read for the report, after the crawl, which is no place for
        a traceback.
        """
        try:
            for record_id, line in self.file.records():
                record = record_from_line(line)
                if record is None:
                    LOGGER.warning("state file: record %d is not a record; skipped", record_id)
                else:
                    yield record
        except sqlite3.Error as exc:
            LOGGER.error("cannot read the records in the state file %s: %s", self.file.path, exc)

    def listing(self) -> Listing:
        """This pass's report lines, as the file keeps them, in URL order; a record the
        file has no line for is read from its JSON (one that is not a record is logged and
        skipped, as by :meth:`records`). The counters are the file's sum of the lines',
        read after them, plus those of the records read from JSON."""
        counters: Counter[str] = Counter()
        return Listing(self._listed_lines(counters), counters)

    def _listed_lines(self, counters: Counter[str]) -> Iterator[str]:
        try:
            for record_id, line, text in self.file.listing():
                if line is not None:
                    yield line
                    continue
                record = record_from_line(text)
                if record is None:
                    LOGGER.warning("state file: record %d is not a record; skipped", record_id)
                else:
                    count_record(counters, record)
                    yield url_line(record)
            counters.update(self.file.listed_counts())
        except sqlite3.Error as exc:
            LOGGER.error("cannot read the records in the state file %s: %s", self.file.path, exc)

    def report_notes(self) -> list[str]:
        return []

    def close(self) -> None:
        """Commit what still waits, store how far the outputs got, and close the file.

        Blocks briefly: it runs once, after the crawl's tasks have ended. A crawl cut short
        (its deadline, a second Ctrl-C) may leave pages fetched whose transaction had not
        run yet; they are committed here, records and links, rather than fetched again by
        the next run.
        """
        if self.file.closed:
            return
        try:
            if self.lost is None:
                self.commit_waiting(load=False)
                self.file.commit(self._final_batch())
        except sqlite3.Error as exc:
            LOGGER.error("cannot write the state file %s: %s", self.file.path, exc)
        finally:
            self.file.close()

    def _final_batch(self) -> Batch:
        final = Batch(marks=self._current_marks())
        if self._runtime is not None:
            final.limit_counts = dict(self._runtime.limit_counts())
        return final

    # -- transactions --------------------------------------------------------------------

    def commit_waiting(self, *, load: bool = True) -> None:
        """Commit what waits in one transaction, here and now, blocking: for :meth:`close`,
        and for a caller that drives the store by hand (the tests' scenario table)."""
        while (
            self._waiting
            or self._batch
            or (load and (self._wants_rows(starved=True) or self._reach_due(starved=True)))
        ):
            batch, waiting = self._next_batch(starved=load)
            if not load:
                batch.load = 0
            self._after_commit(batch, waiting, self._transaction(batch, self._cursor))

    async def settle(self, request: FetchRequest) -> None:
        """Return once the completion of ``request`` has committed and its record is made:
        flushing, or waiting for the flush under way.

        A worker that waits is woken after each transaction of that flush, not only at its
        end: while pages keep finishing, as in a broad crawl's round of hosts, a flush runs
        one transaction after another, and workers held until it ended were missing from
        the next round of hosts, though their pages had committed long before.

        Raises:
            FrontierLost: The file could not be written; the crawl must stop.
        """
        while self.scheduler.holds(request.url) and self.lost is None:
            if self._flushing:
                if self._committed is None:
                    self._committed = anyio.Event()
                await self._committed.wait()
            else:
                await self._flush(starved=False, group=GROUP_WINDOW)

    async def flush(self, *, starved: bool = False) -> None:
        """Commit what waits, in as few transactions as the load allows, off the loop.

        One flush runs at a time; changes that arrive meanwhile join the next transaction
        of the same flush.

        Raises:
            FrontierLost: The file could not be written; the crawl must stop.
        """
        await self._flush(starved=starved, group=0.0)

    async def _flush(self, *, starved: bool, group: float) -> None:
        """:meth:`flush`; with ``group`` seconds, a transaction waits that long first for
        more changes to join it (see GROUP_WINDOW), unless enough already wait or the
        dispatcher is ``starved`` for requests."""
        if self._flushing or self.lost is not None:
            return
        assert self._runtime is not None, "flush() outside a session"
        run = self._runtime.run_in_thread
        self._flushing = True
        try:
            while (
                self._waiting
                or self._batch
                or self._wants_rows(starved=starved)
                or self._reach_due(starved=starved)
            ):
                if group and not starved and len(self._waiting) < GROUP_SIZE:
                    await anyio.sleep(group)  # let the pages finishing now join
                batch, waiting = self._next_batch(starved=starved)
                transaction = functools.partial(self._transaction, batch, self._cursor)
                try:
                    committed: Committed = await run(transaction)
                except sqlite3.Error as exc:
                    self.lost = f"cannot write the state file {self.file.path}: {exc}"
                    raise FrontierLost(self.lost) from exc
                self._after_commit(batch, waiting, committed)
                self._wake_settled()
                starved = False
        finally:
            self._flushing = False
            self._wake_settled()

    def _wake_settled(self) -> None:
        """Wake the settle() calls that wait: theirs may be among the URLs just committed."""
        committed, self._committed = self._committed, None
        if committed is not None:
            committed.set()

    def _transaction(self, batch: Batch, cursor: int) -> Committed:
        """One transaction, and the window's next rows after it (blocking)."""
        committed = self.file.commit(batch)
        if batch.load:
            committed.loaded = self.file.load(cursor, batch.load)
        if batch.reach:
            committed.reached = self.file.reach(batch.reach, REACH_ROWS)
        return committed

    def _wants_rows(self, *, starved: bool) -> int:
        in_window = self.scheduler.queued
        if not self._unloaded:
            return 0
        if in_window < LOW_WATER or (starved and in_window < MAX_WINDOW):
            return min(CHUNK, self._unloaded)
        return 0

    def _reach_due(self, *, starved: bool) -> bool:
        """Whether hosts that ran out in memory should have their next rows loaded out of
        turn: the window is full, nothing may go, and the file has more."""
        return (
            starved
            and bool(self._wanting)
            and self._unloaded > 0
            and self.scheduler.queued >= MAX_WINDOW
        )

    def _origins_to_reach(self) -> list[tuple[str, int]]:
        """Up to REACH_ORIGINS wanting origins that still have nothing in memory, each with
        the row after which its next ones lie."""
        reach: list[tuple[str, int]] = []
        queued_at = self.scheduler.queued_at
        while self._wanting and len(reach) < REACH_ORIGINS:
            key = self._wanting.pop()
            if not queued_at(key):
                reach.append((key, max(self._cursor, self._reached.get(key, 0))))
        return reach

    def _next_batch(self, *, starved: bool) -> tuple[Batch, list[_Waiting]]:
        """What the next transaction writes: the batch, and the completions it carries
        with their callbacks."""
        batch, self._batch = self._batch, Batch()
        waiting, self._waiting = self._waiting, []
        batch.completions = [completion for completion, _ in waiting]
        batch.load = self._wants_rows(starved=starved)
        if not batch.load and self._reach_due(starved=starved):
            batch.reach = self._origins_to_reach()
        clock = self._runtime.clock() if self._runtime is not None else None
        outputs_due = clock is None or clock >= self._next_marks
        batch.marks = self._current_marks(outputs=outputs_due)
        if outputs_due and clock is not None:
            self._next_marks = clock + MARK_INTERVAL
        if self._runtime is not None:
            limits = self._runtime.limit_counts()
            if limits != self._limits_written:
                batch.limit_counts = self._limits_written = dict(limits)
        return batch, waiting

    def _after_commit(self, batch: Batch, waiting: list[_Waiting], committed: Committed) -> None:
        """After a transaction committed: its URLs leave the in-flight set, and the core
        makes their records (and passes them to the outputs); the rows it loaded join the
        window."""
        self._unloaded += committed.new_rows
        self._known += committed.new_rows + len(committed.turned_away)
        for url in committed.turned_away:
            LOGGER.info("robots.txt disallows %s", url)
        records = iter(committed.records)
        for (completion, then), settled in zip(waiting, committed.settled, strict=True):
            if completion.leased:
                assert completion.request is not None
                self.scheduler.complete(completion.request)
            else:
                self._unleased -= 1
            if completion.record is not None:
                self._last_record, _ = next(records)
            then(completion, settled)
        self._window(committed.loaded)
        self._window_reached(committed.reached)
        if self._unloaded:
            queued_at = self.scheduler.queued_at
            self._wanting.update(key for key in committed.new_origins if not queued_at(key))
        if len(committed.loaded) < batch.load and self._unloaded:
            # The file has no more queued rows than it gave: the count had drifted from it
            # (a hand-edited file, or a bug). The file is the truth, and the count says
            # when the crawl is over, so it follows the file rather than asking for ever.
            LOGGER.warning("state file: %d queued rows were not there", self._unloaded)
            self._unloaded = 0

    def _current_marks(self, *, outputs: bool = True) -> list[tuple[str, int, int]]:
        """How far the outputs have got: the WARC file always (a resume cuts it back to
        the size stored, so the size must be the last commit's), the ``-o`` files when
        ``outputs`` (a resume writes the records after the stored one again from the file,
        so an older mark only means more of them)."""
        marks = []
        if outputs:
            last = self._last_record
            marks = [(output.name, output.position(), last) for output in self._outputs]
        if self._warc is not None:
            marks.append((self._warc.name, self._warc.position(), 0))
        return marks

    def _window(self, rows: list[tuple[Any, ...]]) -> None:
        """Queue rows loaded from the file in turn, in their order, but for those loaded
        out of turn already."""
        reached = self._reached
        for row in rows:
            self._cursor = row[0]
            if reached and row[0] <= reached.get(row[11], 0):
                continue
            self._queue_row(row)
        if reached and rows:
            for key in [key for key, last in reached.items() if last <= self._cursor]:
                del reached[key]

    def _window_reached(self, rows: list[tuple[Any, ...]]) -> None:
        """Queue rows loaded out of turn (:meth:`_origins_to_reach`), in their order."""
        reached = self._reached
        for row in rows:
            key = row[11]
            if row[0] <= max(self._cursor, reached.get(key, 0)):
                continue  # in memory already (no transaction came between: never)
            reached[key] = row[0]
            self._queue_row(row)

    def _queue_row(self, row: tuple[Any, ...]) -> None:
        """Queue one row in memory. A row that does not hold what this layout writes (a
        damaged or edited file) is logged and skipped."""
        self._unloaded -= 1
        request = request_from_row(row)
        if request is None:
            LOGGER.warning("state file: URL row %s is damaged; skipped", row[0])
            self._batch.damaged.append(row[0])
            return
        self.scheduler.enqueue_one(request, first=bool(row[5]))

    # -- origins ---------------------------------------------------------------------------

    @staticmethod
    def _origin_key(request: FetchRequest) -> str:
        return request.origin if isinstance(request, RobotsRequest) else origin_of(request.url)

    def _note_origin(self, key: str, wait_until: float | None = None) -> None:
        state = self.scheduler.origin_state(key)
        runtime = self._runtime
        at = self.scheduler.robots_time(key)
        pace = self.scheduler.pace_of(key)
        if wait_until is not None or runtime is None:
            self._notes_due = -math.inf
        elif not self._batch.origins:
            self._notes_due = runtime.clock() + NOTE_INTERVAL
        self._batch.origins.append(
            OriginNote(
                key,
                state.robots.value,
                None if state.rules is None else state.rules.as_text(),
                state.failure,
                _own_delay(state.rules),
                wait_until,
                None if at is None or runtime is None else runtime.wall_time(at),
                None if pace is None or not pace.slowed else pace.kept(),
            )
        )

    def _restore_origins(self) -> None:
        """The origins the file kept, with this run's ``--delay`` as the floor of their
        delays (it is each run's own): only the origin's own ``Crawl-delay`` carries over.

        That delay is read from the rules kept, not from the ``delay`` column, which files
        written before held the delay in force, the run's ``--delay`` included.
        """
        for note in self.file.origins():
            if note.wait_until is not None:
                self._restored_waits[note.origin] = note.wait_until
            if isinstance(note.robots_at, float):
                self._restored_robots[note.origin] = note.robots_at
            try:
                state = RobotsState(note.robots)
            except ValueError:
                LOGGER.warning("state file: unknown robots state for %s; asking again", note.origin)
                continue
            if state is RobotsState.KNOWN and note.rules is not None:
                rules = RobotsRules.from_text(note.rules)
                self.scheduler.restore_origin(
                    note.origin, rules=rules, failure=None, delay=_own_delay(rules)
                )
            elif state is RobotsState.FAILED:
                self.scheduler.restore_origin(
                    note.origin,
                    rules=None,
                    failure=note.failure or "robots.txt failed",
                    delay=None,
                )
            else:
                continue
            kept = Pace.read_kept(note.pace)
            if kept is not None:
                self.scheduler.restore_pace(note.origin, *kept)


def _own_delay(rules: RobotsRules | None) -> float | None:
    """The delay an origin asks for itself (its ``Crawl-delay``, capped as the core caps
    it), apart from any run's ``--delay``; None when it asks for none."""
    delay = None if rules is None else rules.crawl_delay
    return None if delay is None else min(delay, MAX_HOST_DELAY)

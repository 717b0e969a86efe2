"""A process's session with the server of a shared crawl (``--frontier``).

:class:`~trio_crawler._store_redis.RedisFrontier` is the window of the crawl a process
works on: what it holds, and the operations it has still to send. Everything it says to
the server goes through one :class:`ClusterSession`, which owns

* the connection: the client (:mod:`trio_crawler._redis`), and the one-line refusal of a
  server that cannot be used before the crawl is joined;
* the clock: the server's, read once as the session opens, so that every process of a
  crawl sends the scripts its engine's clock on the server's scale (lua/prelude.lua);
* joining: the call to ``create.lua`` that creates the crawl or joins it, and what its
  answer says;
* the step calls, each retried with backoff while the server is away, for up to a lease
  (one warning when it goes, one when it is back), after which the session is *lost*;
* the reads outside the scripts: an origin's robots.txt state (retried as a step call
  is), the counts as the process leaves;
* the session's tasks: listening on the crawl's channel for ``work``, ``finished`` and
  ``hold`` (and subscribing again when its connection is lost), and
  renewing the window's leases every third of a lease; and on the way out, having the
  window give back what it holds, then reading the final counts.

It knows nothing of requests, leases or completions: it asks the window, through the
:class:`Window` interface, for what to renew and what to give back, and tells it what it
heard.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import logging
import math
import os
import secrets
import socket
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from ._cluster import (
    CONNECT_TIMEOUT,
    LOST_ERRORS,
    ClusterError,
    SharedCounts,
    keep_shared_options,
    older_layout,
    prefix_of,
    reason,
    redis_client,
    refusal,
    where_of,
)
from ._cluster_scripts import CLOCK_SCRIPT, CREATE_SCRIPT, STATUS_SCRIPT, STEP_SCRIPT
from ._config import roots_in_brief
from ._frontier import FrontierLost
from ._option_checks import redacted
from ._redis import Redis, RedisError, subscribe
from ._robots import origin_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from ._cluster_ops import Operation
    from ._config import CrawlConfig
    from ._frontier import StoreRuntime

LOGGER = logging.getLogger("trio_crawler")

_T = TypeVar("_T")

# The options a process does not send to the server: where the crawl is, the durable
# stores' own (none of them says what to crawl), and the headers, which say how to crawl
# and may hold credentials that other processes' operators should not read.
_NOT_STORED = ("frontier", "crawl_id", "lease", "state", "recrawl", "headers")


@dataclass(frozen=True, slots=True)
class Joined:
    """What the server answered to joining (or creating) the crawl.

    Attributes:
        created: This process created the crawl.
        counts: The shared counts as it joined.
        delay: The crawl's ``--delay``, as its creator set it on the server.
    """

    created: bool
    counts: SharedCounts
    delay: float


class Listener(Protocol):
    """What the crawl's channel tells the window (:meth:`ClusterSession.listen`)."""

    def wake(self) -> None:
        """Something the server said may let the window do more: look again."""

    def hold(self, origin: str, until: float) -> None:
        """Another process read a ``Retry-After`` (or backs off) for ``origin``: start
        nothing of it before ``until`` (on the engine's clock), what is leased included."""


class Window(Listener, Protocol):
    """What a session asks of the window it serves (a
    :class:`~trio_crawler._store_redis.RedisFrontier`)."""

    # The crawl's options: its roots and options, to create the crawl or join it.
    config: CrawlConfig

    async def renew(self) -> None:
        """Renew every lease the window holds (a step call).

        Raises:
            FrontierLost: The server is lost.
        """

    async def leave(self) -> None:
        """Send what waits, and give back every lease still held.

        Raises:
            FrontierLost: The server is lost.
        """


# How long before work comes an idle process calls for it, with one request at a time to a
# host (--max-per-host 1): the work whose time comes within this is leased ahead (step.lua's
# lease), and its requests start on the process's own clock, not late by a wake-up and a
# round trip. In a broad crawl, every origin that moves to another process moves so.
EARLY = 0.05


def early_wait(wait: float, early: float) -> float:
    """The wait for work due in ``wait`` seconds of a process that calls ``early``: that much
    less when the work is further off; else all of it (the call just made found the work
    due sooner than that not to be leased ahead, so another call before it is due would
    find the same, and one after each other's answer would spin)."""
    return wait - early if wait > early else wait


# Readings of the server's clock a process takes as it joins, keeping the one with the
# shortest round trip (see ClusterSession._read_server_clock): a few milliseconds in all.
CLOCK_READINGS = 5


def _ready_time(text: str) -> float | None:
    """The server time a message gives (the T of ``work N T`` or ``hold T ...``); None for
    none, or a T that is no time: ``work`` then means work is ready now, as ``work N``
    does, and ``hold`` holds nothing."""
    try:
        ready = float(text) if text else None
    except ValueError:
        return None
    return ready if ready is not None and math.isfinite(ready) else None


class ClusterSession:
    """The session of one process with one shared crawl (see the module docstring).

    Args:
        config: The crawl's options; ``frontier``, ``crawl_id`` and ``lease`` say where
            and for how long a call is retried.
    """

    def __init__(self, config: CrawlConfig) -> None:
        assert config.frontier is not None
        self.url = config.frontier
        self.where = redacted(config.frontier)
        self.crawl_id = config.crawl_id
        self.lease = config.lease
        self.prefix = prefix_of(config.crawl_id)
        # The name this process's leases are held under on the server.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        # Why the server can no longer be used, once it cannot; then every call refuses.
        self.lost: str | None = None
        self.joined = False
        self._client: Redis | None = None
        self._runtime: StoreRuntime | None = None
        # When the server stopped answering (on the engine's clock), while calls retry.
        self._away_since: float | None = None
        # The server's word: the shared counts its last answer (or message) gave, and
        # whether they are older than the end of this process's part (its report says).
        self.shared = SharedCounts(1, 0, 0, 0, False, 0)  # unknown until the crawl is joined
        self.counts_stale = False
        # The crawl's --delay, as its creator set it on the server.
        self.base_delay = config.delay
        # When to ask for work again after a lease that found none (on the engine's clock;
        # None: now; inf: once something changes), and the number of the last step call
        # answered that asked for a lease, which makes older "work" messages stale.
        self.idle_until: float | None = None
        self.last_call = 0
        # How long before then it calls (EARLY), where the crawl leases ahead.
        self.early = EARLY if config.max_per_host == 1 else 0.0
        # The engine's clock as the last step call sent it: the time its answer's
        # relative times (a lease ahead's wait) count from.
        self.sent_at = 0.0
        # With --max-pages, the crawl's budget as the last answer said: whether it is
        # spent, and how many URLs it counted are not done (here or elsewhere).
        self.budget: tuple[bool, int] | None = None
        # Leases of processes that stopped renewing them, as the last lease that found
        # nothing said: how many, and when the last comes back (on the engine's clock).
        self.stranded: tuple[int, float] | None = None

    @property
    def is_open(self) -> bool:
        """Whether :meth:`connect` has a client (calls may be made)."""
        return self._client is not None

    @property
    def client(self) -> Redis:
        """The session's client, while it is connected."""
        assert self._client is not None, "used outside a session"
        return self._client

    @property
    def runtime(self) -> StoreRuntime:
        """The session's runtime, its wall-clock offset the server's."""
        assert self._runtime is not None, "used outside a session"
        return self._runtime

    def lose(self, why: str) -> FrontierLost:
        """Mark the link lost for ``why``: the exception to raise (every later call is
        refused)."""
        self.lost = why
        return FrontierLost(why)

    def note(self) -> str:
        """The report's line for where the whole shared crawl is (each process reports
        its own records)."""
        shared = self.shared
        return (
            f"Shared crawl {self.crawl_id}: {shared.done} done, "
            f"{shared.failed} failed, {shared.queued} queued, {shared.leased} leased"
            f"{', finished' if shared.finished else ''}"
            f"{' (last known)' if self.counts_stale else ''}"
        )

    # -- the session ---------------------------------------------------------------------

    @asynccontextmanager
    async def open(self, runtime: StoreRuntime, window: Window) -> AsyncIterator[None]:
        """Connect, join the crawl ``window.config`` names (or create it), listen and
        renew for ``window``; on exit, have it give back what it holds and read the final
        counts (shielded, for up to a lease), then leave.

        Raises:
            ClusterError: No server answers, or it holds another crawl under this name.
        """
        async with self.connect(runtime):
            joined = await self.join(window.config)
            self.shared, self.base_delay = joined.counts, joined.delay
            async with anyio.create_task_group() as tasks:
                await tasks.start(self.listen, window)
                tasks.start_soon(self._renew, window, runtime.on_lost)
                try:
                    yield
                finally:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(self.lease):
                        try:
                            await window.leave()
                        except FrontierLost as exc:
                            runtime.on_lost(exc)
                        # For the report (Todo: and the shared totals): the last answer
                        # may be older than other processes' work.
                        counts = await self.read_counts()
                        if counts is None:
                            self.counts_stale = True
                        else:
                            self.shared = counts
                    tasks.cancel_scope.cancel()

    async def _renew(self, window: Window, on_lost: Callable[[FrontierLost], None]) -> None:
        """Have the window renew its leases every third of a lease."""
        while True:
            await anyio.sleep(self.lease / 3)
            try:
                await window.renew()
            except FrontierLost as exc:
                on_lost(exc)
                return

    # -- the connection and the clock --------------------------------------------------------

    @asynccontextmanager
    async def connect(self, runtime: StoreRuntime) -> AsyncIterator[None]:
        """Connect, and read the server's clock; leave on exit.

        Raises:
            ClusterError: Before the crawl is joined, a server that cannot be used
                (unreachable, refusing the credentials, no such database).
        """
        self._runtime = runtime
        try:
            async with redis_client(self.url) as client:
                self._client = client
                with anyio.fail_after(CONNECT_TIMEOUT + client.answer_timeout):
                    await self._read_server_clock()
                yield
        except BaseException as exc:
            refused = None if self.joined else refusal(exc, self.where)
            if refused is None:
                raise
            raise refused from None
        finally:
            self._client = None

    async def _read_server_clock(self) -> None:
        """Set the runtime's wall-clock offset to the server's clock, read once as the
        session opens: every process of the crawl then sends the scripts its engine's
        clock on the server's scale (see lua/prelude.lua), whatever its machine's clock
        says.

        A reading is taken halfway through the round trip that brought it, so it is off
        by at most half that trip; of CLOCK_READINGS readings the one with the shortest
        trip is kept, as NTP does, so that a stall of the event loop while a process starts
        (seen: a tenth of a second on a loaded machine) does not skew its clock against
        the other processes' and bring two requests to one host closer than the delay."""
        runtime, client = self.runtime, self.client
        await client.run_script(CLOCK_SCRIPT, [], [])  # loaded before the round trips that count
        best: tuple[float, float] | None = None  # (round trip, offset)
        for _ in range(CLOCK_READINGS):
            before = runtime.clock()
            seconds, microseconds = await client.run_script(CLOCK_SCRIPT, [], [])
            after = runtime.clock()
            offset = int(seconds) + int(microseconds) / 1e6 - (before + after) / 2
            if best is None or after - before < best[0]:
                best = (after - before, offset)
        assert best is not None
        self._runtime = dataclasses.replace(runtime, wall_offset=best[1])

    def now(self) -> float:
        """The engine's clock."""
        return self.runtime.clock()

    def server_clock(self, at: float | None = None) -> str:
        """The engine's time ``at`` (default: now) on the server's clock, as a script's
        clock argument."""
        runtime = self.runtime
        return repr(runtime.wall_time(runtime.clock() if at is None else at))

    # -- joining -----------------------------------------------------------------------------

    async def join(self, config: CrawlConfig) -> Joined:
        """Create the crawl from ``config`` (its roots and options), or join it.

        Raises:
            ClusterError: The server holds another crawl by this name (other roots, or
                keys that are no crawl), or none and no roots are given to start one.
            OptionChanged: The crawl exists, with other values of an option that says
                what to crawl, or of ``delay`` or ``max_per_host``.
        """
        roots = json.dumps(list(config.roots), separators=(",", ":")) if config.roots else ""
        options = {
            name: value for name, value in config.keywords().items() if name not in _NOT_STORED
        }
        digest = roots and hashlib.sha1(roots.encode(), usedforsecurity=False).hexdigest()
        settings = [
            json.dumps(options, sort_keys=True),
            "1" if config.obey_robots else "0",
            repr(float(config.delay)),
            "" if config.max_per_host is None else str(config.max_per_host),
            str(config.max_redirect),
        ]
        # The roots go only to create the crawl: a process that joins one (as most do,
        # and each joiner of a crawl of 100 000 roots sent 2.8 MB and had them sent back,
        # which held the server 28 ms from the other processes' calls) sends their digest.
        answer = await self._create([self.prefix, self.server_clock(), digest, *settings, ""])
        if answer[0] == "absent":
            args = [self.prefix, self.server_clock(), digest, *settings, roots]
            for root in config.roots:
                args += [root, origin_of(root)]
            answer = await self._create(args)
        outcome, stored, counts, stored_options = answer
        if outcome == "mismatch":
            try:
                listed = roots_in_brief(json.loads(stored))
            except (TypeError, ValueError):
                listed = str(stored)[:300]
            raise ClusterError(
                f"crawl {self.crawl_id!r} on {self.where} has other roots: {listed}; "
                "give the same ROOTs, none, or another --crawl-id"
            )
        if outcome == "foreign":
            raise older_layout(self.where, self.crawl_id, stored) or ClusterError(
                f"{self.where} holds keys for {self.crawl_id!r} that are not a trio-crawler crawl"
            )
        if outcome == "none":
            raise ClusterError(
                f"{self.where} holds no crawl named {self.crawl_id!r}; give the ROOTs to start one"
            )
        try:
            shared = SharedCounts.from_answer(counts)
            kept = json.loads(stored_options) if stored_options else {}
            if not isinstance(kept, dict):
                raise TypeError(f"options that are not: {stored_options!r:.80}")
        except (ValueError, TypeError):
            raise ClusterError(f"{self.where} answered nonsense to joining the crawl") from None
        if outcome == "joined":
            # The command line took the crawl's options for those left out; here, as the
            # crawl is joined, one that raced the creator (or a Crawler given other
            # values) is refused before its first request.
            keep_shared_options(options, kept, where=where_of(self.url, self.crawl_id))
        self.joined = True
        # The crawl's delay is its creator's: a joiner's own --delay is not the server's.
        delay = await self.client.hget(self.prefix + "meta", "delay")
        try:
            seconds = max(0.0, float(delay)) if delay is not None else 0.0
        except ValueError:
            seconds = 0.0
        LOGGER.info(
            "%s crawl %r on %s as %s",
            "started" if outcome == "created" else "joined",
            self.crawl_id,
            self.where,
            self.owner,
        )
        return Joined(created=outcome == "created", counts=shared, delay=seconds)

    async def _create(self, args: list[str]) -> list[Any]:
        """One call to ``create.lua`` with ``args``, its answer checked for shape.

        Raises:
            ClusterError: The server could not be reached, refused the call, or answered
                nonsense.
        """
        try:
            client = self.client
            with anyio.fail_after(CONNECT_TIMEOUT + client.answer_timeout):
                answer = await client.run_script(CREATE_SCRIPT, [self.prefix + "meta"], args)
        except BaseException as exc:
            refused = refusal(exc, self.where)
            if refused is None:
                raise
            raise refused from None
        if not isinstance(answer, list) or len(answer) != 4:
            raise ClusterError(f"{self.where} answered nonsense to joining the crawl")
        return answer

    # -- calls -------------------------------------------------------------------------------

    async def call(self, ops: list[Operation]) -> dict[str, Any]:
        """One step call with the operations ``ops``, retried with backoff while
        the server is away, for up to ``lease`` seconds (after that, other processes may
        hold this one's leases anyway).

        Returns:
            The answer: its ``r`` answers each of ``ops``; its counts are :attr:`shared`.

        Raises:
            FrontierLost: The server was away for that long, refused the call, or
                answered nonsense.
        """
        run = self.runtime.shielded
        payload = json.dumps(ops, separators=(",", ":"))
        keys = [self.prefix + "meta"]

        async def attempt() -> Any:
            self.sent_at = self.now()
            args = [self.prefix, self.server_clock(self.sent_at), self.owner, str(self.lease)]
            return await run(
                functools.partial(self.client.run_script, STEP_SCRIPT, keys, [*args, payload])
            )

        try:
            raw = await self._retrying(attempt)
        except RedisError as exc:  # out of memory, say: the changes were not made
            raise self.lose(
                f"the shared frontier at {self.where} refused a call: {reason(exc)}"
            ) from None
        try:
            answer = json.loads(raw)
            if not isinstance(answer, dict):
                raise ValueError(f"not an answer: {raw!r:.80}")
            self._check_answer(answer, ops)
        except (ValueError, TypeError) as exc:
            raise self.lose(
                f"the shared frontier at {self.where} answered nonsense: {exc}"
            ) from None
        return answer

    async def _retrying(self, attempt: Callable[[], Awaitable[_T]]) -> _T:
        """``attempt()``, tried again with backoff while the server is away, for up to
        ``lease`` seconds: one warning as it goes, one as it comes back.

        Raises:
            FrontierLost: The server was away for that long.
        """
        give_up = self.now() + self.lease
        pause = 0.1
        while True:
            try:
                result = await attempt()
            except LOST_ERRORS as exc:
                if self.now() + pause > give_up:
                    raise self.lose(
                        f"lost the shared frontier at {self.where}: {reason(exc)}"
                    ) from None
                self._note_away(exc, give_up)
                await anyio.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            if self._away_since is not None:
                LOGGER.warning(
                    "shared frontier %s: the server is back after %.1f s",
                    self.where,
                    self.now() - self._away_since,
                )
                self._away_since = None
            return result

    def _check_answer(self, answer: dict[str, Any], ops: list[Operation]) -> None:
        """Take the shared counts from a step call's answer, and check that it answers
        each of ``ops`` (its ``r``).

        Raises:
            FrontierLost: The crawl is gone, or the answer is not one to these operations.
            ValueError: Its counts are not counts.
            RuntimeError: The script refused ``ops``: a bug of this process's.
        """
        if "bad" in answer:  # the script checked our changes and wrote none of them
            raise RuntimeError(
                f"the shared frontier refused change {answer['bad']} of "
                f"{json.dumps(ops)[:300]}: a bug in trio_crawler"
            )
        if answer.get("gone"):
            raise self.lose(f"the crawl {self.crawl_id!r} is gone from {self.where}")
        results = answer.get("r")
        if not isinstance(results, list) or len(results) != len(ops):
            count = len(results) if isinstance(results, list) else 0
            raise self.lose(f"{self.where} answered {count} of {len(ops)} changes")
        try:
            counts = SharedCounts.from_answer(answer.get("c"))
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        # Finished is final (lua/prelude.lua). An answer that says otherwise, read after
        # the message that said the crawl finished, was given before it: the message and
        # the answers come on two connections, in no order between them. Taken as it came,
        # it undid the finish, and the process waited for its next call to learn it again
        # (seen: 30 s, the wait for a stopped process).
        if not (self.shared.finished and not counts.finished):
            self.shared = counts
        if ops and ops[-1]["k"] == "lease":
            self._note_stranded(answer.get("o"))
        budget = answer.get("b")
        if budget is not None:
            if not (isinstance(budget, list) and len(budget) == 2):
                raise ValueError(f"not a budget: {budget!r:.80}")
            self.budget = (budget[0] == 1, int(budget[1]))

    def _note_stranded(self, answer: object) -> None:
        """Keep what a lease's answer says of the leases held by no live process, and say
        so once for each new lot: an idle process may wait for them for up to a lease,
        which without a word looks like a hang (issue #22)."""
        if not (isinstance(answer, list) and len(answer) == 2):
            self.stranded = None
            return
        count, wait = int(answer[0]), float(answer[1])
        back = self.now() + wait
        if self.stranded is None or back > self.stranded[1] + 1.0:
            LOGGER.warning(
                "shared frontier %s: %d URLs are leased by processes that stopped renewing "
                "them (killed, or cut off from the server); they come back by %s",
                self.where,
                count,
                datetime.datetime.fromtimestamp(self.runtime.wall_time(back)).strftime("%H:%M:%S"),
            )
        self.stranded = (count, back)

    def _note_away(self, exc: BaseException, give_up: float) -> None:
        """One line when the server goes away, saying until when; then one when it is
        back, or when the crawl gives up: not one per retry."""
        if self._away_since is not None:
            LOGGER.debug("shared frontier %s: still away: %s", self.where, reason(exc))
            return
        self._away_since = self.now()
        until = datetime.datetime.fromtimestamp(self.runtime.wall_time(give_up))
        LOGGER.warning(
            "shared frontier %s: lost the server (%s); trying again until %s "
            "(--lease %g s), then stopping",
            self.where,
            reason(exc),
            until.strftime("%H:%M:%S"),
            self.lease,
        )

    async def read_origins(self, keys: list[str]) -> list[list[Any]]:
        """The robots.txt state (``rb``, ``rt``, ``rf``) and delay (``dl``) of each origin,
        read in one round trip (the reads are the requests' wait), retried as a step
        call is.

        Raises:
            FrontierLost: The server was away for a lease, or refused the reads.
        """
        client = self.client

        async def read() -> list[Any]:
            fields = ("rb", "rt", "rf", "dl")
            return await client.pipeline(
                [("HMGET", self.prefix + "o:" + key, *fields) for key in keys]
            )

        try:
            return await self._retrying(functools.partial(self.runtime.shielded, read))
        except RedisError as exc:
            raise self.lose(
                f"the shared frontier at {self.where} refused a read: {reason(exc)}"
            ) from None

    async def read_counts(self) -> SharedCounts | None:
        """The shared counts now (``status.lua``), for a process that leaves; None when
        the server is lost or does not answer them (logged)."""
        if self.lost is not None:
            return None
        failures: tuple[type[BaseException], ...] = (
            *LOST_ERRORS,
            RedisError,
            ValueError,
            TypeError,
        )
        try:
            answer = await self.client.run_script(
                STATUS_SCRIPT, [self.prefix + "meta"], [self.prefix, self.server_clock()]
            )
            return SharedCounts.from_answer(answer)
        except failures as exc:
            LOGGER.warning("shared frontier %s: no final counts: %s", self.where, reason(exc))
            return None

    # -- listening ---------------------------------------------------------------------------

    async def listen(
        self, window: Listener, *, task_status: Any = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Note what the crawl's channel says (``finished``; ``work`` when work comes;
        ``hold`` when an origin must wait) and tell the window; started once subscribed.

        A connection lost is made again, quietly, at growing intervals, for as long as the
        session lasts: the step calls say when the server goes and comes back, and stop
        the crawl when it stays away. Messages published meanwhile are not kept for anyone
        (Redis's channels are fire and forget), so the window is woken once subscribed
        again. A server that refuses the subscription ends the listening, logged: an idle
        process then still wakes at least once a lease period."""
        channel = self.prefix + "events"
        client = self.client
        pause, started = 0.1, False
        while True:
            try:
                async with subscribe(
                    client.endpoint, channel, name=client.name, connect_timeout=CONNECT_TIMEOUT
                ) as messages:
                    if started:
                        window.wake()
                    else:
                        task_status.started()
                        started = True
                    pause = 0.1
                    async for data in messages:
                        if self._heard(data, window):
                            window.wake()
            except LOST_ERRORS as exc:
                if not started:
                    raise
                LOGGER.debug("shared frontier %s: listening again: %s", self.where, reason(exc))
                await anyio.sleep(pause)
                pause = min(pause * 2, 2.0)
            except Exception as exc:
                LOGGER.warning("shared frontier %s: stopped listening: %s", self.where, reason(exc))
                return

    def _heard(self, data: str, window: Listener) -> bool:
        """Note a message of the crawl's channel; whether the window should look again."""
        if data == "finished":
            self.shared = dataclasses.replace(self.shared, queued=0, leased=0, finished=True)
            return True
        if data.startswith("hold "):
            # "hold T ORIGIN CALLER": the origin waits until T, on the server's clock. A
            # request this process leased before the wait began is held back, not sent
            # inside it. The caller's own answer told it already, exactly.
            until, origin, caller = [*data.split(" "), "", ""][1:4]
            ends = _ready_time(until)
            if ends is not None and origin and caller != self.owner:
                window.hold(origin, ends - self.runtime.wall_offset)
            return False
        if not data.startswith("work"):
            return False
        # A lease of this process's, answered after the call that made the work, already
        # took what there was: that message is stale.
        number, _, when = data.removeprefix("work").strip().partition(" ")
        if number.isdigit() and int(number) <= self.last_call:
            return False
        ready = _ready_time(when)
        if ready is None:
            self.idle_until = None  # work is ready now: ask for it
        elif self.idle_until is not None:
            # Work will be ready then, sooner than this process would look: it calls
            # early for it (a call made too early finds it not leased ahead, and its
            # answer says to wait for it all the way).
            at = ready - self.runtime.wall_offset - self.early
            if at >= self.idle_until:
                return False
            self.idle_until = at
        return True

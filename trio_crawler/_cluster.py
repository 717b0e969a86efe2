"""The Redis server of a shared crawl (``--frontier``): connecting, errors, status, roots.

The store that keeps a crawl on the server is :mod:`trio_crawler._store_redis`; this module
is what it and the command line need to talk to the server at all: the client (with TLS
verified by default), the one-line errors for a server that cannot be used, the crawl's key
prefix, its counts (``--status``), its roots and options (for a process that joins it), and
how a queued request is written on the server.

Options between processes. The options that say *what* to crawl (those declared ``fixed``,
as for ``--state``) are the creating process's, and so are ``--delay`` and
``--max-per-host``, which the server keeps for all processes together: a joiner that
leaves them out runs with the stored values, and one that gives other values is refused
(:func:`keep_shared_options`, before the crawler is made; and again as the process joins,
for one that raced the creator).
"""

from __future__ import annotations

import datetime
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio

from ._between_runs import keep_what_to_crawl
from ._cluster_scripts import DETAILS_SCRIPT, STATUS_SCRIPT
from ._events import FetchRequest
from ._option_checks import redacted
from ._options import ConfigError
from ._redis import (
    AuthenticationFailed,
    AuthenticationRequired,
    Endpoint,
    NotPermitted,
    Redis,
    RedisError,
    RedisLost,
    Unavailable,
)
from ._robots import origin_of

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

LOGGER = logging.getLogger("trio_crawler")

# The environment variable that holds the server's password when the URL has none, so
# that it stays out of the command line (and so out of ``ps``).
PASSWORD_VARIABLE = "TRIO_CRAWLER_REDIS_PASSWORD"
# Seconds to connect, and to wait for one answer, before a call counts as failed.
CONNECT_TIMEOUT = 5.0
ANSWER_TIMEOUT = 10.0
# Seconds a process given no ROOTs waits for the crawl it joins to be created (the
# contract's figure). The processes of one crawl are often started together (a job array,
# ``docker compose up``), and the one with the ROOTs may come up a moment after the others:
# 30 s is an interpreter's start on a loaded machine many times over, and short enough that
# a mistyped --crawl-id is soon told.
JOIN_WAIT = 30.0
# The pauses between two looks for that crawl: the first short, so that a crawl created a
# moment later is found a moment later; each twice the last, up to one look every 2 s.
JOIN_FIRST_PAUSE = 0.05
JOIN_LAST_PAUSE = 2.0


class ClusterError(ConfigError):
    """The shared crawl cannot be used: no server, no such crawl, other roots."""

    def __init__(self, problem: str) -> None:
        super().__init__("frontier", problem)


def redis_client(url: str) -> Redis:
    """A client for the server ``url`` names, its password from the URL or else from
    :data:`PASSWORD_VARIABLE`; it connects when entered. ``rediss://`` verifies the
    server's certificate and that it names the host, unless the URL's query says otherwise
    (:mod:`trio_crawler._redis`)."""
    return Redis(
        Endpoint.from_url(url, password_variable=PASSWORD_VARIABLE),
        name="trio-crawler",
        connect_timeout=CONNECT_TIMEOUT,
        answer_timeout=ANSWER_TIMEOUT,
    )


# What means the server is away (for now, perhaps): a call is tried again.
LOST_ERRORS: tuple[type[BaseException], ...] = (RedisLost, Unavailable, TimeoutError, OSError)


def refusal(exc: BaseException, where: str) -> ConfigError | None:
    """The one-line error for a server that cannot be used (unreachable, or refusing our
    credentials) or a crawl that cannot be joined (a :class:`ClusterError`, an
    :class:`~trio_crawler._between_runs.OptionChanged`), found in ``exc`` or the group that
    carries it, or any other refusal of the server's (out of memory, read-only); None for
    anything else (a bug, which must surface as one)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = refusal(inner, where)
            if found is not None:
                return found
        return None
    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, AuthenticationRequired):
        # NOAUTH: none was given. Redis's own words ("Authentication required.") say
        # neither where a password goes nor that the crawler can take one.
        return ClusterError(
            f"{where}: this server needs a password (give it in the URL or {PASSWORD_VARIABLE})"
        )
    if isinstance(exc, AuthenticationFailed | NotPermitted):
        return ClusterError(f"{where} refused the credentials: {reason(exc)}")
    if isinstance(exc, LOST_ERRORS):
        return ClusterError(f"cannot reach {where}: {reason(exc)}")
    if isinstance(exc, RedisError) and _NO_DATABASE in str(exc):
        # The URL's /DB is a number (checked with the options), but one past the server's
        # "databases" setting: its SELECT is refused as the connection is made.
        database = urlsplit(where).path.removeprefix("/") or "0"
        return ClusterError(f"{where} has no database {database}: {reason(exc)}")
    if isinstance(exc, RedisError):
        # Out of memory, a read-only replica, a command renamed away: the server's word.
        return ClusterError(f"{where} refused the crawl: {reason(exc)}")
    return None


# Redis's answer to SELECT of a database it does not have (src/db.c, selectDb).
_NO_DATABASE = "DB index is out of range"


# The layout of a crawl on the server that this version reads and writes (meta's ``v``;
# the scripts' LAYOUT, in lua/prelude.lua). Layout 2 added each queued URL's referrer to
# its entry; a crawl of another layout is refused, never rewritten.
LAYOUT = "2"


def older_layout(where: str, crawl_id: str, version: object) -> ClusterError | None:
    """The refusal of a crawl that an earlier trio-crawler made (its layout ``version`` is
    older than :data:`LAYOUT`); None for anything else."""
    if not (isinstance(version, str) and version.isdigit() and int(version) < int(LAYOUT)):
        return None
    return ClusterError(
        f"crawl {crawl_id!r} on {where} was made by an earlier trio-crawler (layout "
        f"{version}; this version reads layout {LAYOUT}): finish it with the version that "
        "made it, or use another --crawl-id"
    )


def prefix_of(crawl_id: str) -> str:
    """The crawl's key prefix; the braces keep its keys in one slot of a cluster."""
    return f"trio-crawler:{{{crawl_id}}}:"


@dataclass(frozen=True, slots=True)
class SharedCounts:
    """A shared crawl's counts, as ``--status`` prints them."""

    queued: int
    leased: int
    done: int
    failed: int
    finished: bool
    seen: int
    slowed_now: int = 0  # origins whose pace limits them now
    slowed_ever: int = 0  # origins it ever limited

    @classmethod
    def from_answer(cls, answer: object) -> SharedCounts:
        """The counts a script answered; anything else is a foreign or damaged crawl."""
        if not (isinstance(answer, list) and len(answer) in (6, 8)):
            raise ValueError(f"not a crawl's counts: {answer!r}")
        numbers = [int(value) for value in answer]
        if min(numbers) < 0:
            raise ValueError(f"negative counts: {answer!r}")
        queued, leased, done, failed, finished, seen, *slowed = numbers
        return cls(queued, leased, done, failed, finished == 1, seen, *slowed)

    def lines(self) -> str:
        return (
            f"queued: {self.queued}\nleased: {self.leased}\ndone: {self.done}\n"
            f"failed: {self.failed}\nfinished: {'yes' if self.finished else 'no'}\n"
        )


def clock_time(server_time: float) -> str:
    """A time on the server's clock (seconds since the epoch) as ``HH:MM:SS``, local."""
    return datetime.datetime.fromtimestamp(server_time).strftime("%H:%M:%S")


@dataclass(frozen=True, slots=True)
class SharedStatus:
    """What ``--status`` prints: the contract's counts, first and as they are, then what
    explains a crawl that waits.

    Attributes:
        counts: The counts (``queued`` ... ``finished``).
        stranded: Leases held by processes that stopped renewing them (killed, or cut off
            from the server); they come back to the queue when they run out.
        back_by: The server time by which all of those have run out; None for none.
        budget: ``--max-pages`` of the crawl; None for none.
        started: The URLs the budget counted (started by any process).
    """

    counts: SharedCounts
    stranded: int = 0
    back_by: float | None = None
    budget: int | None = None
    started: int = 0

    @classmethod
    def from_answers(cls, counts: object, details: object) -> SharedStatus:
        """The status from status.lua's and details.lua's answers.

        Raises:
            ValueError: An answer is not one of a crawl.
        """
        if not (isinstance(details, list) and len(details) == 4):
            raise ValueError(f"not a crawl's details: {details!r}")
        stranded, back_by, budget, started = details
        return cls(
            SharedCounts.from_answer(counts),
            stranded=int(stranded),
            back_by=float(back_by) if back_by else None,
            budget=int(budget) if budget else None,
            started=int(started),
        )

    def lines(self) -> str:
        text = self.counts.lines() + f"leased by no live process: {self.stranded}"
        if self.stranded and self.back_by is not None:
            text += f" (back by {clock_time(self.back_by)})"
        text += "\n"
        if self.budget is not None:
            spent = ", spent" if self.started >= self.budget else ""
            text += f"max-pages: {self.started} of {self.budget} started{spent}\n"
        return text


async def read_status(url: str, crawl_id: str) -> SharedStatus:
    """The status of the shared crawl ``crawl_id`` (``--status``); changes nothing.

    Raises:
        ClusterError: No server answers, or it holds no such crawl.
    """
    where = redacted(url)
    keys, args = [prefix_of(crawl_id) + "meta"], [prefix_of(crawl_id), ""]
    try:
        async with redis_client(url) as client:
            counts = await client.run_script(STATUS_SCRIPT, keys, args)
            details = await client.run_script(DETAILS_SCRIPT, keys, args)
            version = None if counts else await client.hget(keys[0], "v")
    except BaseException as exc:
        refused = refusal(exc, where)
        if refused is None:
            raise
        raise refused from None
    if not counts:
        older = older_layout(where, crawl_id, version)
        raise older or ClusterError(f"{where} holds no crawl named {crawl_id!r}")
    try:
        return SharedStatus.from_answers(counts, details)
    except (ValueError, TypeError):
        raise ClusterError(f"{where}: crawl {crawl_id!r} is not a trio-crawler crawl") from None


@dataclass(frozen=True, slots=True)
class SharedCrawl:
    """A shared crawl as a process that joins it finds it: its roots and its options
    (as its creator stored them: every option, by name)."""

    roots: tuple[str, ...]
    options: Mapping[str, Any]


async def shared_crawl(url: str, crawl_id: str, *, wait: float = JOIN_WAIT) -> SharedCrawl | None:
    """The shared crawl ``crawl_id``, for a process that joins it.

    A crawl not there yet is looked for again, at growing intervals, for ``wait`` seconds
    (none for ``wait`` 0): the process given the ROOTs may be starting at the same moment.

    Returns:
        The crawl; None when ``wait`` is 0 and there is none.

    Raises:
        ClusterError: No server answers; it holds no such crawl after ``wait`` seconds
            (more than 0), or keys under that name that are not a crawl.
    """
    where = redacted(url)
    try:
        async with redis_client(url) as client:
            meta = await _wait_for_crawl(client, crawl_id, wait, where)
    except BaseException as exc:
        refused = refusal(exc, where)
        if refused is None:
            raise
        raise refused from None
    version, roots, options = meta
    older = older_layout(where, crawl_id, version)
    if older is not None:
        raise older
    if version is None:
        if wait <= 0:
            return None
        raise ClusterError(
            f"{where} holds no crawl named {crawl_id!r} (waited {wait:g} s for one); "
            "give ROOTs to start one"
        )
    try:
        stored = json.loads(roots) if version == LAYOUT else None
        kept = json.loads(options) if options is not None else {}
    except (TypeError, ValueError):
        stored = kept = None
    if not (
        isinstance(stored, list)
        and stored
        and all(isinstance(r, str) for r in stored)
        and isinstance(kept, dict)
    ):
        raise ClusterError(f"{where}: crawl {crawl_id!r} is not a trio-crawler crawl")
    return SharedCrawl(tuple(stored), kept)


async def options_for_joining(
    url: str, crawl_id: str, *, roots: Sequence[str], given: Mapping[str, Any]
) -> tuple[Sequence[str], dict[str, Any]]:
    """The roots and options a process of the shared crawl ``crawl_id`` runs with: the
    ``roots`` and options ``given`` to it, and if the crawl exists, its roots when none
    are given (waiting for it as :func:`shared_crawl` does) and its stored values of the
    shared options left out (see :func:`keep_shared_options`).

    Raises:
        ClusterError: No server answers; no roots are given and no such crawl comes.
        OptionChanged: A shared option is given another value than the crawl's.
    """
    found = await shared_crawl(url, crawl_id, wait=0.0 if roots else JOIN_WAIT)
    if found is None:  # a new crawl: this process creates it (or joins the one that won)
        return roots, dict(given)
    options = keep_shared_options(given, found.options, where=where_of(url, crawl_id))
    return roots or found.roots, options


# The options the server keeps for every process of a shared crawl, besides those that say
# what to crawl: its manners, which hold for all processes together.
SHARED_MANNERS = ("delay", "max_per_host")


def where_of(url: str, crawl_id: str) -> str:
    """Where a shared crawl is, for a message (the URL's password hidden)."""
    return f"{redacted(url)} (--crawl-id {crawl_id})"


def keep_shared_options(
    given: Mapping[str, Any], stored: Mapping[str, Any], *, where: str
) -> dict[str, Any]:
    """The options of a process that joins a shared crawl: those ``given`` to it, and for
    each shared option (one that says what to crawl, declared ``fixed``, or one of
    :data:`SHARED_MANNERS`) not given, the value the crawl was created with (``stored``).
    A stored option that is missing is left to the process.

    Raises:
        OptionChanged: A shared option is given with another value than the stored one.
        ConfigError: A stored value is no value of its option (the crawl is damaged).
    """
    return keep_what_to_crawl(given, stored, where=where, also=SHARED_MANNERS, damaged="frontier")


async def _wait_for_crawl(client: Redis, crawl_id: str, wait: float, where: str) -> list[Any]:
    """The crawl's version, roots and options, once it exists or ``wait`` seconds have
    passed (then the version is None). One look per pause, each pause twice the last."""
    deadline = anyio.current_time() + wait
    pause = JOIN_FIRST_PAUSE
    while True:
        meta: list[Any] = list(
            await client.hmget(prefix_of(crawl_id) + "meta", ["v", "roots", "options"])
        )
        left = deadline - anyio.current_time()
        if meta[0] is not None or left <= 0:
            return meta
        if pause == JOIN_FIRST_PAUSE and wait > 0:
            LOGGER.info(
                "no crawl named %r on %s yet: waiting up to %g s for a process with ROOTs "
                "to start it",
                crawl_id,
                where,
                wait,
            )
        await anyio.sleep(min(pause, left))
        pause = min(pause * 2, JOIN_LAST_PAUSE)


def reason(exc: BaseException) -> str:
    """One line for what went wrong: the exception's message, and the deepest message among
    its causes when that says more ("cannot connect" hides a refused certificate a cause
    down)."""
    text = (str(exc) or type(exc).__name__).splitlines()[0]
    deepest = ""
    cause: BaseException | None = exc
    for _ in range(8):
        if isinstance(cause, BaseExceptionGroup) and cause.exceptions:
            cause = cause.exceptions[0]
        else:
            cause = cause.__cause__ or cause.__context__ if cause is not None else None
        if cause is None:
            break
        message = str(cause).strip()
        if message and not isinstance(cause, BaseExceptionGroup):
            deepest = message.splitlines()[0]
    return f"{text} ({deepest})" if deepest and deepest not in text else text


def entry_of(request: FetchRequest) -> str:
    """A queued request as the server keeps it: its numbers, its URL, and its referrer if
    it has one (URLs are normalised, so neither holds a space)."""
    entry = (
        f"{request.attempt} {request.depth} {request.redirects_left} {request.sitemap} "
        f"{request.url}"
    )
    return entry if request.referrer is None else f"{entry} {request.referrer}"


def entry_url(entry: str) -> str:
    """The URL of an entry, as the scripts read it (the fifth field), even of an entry
    too damaged to be a request: what is dropped when it cannot be fetched."""
    return entry.split(" ", 4)[-1].split(" ", 1)[0]


def parse_entry(entry: object) -> FetchRequest | None:
    """The request an entry read back from the server describes; None if it is not one."""
    if not isinstance(entry, str) or len(entry) > 2_000_000:
        return None
    parts = entry.split(" ", 4)
    if len(parts) != 5 or not all(part.isdigit() for part in parts[:4]):
        return None
    attempt, depth, redirects_left, sitemap = (int(part) for part in parts[:4])
    url, _, referrer = parts[4].partition(" ")
    if attempt < 1 or not _is_url(url) or not (referrer == "" or _is_url(referrer)):
        return None
    try:
        origin_of(url)
    except ValueError:
        return None
    return FetchRequest(
        url=url,
        redirects_left=redirects_left,
        attempt=attempt,
        depth=depth,
        sitemap=sitemap,
        referrer=referrer or None,
    )


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://")) and len(text) <= 1_000_000 and " " not in text

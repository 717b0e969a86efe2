"""Host-name lookups for one crawl: each name resolved once, the answers kept, and counted.

Theory of operation
-------------------
Given a host name, ``anyio.connect_tcp`` asks ``getaddrinfo`` each time, in a worker
thread, and the system may ask a DNS server each time too. A crawl opens a connection per
worker and origin, and opens another whenever an idle one was closed (by the server, or by
the crawl's cap on idle connections), so a site crawled by a hundred workers would be
looked up a hundred times and more. :class:`HostLookups` is shared by every transport of
a crawl: the first connection to a host looks it up, later ones read the answer from a
bounded cache (:class:`~trio_crawler._lru.LRU`), and connections that ask while a lookup
is under way wait for that one instead of starting their own.

A failed lookup is kept too, for :data:`FAILED_LOOKUP_SECONDS`: without it, each URL of a
host that does not exist, and each retry of each, would ask the resolver again. A success
is kept for the crawl (or until the cache lets it go), as Scrapy's DNS cache keeps it:
``getaddrinfo`` does not say how long an answer is valid.

The answer is the list of addresses in the order to try them (one IPv6 first, then one
IPv4, then the rest, as RFC 8305 section 4 and ``anyio.connect_tcp`` order them); the
transport connects to those addresses and keeps the host name for TLS (SNI and the
certificate check). An IP literal is its own answer and never reaches the resolver.

Cancellation: a lookup belongs to the attempt that started it. If that attempt is
cancelled (its timeout, the end of the crawl), the lookup is dropped and nothing is
cached; the first of the attempts that were waiting for it starts another, and the rest
wait for that one.

Threads: ``getaddrinfo`` blocks, so each lookup runs in a thread, and a dropped one runs on
until the resolver gives up (glibc waits 5 s a try, and tries again). In the event loop's
shared pool (40 threads on Trio; on asyncio, the default executor's few) the lookups of
names whose DNS server does not answer, each held for its whole timeout, left every other
lookup queued behind them: on a crawl of 200 live hosts and 300 names that the resolver
answered slowly or not at all, 97 and 80 of the live hosts failed in two runs, timed out
waiting for a thread.
So a crawl's lookups have threads of their own, :func:`lookup_threads` of them: two for
each worker, one for its lookup and one for a lookup an attempt of its gave up on, which
may still run.

On Trio's virtual clock (the test suite), ``getaddrinfo`` of a name runs in a thread, which
lets the clock jump; the tests replace :func:`getaddrinfo` in this module with a fake that
answers at once, or run on real time.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ._lru import LRU

if TYPE_CHECKING:
    from collections.abc import Sequence

LOGGER = logging.getLogger("trio_crawler")

# How many host names' answers are kept: Scrapy's DNSCACHE_SIZE default. An answer is a few
# short strings (a few hundred bytes with the name), so the cache stays within a few MB.
LOOKUP_CACHE_SIZE = 10_000

# Seconds a failed lookup is kept before the name is asked again. RFC 9520 (negative caching
# of DNS resolution failures) asks resolvers to keep a failure at least 1 s and at most 5
# minutes; 30 s covers a URL's retries (about 1, 2 and 4 s apart), so that a name that
# does not resolve costs one lookup per URL's tries and not one per try, and still lets a
# brief failure of the resolver heal during a long crawl.
FAILED_LOOKUP_SECONDS = 30.0

# The fewest threads a crawl's lookups get, whatever its number of workers: as many as the
# event loop's shared pool has on Trio.
MIN_LOOKUP_THREADS = 40


def lookup_threads(workers: int) -> int:
    """How many lookups a crawl of ``workers`` workers runs at once (see the module
    docstring): two a worker, and at least :data:`MIN_LOOKUP_THREADS`."""
    return max(MIN_LOOKUP_THREADS, 2 * workers)


async def getaddrinfo(
    host: str, port: int | None, *, limiter: anyio.CapacityLimiter
) -> list[tuple[Any, ...]]:
    """``socket.getaddrinfo`` for TCP, in one of ``limiter``'s threads; cancelled, it stops
    waiting at once, and the thread runs on until the resolver answers or gives up."""
    return await anyio.to_thread.run_sync(
        functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM),
        abandon_on_cancel=True,
        limiter=limiter,
    )


class HostLookupError(OSError):
    """A host name that did not resolve; the message names the host and the resolver's
    reason, e.g. ``cannot resolve 'nowhere.test': [Errno -2] Name or service not known``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LookupStatistics:
    """What a crawl's lookups have cost so far.

    Attributes:
        lookups: Names handed to the resolver (cache misses).
        hits: Connections that got their addresses from the cache, or from a lookup
            another connection had under way.
        failures: Lookups that failed (each is kept for :data:`FAILED_LOOKUP_SECONDS`).
        cached: Names in the cache now, failures included.
    """

    lookups: int
    hits: int
    failures: int
    cached: int


@dataclass(frozen=True, slots=True)
class _Failed:
    """A lookup that failed: why, and until when (on the event loop's clock) to say so."""

    reason: str
    until: float


def is_ip_literal(host: str) -> bool:
    """Whether ``host`` is an IPv4 or IPv6 address (as httpx gives it: no brackets)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class HostLookups:
    """The crawl's host-name cache; see the module docstring.

    Args:
        size: Most names kept (:data:`LOOKUP_CACHE_SIZE`); the least recently used go first.
        failure_seconds: How long a failed lookup is kept (:data:`FAILED_LOOKUP_SECONDS`).
        threads: Most lookups at once, each in a thread (:func:`lookup_threads`).

    Use it from one event loop (the crawl's): it is not thread-safe, and needs no lock
    there, since it never awaits between reading the cache and changing it.
    """

    def __init__(
        self,
        *,
        size: int = LOOKUP_CACHE_SIZE,
        failure_seconds: float = FAILED_LOOKUP_SECONDS,
        threads: int = MIN_LOOKUP_THREADS,
    ) -> None:
        self._answers: LRU[str, tuple[str, ...] | _Failed] = LRU(size)
        self._threads = anyio.CapacityLimiter(threads)
        self._under_way: dict[str, anyio.Event] = {}
        self._failure_seconds = failure_seconds
        self._lookups = 0
        self._hits = 0
        self._failures = 0

    @property
    def threads(self) -> int:
        """Most lookups at once, each in a thread of this cache's own."""
        return int(self._threads.total_tokens)

    def statistics(self) -> LookupStatistics:
        return LookupStatistics(
            lookups=self._lookups,
            hits=self._hits,
            failures=self._failures,
            cached=len(self._answers),
        )

    async def addresses(self, host: str) -> tuple[str, ...]:
        """The addresses to connect to for ``host``, in the order to try them.

        An IP literal is returned as it is, without a lookup or a count. A checkpoint only
        when it looks the name up or waits for a lookup under way.

        Raises:
            HostLookupError: If the name did not resolve, now or within the last
                :data:`FAILED_LOOKUP_SECONDS`.
        """
        if is_ip_literal(host):
            return (host,)
        while True:
            answer = self._answers.get(host)
            if isinstance(answer, tuple):
                self._hits += 1
                return answer
            if answer is not None:
                if anyio.current_time() < answer.until:
                    self._hits += 1
                    raise HostLookupError(answer.reason)
                self._answers.pop(host)
            under_way = self._under_way.get(host)
            if under_way is None:
                return await self._look_up(host)
            # Another connection is looking this name up: wait for its answer, then read
            # it from the cache, or look it up here if that lookup was cancelled.
            await under_way.wait()

    async def _look_up(self, host: str) -> tuple[str, ...]:
        done = self._under_way[host] = anyio.Event()
        self._lookups += 1
        try:
            try:
                results = await getaddrinfo(host, None, limiter=self._threads)
            except OSError as exc:  # socket.gaierror: no such name, or no answer
                failure = str(exc)
            else:
                addresses = happy_eyeballs_order([(info[0], info[4][0]) for info in results])
                if addresses:
                    self._answers.put(host, addresses)
                    LOGGER.debug("looked up %s: %s", host, ", ".join(addresses))
                    return addresses
                failure = "no addresses"
            self._failures += 1
            reason = f"cannot resolve {host!r}: {failure}"
            until = anyio.current_time() + self._failure_seconds
            self._answers.put(host, _Failed(reason, until))
            LOGGER.debug("looked up %s: %s", host, failure)
            raise HostLookupError(reason)
        finally:
            del self._under_way[host]
            done.set()


def happy_eyeballs_order(results: Sequence[tuple[int, str]]) -> tuple[str, ...]:
    """The addresses of ``(family, address)`` pairs in the order to try them: the first
    IPv6 address, then the first IPv4 one, then the rest as given, without repeats (RFC
    8305 section 4; the order ``anyio.connect_tcp`` uses)."""
    first_v6 = next((address for family, address in results if family == socket.AF_INET6), None)
    first_v4 = next((address for family, address in results if family == socket.AF_INET), None)
    ordered = dict.fromkeys(a for a in (first_v6, first_v4) if a is not None)
    ordered.update(dict.fromkeys(address for _, address in results))
    return tuple(ordered)

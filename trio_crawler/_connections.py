"""What the transports of one crawl share: the host-name cache, and how they connect.

Theory of operation
-------------------
:class:`CrawlConnections` is the one object of a crawl that every transport it builds is
given: the host-name cache (:class:`~trio_crawler._lookups.HostLookups`), with
:meth:`~CrawlConnections.statistics` to read what it did. :func:`open_connection`
connects to the addresses a lookup gave, trying the next one after 250 ms as
``anyio.connect_tcp`` does (happy eyeballs).

With ``TRIO_CRAWLER_TRANSPORT=httpx`` (or a proxy in the environment) none of this is used:
names are looked up by httpcore, once per connection, as they are by a caller's own
``client=``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from ._lookups import HostLookups

if TYPE_CHECKING:
    from collections.abc import Sequence


# RFC 8305 section 5's recommended Connection Attempt Delay, and anyio.connect_tcp's
# happy_eyeballs_delay: how long one address may take to connect before the next is tried.
CONNECTION_ATTEMPT_DELAY = 0.25


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionStatistics:
    """What a crawl's transports have shared so far.

    Attributes:
        lookups: Host names handed to the resolver.
        lookup_hits: New connections whose addresses came from the cache (or from a
            lookup already under way).
        lookup_failures: Lookups that failed.
        names_cached: Host names cached now, failures included.
    """

    lookups: int
    lookup_hits: int
    lookup_failures: int
    names_cached: int


class CrawlConnections:
    """The one object of a crawl that all the transports it builds share.

    It holds the host-name cache (:attr:`lookups`); see the module docstring. Made once
    per crawl, before its first client, and used from that crawl's event loop only.
    """

    def __init__(self) -> None:
        self.lookups = HostLookups()

    def statistics(self) -> ConnectionStatistics:
        lookups = self.lookups.statistics()
        return ConnectionStatistics(
            lookups=lookups.lookups,
            lookup_hits=lookups.hits,
            lookup_failures=lookups.failures,
            names_cached=lookups.cached,
        )


async def open_connection(addresses: Sequence[str], port: int) -> anyio.abc.SocketStream:
    """A TCP connection to the first of ``addresses`` that answers.

    One address is connected to directly. With several, the first is tried, and each next
    one :data:`CONNECTION_ATTEMPT_DELAY` later or as soon as the one before fails; the
    first to connect wins and the others are cancelled (or closed, if they connected too).

    Raises:
        OSError: If no address connected: the error itself for one address (``[Errno 111]
            Connection refused``, ``[Errno 24] Too many open files``), where
            ``anyio.connect_tcp`` says only "All connection attempts failed" and leaves the
            reason in its ``__cause__``; for several, one error naming each reason.
    """
    if len(addresses) == 1:
        try:
            return await anyio.connect_tcp(addresses[0], port)
        except OSError as exc:
            reason = _reason(exc)
            if reason is exc:
                raise
            raise reason from None
    connected: anyio.abc.SocketStream | None = None
    errors: list[OSError] = []

    async def attempt(address: str, failed: anyio.Event) -> None:
        nonlocal connected
        try:
            stream = await anyio.connect_tcp(address, port)
        except OSError as exc:
            errors.append(_reason(exc))
            failed.set()
            return
        if connected is None:
            connected = stream
            attempts.cancel_scope.cancel("connected")
        else:
            await anyio.aclose_forcefully(stream)

    try:
        async with anyio.create_task_group() as attempts:
            for address in addresses:
                failed = anyio.Event()
                attempts.start_soon(attempt, address, failed)
                with anyio.move_on_after(CONNECTION_ATTEMPT_DELAY):
                    await failed.wait()
    except BaseException:
        if connected is not None:
            await anyio.aclose_forcefully(connected)
        raise
    if connected is None:
        reasons = "; ".join(dict.fromkeys(str(error) for error in errors))
        raise OSError(f"{len(addresses)} addresses, none connected: {reasons}") from (
            ExceptionGroup("connection attempts", errors)
        )
    return connected


def _reason(exc: OSError) -> OSError:
    """The error under ``anyio.connect_tcp``'s "All connection attempts failed"."""
    return exc.__cause__ if isinstance(exc.__cause__, OSError) else exc

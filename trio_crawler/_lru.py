"""A mapping bounded in size that forgets its least recently used entries first.

Two things a crawl keeps for many hosts must stay bounded however many hosts it meets: the
idle keep-alive connections of all its workers (:mod:`trio_crawler._connections`) and the
answers of its host-name lookups (:mod:`trio_crawler._lookups`). Both keep what was used
last and let go of what has waited longest, and both need to know what was let go (a
connection must be closed). :class:`LRU` is that rule, once: pure, no I/O, no clock.

:func:`functools.lru_cache` is the same rule for function results, but it neither says what
it evicts nor lets an entry be taken out, which is most of what a pool of connections does.
"""

from __future__ import annotations

import collections
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``capacity`` entries; adding one more evicts the least recently used.

    ``get`` and ``put`` make an entry the most recently used; ``pop`` takes one out, and
    what was taken out is no longer counted. Eviction happens only in ``put``, which returns
    what it evicted, oldest first, so that the caller can release it (close a connection).

    Args:
        capacity: The most entries kept; 0 keeps none (every ``put`` evicts what it was
            given), None keeps every entry.

    Raises:
        ValueError: For a negative ``capacity``.
    """

    __slots__ = ("_entries", "capacity")

    def __init__(self, capacity: int | None) -> None:
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be >= 0 or None, not {capacity!r}")
        self.capacity = capacity
        # An OrderedDict, not a dict: move_to_end and popitem(last=False) are O(1), where a
        # dict's oldest entry after many deletions takes a scan past the holes they leave.
        self._entries: collections.OrderedDict[K, V] = collections.OrderedDict()

    def get(self, key: K) -> V | None:
        """The value for ``key`` (now the most recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> list[tuple[K, V]]:
        """Keep ``value`` for ``key`` as the most recently used entry.

        Returns:
            The entries evicted to stay within ``capacity``, least recently used first
            (the new entry itself when ``capacity`` is 0).
        """
        entries = self._entries
        entries[key] = value
        entries.move_to_end(key)
        evicted: list[tuple[K, V]] = []
        if self.capacity is not None:
            while len(entries) > self.capacity:
                evicted.append(entries.popitem(last=False))
        return evicted

    def pop(self, key: K) -> V | None:
        """Take the entry for ``key`` out and return its value, or None if there is none."""
        return self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def keys(self) -> list[K]:
        """The keys, least recently used first (a copy)."""
        return list(self._entries)

    def clear(self) -> None:
        """Take every entry out (none is counted as evicted)."""
        self._entries.clear()

"""The live progress line on stderr, drawn by rich.

The crawl calls :meth:`ProgressDisplay.update` from a task of its own, one more sibling of
the workers (``on_progress`` in the engines), ten times a second. Drawing is rich's
business: a ``Live`` display that rewrites one line in place, with ``auto_refresh`` off so
that rich starts no thread of its own and every redraw happens in the crawl's event loop,
between two checkpoints. Log lines go through the same console (see :meth:`log_handler`),
so rich prints them above the line instead of through it.

The CLI shows it only when stderr is a terminal: in a pipe or a log file, a line rewritten
ten times a second would be noise.

Its numbers are the report's, under the report's names: ``done`` is its ``Done``; ``error``
(HTTP error statuses) and ``fail`` (every try failed) are its counters of those names, from
the same classification of records (:attr:`~trio_crawler._stats.FetchStatistic.kind`);
queued, in flight and, in a shared crawl, ``leased elsewhere`` (URLs other processes hold,
``--status``'s ``leased`` less this process's) add up to its ``Todo``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Self

from rich.console import Console
from rich.live import Live
from rich.logging import RichHandler
from rich.text import Text

if TYPE_CHECKING:
    import logging
    from types import TracebackType

    from ._counts import CrawlCounts

# Pages per second is measured over this many seconds, so the figure moves smoothly rather
# than jumping with every batch of pages that lands in one tenth of a second.
RATE_WINDOW = 3.0


class ProgressDisplay:
    """One line: records done, queued, in flight (and leased elsewhere, in a shared crawl),
    pages per second, the report's ``error`` and ``fail``, elapsed time."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console if console is not None else Console(stderr=True)
        self._live = Live(
            Text(""),
            console=self.console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._start = time.monotonic()
        self._samples: list[tuple[float, int]] = []

    def __enter__(self) -> Self:
        self._start = time.monotonic()
        self._live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._live.stop()

    def log_handler(self) -> logging.Handler:
        """A logging handler that prints above the live line, not through it."""
        return RichHandler(console=self.console, show_time=False, show_path=False)

    def update(self, stats: CrawlCounts) -> None:
        """Redraw the line for a new snapshot of the crawl."""
        self._live.update(self.render(stats), refresh=True)

    def render(self, stats: CrawlCounts) -> Text:
        """The line for ``stats``, as rich text."""
        now = time.monotonic()
        self._samples.append((now, stats.done))
        while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW:
            self._samples.pop(0)
        first_time, first_done = self._samples[0]
        rate = (stats.done - first_done) / (now - first_time) if now > first_time else 0.0
        elapsed = int(now - self._start)
        text = Text()
        text.append(f"{stats.done}", style="bold green")
        text.append(" done  ")
        text.append(f"{stats.queued}", style="bold")
        text.append(" queued  ")
        text.append(f"{stats.in_flight}", style="bold")
        text.append(" in flight  ")
        if stats.leased_elsewhere:
            text.append(f"{stats.leased_elsewhere}", style="bold")
            text.append(" leased elsewhere  ")
            if stats.leased_by_none and stats.back_by is not None:
                # A killed process's leases: say why nothing moves, and until when.
                back = time.strftime("%H:%M:%S", time.localtime(stats.back_by))
                text.append(f"({stats.leased_by_none}", style="bold yellow")
                text.append(f" by no live process, back by {back})  ")
        text.append(f"{rate:.1f}", style="bold cyan")
        text.append(" pages/s  ")
        text.append(f"{stats.error}", style="bold red" if stats.error else "bold")
        text.append(" error  ")
        text.append(f"{stats.fail}", style="bold red" if stats.fail else "bold")
        text.append(" fail  ")
        if stats.slowed:
            # Origins whose learnt pace holds them below --delay and --max-per-host now.
            text.append(f"{stats.slowed}", style="bold yellow")
            text.append(" slowed  ")
        text.append(f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}")
        return text

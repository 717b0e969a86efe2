"""A crawl with a deadline and a clean Ctrl-C: cancel scopes on Trio.

What it shows:

- **A deadline.** ``Crawler(..., max_time=SECONDS)`` sets the deadline of the crawl's own
  cancel scope. When it passes, every worker is cancelled wherever it is, the HTTP clients
  are closed, and ``crawl()`` *returns* with ``finish_reason == "deadline"``.

  The alternative, ``with trio.move_on_after(SECONDS): await crawler.crawl()``, cancels
  the crawl from outside. It stops the crawl just as promptly, but ``crawl()`` sees the
  cancellation pass through it and cannot tell it from any other: it records
  ``finish_reason == "interrupted"``, and only the caller's ``cancelled_caught`` knows a
  deadline was the cause. Use ``max_time`` when the deadline belongs to the crawl; use an
  outer scope when it belongs to something bigger (a request handler, a whole job).
- **Ctrl-C.** ``trio.open_signal_receiver`` turns SIGINT and SIGTERM into values that a
  sibling task reads, instead of a ``KeyboardInterrupt`` raised at some arbitrary point. That
  task calls ``crawler.stop()``, which cancels the crawl's scope; the crawl ends like a
  deadline, ``finish_reason`` says ``interrupted``, and the example exits with status 130.
- **State outlives the run.** Each ``fetched <url> <status>`` line is printed and flushed
  from ``on_record`` the moment its record is made, so whatever way the crawl ends, the
  lines are exactly the records done so far, none of them cut in half. After the crawl the
  example prints ``finish reason: ...`` and the chapter's report, built from
  ``crawler.done`` and ``crawler.statistics()``.

Run it (without a URL it serves the bundled demo site in a child process)::

    python examples/06_deadline_and_ctrl_c.py [ROOT_URL] [--max-time SECONDS] [--max-tasks N]

The demo site is fast: ten workers crawl it well inside the default two seconds. To see the
deadline hit, crawl it with one worker and a short deadline (``--max-tasks 1 --max-time
0.1``); to try Ctrl-C, give it one worker and a long deadline (``--max-tasks 1 --max-time
60``) and press Ctrl-C while the lines scroll.
"""

from __future__ import annotations

from _demo import demo_root  # first: it explains a missing dependency

import argparse
import functools
import signal
import sys
from collections.abc import AsyncIterator

import trio

from trio_crawler import Crawler, FetchStatistic
from trio_crawler._report import format_report

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a process Ctrl-C stopped


def print_record(record: FetchStatistic) -> None:
    # Flushed at once, so a reader of a pipe sees each whole line as it is made.
    print(f"fetched {record.url} {record.status}", flush=True)


async def stop_on_signal(signals: AsyncIterator[int], crawler: Crawler) -> None:
    """Stop the crawl at the first SIGINT or SIGTERM; ignore repeats until it has ended."""
    async for signum in signals:
        print(f"{signal.Signals(signum).name}: stopping the crawl", file=sys.stderr, flush=True)
        crawler.stop()


async def main(root: str, *, max_time: float, max_tasks: int) -> Crawler:
    crawler = Crawler([root], max_tasks=max_tasks, max_time=max_time, on_record=print_record)
    # Open the receiver before the crawl starts, so no signal finds the default handler.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_on_signal, signals, crawler)
            await crawler.crawl()
            # The crawl is over, whichever way: the signal watcher has nothing left to stop.
            nursery.cancel_scope.cancel("crawl over")
    return crawler


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", help="the URL to crawl (default: the demo site)")
    parser.add_argument("--max-time", type=float, default=2.0, help="deadline, in seconds")
    parser.add_argument("--max-tasks", type=int, default=10, help="concurrent workers")
    args = parser.parse_args()
    with demo_root([sys.argv[0], args.root] if args.root else [sys.argv[0]]) as root:
        crawler = trio.run(
            functools.partial(main, root, max_time=args.max_time, max_tasks=args.max_tasks)
        )
    print(f"finish reason: {crawler.finish_reason}")
    report = format_report(
        crawler.done,
        elapsed=crawler.elapsed,
        max_tasks=crawler.max_tasks,
        todo=crawler.statistics().todo,
        finish_reason=crawler.finish_reason or "unknown",
    )
    print(report, end="", flush=True)
    sys.exit(EXIT_INTERRUPTED if crawler.finish_reason == "interrupted" else 0)

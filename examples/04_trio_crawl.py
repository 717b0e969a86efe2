"""The library on Trio: make a ``Crawler``, ``trio.run`` its crawl, read its records.

What it shows:

- ``trio_crawler.Crawler(roots, max_tasks=10)`` is the Trio engine; ``await
  crawler.crawl()`` returns when nothing is left to fetch. There is no event loop to create
  and no queue to ``join()``: ``trio.run`` runs ``main`` and returns when it does.
- ``crawler.done`` holds one record (a ``FetchStatistic``) per finished URL, in the order
  the URLs finished; failures from the web are records, never exceptions.
- ``on_record`` streams the same records while the crawl runs. It is a plain function,
  called synchronously as each record is made, so it must not block: here it only counts
  them and prints a progress line to stderr every hundred.

Run it (without a URL it serves the bundled demo site in a child process)::

    python examples/04_trio_crawl.py [ROOT_URL]

Output: one ``fetched <url> <status>`` line per record, then ``<N> urls fetched`` with the
number of redirects and errors (error statuses and network failures).
"""

from __future__ import annotations

from _demo import demo_root  # first: it explains a missing dependency

import sys

import trio

import trio_crawler
from trio_crawler import FetchStatistic

PROGRESS_EVERY = 100  # records between progress lines; the demo site makes 333


def summary(records: list[FetchStatistic]) -> str:
    """``<N> urls fetched, <R> redirects, <E> errors``: the chapter's kinds, counted."""
    redirects = sum(record.kind == "redirect" for record in records)
    errors = sum(record.kind in ("error", "fail") for record in records)
    return f"{len(records)} urls fetched, {redirects} redirects, {errors} errors"


async def main(root: str) -> None:
    streamed = 0

    def on_record(record: FetchStatistic) -> None:
        # Runs inside the crawl, between two checkpoints: keep it quick and synchronous.
        nonlocal streamed
        streamed += 1
        if streamed % PROGRESS_EVERY == 0:
            print(f"... {streamed} records so far", file=sys.stderr, flush=True)

    crawler = trio_crawler.Crawler([root], max_tasks=10, on_record=on_record)
    await crawler.crawl()

    for record in crawler.done:
        print(f"fetched {record.url} {record.status}")
    print(summary(crawler.done))
    print(f"({streamed} records streamed through on_record, {crawler.elapsed:.2f} s)")


if __name__ == "__main__":
    with demo_root() as root:
        trio.run(main, root)

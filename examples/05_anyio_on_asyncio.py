"""The same crawl on AnyIO, run on asyncio (or on Trio with ``--backend trio``).

What differs from ``04_trio_crawl.py``: only the import and the runner.

- ``from trio_crawler.engine_anyio import Crawler`` instead of ``trio_crawler.Crawler``.
  Every engine's ``Crawler`` takes the same arguments and has the same attributes
  (``done``, ``seen_urls``, ``finish_reason``, ``elapsed``, ``stop()``), so ``main`` is
  the code of example 04, word for word.
- ``anyio.run(main, root, backend="asyncio")`` instead of ``trio.run(main, root)``. AnyIO
  runs the engine's task group, memory object stream and cancel scopes on whichever
  backend is named; nothing in ``main`` knows which one it is on.

Run it (without a URL it serves the bundled demo site in a child process)::

    python examples/05_anyio_on_asyncio.py [ROOT_URL] [--backend {asyncio,trio}]

Output: as example 04, one ``fetched <url> <status>`` line per record, then ``<N> urls
fetched`` with the number of redirects and errors.
"""

from __future__ import annotations

from _demo import demo_root  # first: it explains a missing dependency

import argparse
import sys

import anyio

from trio_crawler import FetchStatistic
from trio_crawler.engine_anyio import Crawler

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

    crawler = Crawler([root], max_tasks=10, on_record=on_record)
    await crawler.crawl()

    for record in crawler.done:
        print(f"fetched {record.url} {record.status}")
    print(summary(crawler.done))
    print(f"({streamed} records streamed through on_record, {crawler.elapsed:.2f} s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", help="the URL to crawl (default: the demo site)")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    with demo_root([sys.argv[0], args.root] if args.root else [sys.argv[0]]) as root:
        anyio.run(main, root, backend=args.backend)

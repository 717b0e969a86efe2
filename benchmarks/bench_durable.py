"""What ``--state`` costs: CPU per page, a million-URL frontier's memory, and a recrawl.

Three questions, each answered side by side with its yardstick in the same run, because
this machine's speed moves by half within minutes and only ratios mean much:

1. **The crawl's CPU with the state file.** The 10 000-page synthetic site on nginx,
   crawled by the command line on the trio engine at ``--max-tasks 100``, in memory and
   with ``--state`` (a fresh file each time), alternating, ``--rounds`` pairs. CPU is the
   child's user + system time (GNU time's ``wait4``), so the worker threads that write the
   file count; the ratio is taken per pair and its median reported. Target: at most 1.2.
2. **A recrawl of the unchanged site.** The state file of the last ``--state`` crawl,
   crawled again with ``--recrawl``: nginx answers each conditional request with 304
   (its ``ETag`` and ``Last-Modified`` are the file's), so the recrawl receives no page
   bodies. Bytes are the records' ``size`` (response bodies as received; headers,
   about 200 bytes per response either way, are not counted) and CPU as above.
3. **A million URLs in the frontier, through the store.** In this process (``--urls``,
   default 1 000 000): the core (``CrawlState``) over a ``StoredFrontier`` on a fresh
   file, fed pages of 100 links (80 new, the same 20 on every page) until that many URLs
   are seen, exactly as ``bench_state.py`` feeds the in-memory core. The store's
   transactions run in this thread (the crawl runs them in a worker thread; the work is
   the same). Then the file is closed and opened again, and the time to the first request
   handed out is the time to resume. Peak RSS is this process's ``ru_maxrss``
   (interpreter and imports included). Target: at most 60 MiB.

Usage::

    python benchmarks/bench_durable.py [--pages 10000] [--rounds 3] [--urls 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from measure import markdown_table, run_main, run_measured
from nginx import serve_directory
from synthetic_site import generate

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

T = TypeVar("T")
CRAWL_TIMEOUT = 900.0


def crawl_command(root: str, output: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trio_crawler",
        "--max-tasks",
        "100",
        "-q",
        "--no-progress",
        "--ignore-robots",
        "-o",
        str(output),
        *extra,
        root,
    ]


def records(output: Path) -> list[dict[str, Any]]:
    with output.open() as lines:
        return [json.loads(line) for line in lines]


def crawl_part(pages: int, rounds: int) -> tuple[str, bool]:
    """Parts 1 and 2: the crawl in memory against --state, then the recrawl."""
    rows = []
    ratios = []
    passed = True
    with tempfile.TemporaryDirectory(prefix="bench-durable-") as work:
        site = generate(Path(work, "site"), pages=pages)
        with serve_directory(site.directory) as root:
            state = Path(work, "crawl.db")
            for round_number in range(1, rounds + 1):
                costs = {}
                for mode in ("memory", "state"):
                    output = Path(work, f"{mode}.jsonl")
                    extra = ("--state", str(state)) if mode == "state" else ()
                    if mode == "state":
                        for leftover in Path(work).glob("crawl.db*"):
                            leftover.unlink()
                    cost = run_measured(crawl_command(root, output, *extra), timeout=CRAWL_TIMEOUT)
                    made = len(records(output))
                    ok = cost.returncode == 0 and made == site.pages
                    passed &= ok
                    costs[mode] = cost
                    rows.append(
                        [
                            round_number,
                            mode,
                            f"{cost.cpu_s * 1000 / made:.2f}" if made else "-",
                            f"{cost.peak_rss_mib:.1f}",
                            f"{cost.wall_s:.1f}",
                            made,
                            f"{cost.steal_percent:.0f}%",
                        ]
                    )
                ratios.append(costs["state"].cpu_s / costs["memory"].cpu_s)
            first_bytes = sum(record["size"] for record in records(Path(work, "state.jsonl")))
            first_cpu = costs["state"].cpu_s
            recrawl_output = Path(work, "recrawl.jsonl")
            recrawl = run_measured(
                crawl_command(root, recrawl_output, "--state", str(state), "--recrawl"),
                timeout=CRAWL_TIMEOUT,
            )
            again = records(recrawl_output)
            not_modified = sum(1 for record in again if record["status"] == 304)
            passed &= recrawl.returncode == 0 and len(again) == site.pages
    table = markdown_table(
        ["round", "crawl", "CPU ms/page", "peak RSS MiB", "wall s", "records", "steal"], rows
    )
    recrawl_table = markdown_table(
        ["crawl", "records", "304s", "body bytes received", "CPU s"],
        [
            ["first (--state)", site.pages, 0, first_bytes, f"{first_cpu:.2f}"],
            [
                "--recrawl, site unchanged",
                len(again),
                not_modified,
                sum(record["size"] for record in again),
                f"{recrawl.cpu_s:.2f}",
            ],
        ],
    )
    text = (
        f"### --state against memory: {site.pages} pages, trio engine, --max-tasks 100\n\n"
        f"{table}\n\nCPU with --state / in memory, per pair: "
        + ", ".join(f"{ratio:.3f}" for ratio in ratios)
        + f"; median **{statistics.median(ratios):.3f}** (target: at most 1.2).\n\n"
        f"### Recrawl of the unchanged site\n\n{recrawl_table}\n\n"
        f"Recrawl CPU / first crawl's: {recrawl.cpu_s / first_cpu:.3f}."
    )
    return text, passed


def run_now(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the store's flush, with transactions run in
    this thread) to its end."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    raise RuntimeError("the coroutine suspended")


async def in_this_thread(function: Callable[[], T]) -> T:
    return function()


def frontier_part(urls: int) -> tuple[str, bool]:
    """Part 3: a frontier of ``urls`` URLs in the file; memory, and the time to resume."""
    from trio_crawler._config import CrawlConfig
    from trio_crawler._events import Response
    from trio_crawler._state import CrawlState
    from trio_crawler._stores import open_store

    navigation = "".join(f'<a href="/nav/{n}">n</a>' for n in range(20))

    def body(page: int) -> bytes:
        fresh = "".join(f'<a href="/p/{page}/{n}">l</a>' for n in range(80))
        return f"<html><body>{navigation}{fresh}</body></html>".encode()

    def open_crawl(path: Path) -> tuple[CrawlState, Any]:
        config = CrawlConfig.create(["http://site.test/"], obey_robots=False, state=str(path))
        store = open_store(config)
        state = CrawlState(config, frontier=store, resumed=store.file.resumed())
        store.limit_counts = state.limit_counts
        return state, store

    with tempfile.TemporaryDirectory(prefix="bench-durable-") as work:
        path = Path(work, "frontier.db")
        state, store = open_crawl(path)
        started = time.process_time()
        page = 0
        run_now(store.flush(in_this_thread, starved=True))
        while store.seen_count < urls:
            request = state.next_request(now=0.0)
            if request is None:
                run_now(store.flush(in_this_thread, starved=True))
                continue
            response = Response(status=200, content_type="text/html", body=body(page))
            state.attempt_finished(request, response, now=0.0)
            page += 1
            if page % 64 == 0:
                run_now(store.flush(in_this_thread))
        run_now(store.flush(in_this_thread))
        fill_cpu = time.process_time() - started
        seen, queued = store.seen_count, store.queued
        store.close()
        peak_after_fill = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        size = sum(part.stat().st_size for part in Path(work).glob("frontier.db*"))

        wall = time.perf_counter()
        state, store = open_crawl(path)
        run_now(store.flush(in_this_thread, starved=True))
        first = state.next_request(now=0.0)
        resume_s = time.perf_counter() - wall
        resumed_queued = store.queued
        store.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    passed = first is not None and resumed_queued == queued
    table = markdown_table(
        [
            "URLs seen",
            "queued",
            "pages fed",
            "fill CPU s",
            "file MiB",
            "peak RSS MiB (after fill)",
            "peak RSS MiB (after resume)",
            "resume s (open to first request)",
        ],
        [
            [
                seen,
                queued,
                page,
                f"{fill_cpu:.1f}",
                f"{size / 2**20:.0f}",
                f"{peak_after_fill:.1f}",
                f"{peak:.1f}",
                f"{resume_s:.3f}",
            ]
        ],
    )
    return (
        f"### A {urls:,}-URL frontier in the state file\n\n{table}\n\n"
        "Peak RSS is the whole process (Python, the package and its imports); target: at "
        "most 60 MiB.",
        passed and peak <= 60,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--only", choices=["crawl", "frontier"], default=None)
    return parser


def run(args: argparse.Namespace) -> tuple[str, bool]:
    parts = []
    passed = True
    if args.only in (None, "frontier"):
        text, ok = frontier_part(args.urls)
        parts.append(text)
        passed &= ok
    if args.only in (None, "crawl"):
        text, ok = crawl_part(args.pages, args.rounds)
        parts.append(text)
        passed &= ok
    return "\n\n".join(parts), passed


def main() -> None:
    text, passed = run(build_parser().parse_args())
    print(text)
    if not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    run_main(main, "bench_durable")

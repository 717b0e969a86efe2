"""How long a ``--state`` crawl of many hosts takes to resume.

A broad crawl's state file holds thousands of origins (each with its robots.txt rules) and
their queues. Resuming it opens the file, checks it, restores every origin, loads the first
window of queued URLs and hands out the first request: this measures that, for a file of
``--hosts`` hosts by ``--pages`` queued pages, written through the store itself (each
host's robots.txt answered 404, its root and pages queued). The issue's bound: 10 000 hosts
by 10 pages resume in under a second.

    .venv/bin/python benchmarks/bench_resume_broad.py [--hosts 10000] [--pages 10]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from trio_crawler._config import CrawlConfig
from trio_crawler._events import Response
from trio_crawler._frontier import Offer, StoreRuntime
from trio_crawler._state import CrawlState
from trio_crawler._store_sqlite import StoredFrontier, open_state_store


def _inline(function: Any) -> Any:
    raise AssertionError("driven by hand: nothing runs in a thread")


def _runtime(state: CrawlState) -> StoreRuntime:
    return StoreRuntime(
        clock=lambda: 0.0,
        wall_offset=time.time(),
        run_in_thread=_inline,
        shielded=_inline,
        wake=lambda: None,
        on_lost=lambda exc: None,
        scheduling=lambda: not state.scheduling_stopped,
        limit_counts=lambda: state.limit_counts,
    )


def _open(config: CrawlConfig) -> tuple[CrawlState, StoredFrontier]:
    store = open_state_store(config)
    state = CrawlState(config, frontier=store, resumed=store.resumed())
    store.use_runtime(_runtime(state))
    return state, store


def write_state(path: Path, config: CrawlConfig, pages: int) -> None:
    """A crawl of ``config``'s roots with every origin's robots.txt known (404) and
    ``pages`` more URLs queued per host, kept in ``path``."""
    state, store = _open(config)
    store.commit_waiting()
    absent = Response(status=404, content_type="text/plain", body=b"")
    roots = []  # handed out after their robots.txt, and given back unfetched
    while (request := state.next_request(now=0.0)) is not None:
        if request.robots:
            state.attempt_started(request, now=0.0)
            state.attempt_finished(request, absent, now=0.0)
        else:
            roots.append(request)
    for request in roots:
        state.put_back(request)
    store.commit_waiting()
    offers = tuple(
        Offer(
            tuple(f"{root}p{number}" for number in range(pages)),
            depth=1,
            redirects_left=10,
            referrer=root,
        )
        for root in config.roots
    )
    state._offer(offers)  # links alone, as a page's would be offered
    store.commit_waiting()
    store.close()


def resume(config: CrawlConfig) -> float:
    """Seconds from opening the file to the first request handed out."""
    started = time.perf_counter()
    state, store = _open(config)
    store.commit_waiting()  # loads the first window
    request = state.next_request(now=0.0)
    elapsed = time.perf_counter() - started
    assert request is not None, "nothing to resume"
    assert not request.robots, request
    store.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    roots = [f"http://h{index}.test/" for index in range(args.hosts)]
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as directory:
        path = Path(directory) / "crawl.db"
        config = CrawlConfig.create(roots, state=str(path))
        started = time.perf_counter()
        write_state(path, config, args.pages)
        written = time.perf_counter() - started
        size = path.stat().st_size
        with sqlite3.connect(path) as db:
            (origins,) = db.execute("SELECT count(*) FROM origins").fetchone()
        assert origins == args.hosts, f"{origins} origins kept of {args.hosts}"
        times = sorted(resume(config) for _ in range(args.rounds))
    queued = args.hosts * (args.pages + 1)
    print(
        f"{args.hosts} hosts, {queued} URLs queued, file {size / 2**20:.1f} MiB "
        f"(written in {written:.1f} s): resumed to the first request in "
        f"{times[len(times) // 2]:.3f} s (median of {args.rounds}; "
        f"{', '.join(f'{t:.3f}' for t in times)})"
    )


if __name__ == "__main__":
    main()

"""The report of a long ``--state`` crawl: time and peak memory against its record count.

A state file exists so that a long crawl's frontier and records need not fit in memory,
and the report at the end of every run lists every record of the crawl, sorted by URL.
This writes a finished crawl of ``--records`` pages into a state file (through the file's
own transactions, as a crawl would), then runs the command on it, which makes no request
and prints the report, and measures the process: wall time, CPU and peak RSS (GNU time).
Each count runs ``--rounds`` times; with ``--snapshot DIR`` (a PYTHONPATH entry holding
another ``trio_crawler``, e.g. ``git archive REV trio_crawler | tar -x -C DIR``) that
package runs too, alternating with this one, on a copy of the same file, and both
reports must list the same lines.

From the repository root::

    .venv/bin/python benchmarks/bench_report.py [--records 50000,200000] [--rounds 3]
        [--snapshot DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import (
    ChildCost,
    compiled,
    markdown_table,
    package_identity,
    run_main,
    run_measured,
    snapshot_package,
)
from trio_crawler._events import FetchRequest
from trio_crawler._frontier import Completion, Offer
from trio_crawler._statefile import Batch, StateFile
from trio_crawler._stats import FetchStatistic

_ROOT = "http://127.0.0.1:9/"
_PER_TRANSACTION = 500
_TIMEOUT = 600.0


def write_finished_crawl(path: Path, records: int) -> None:
    """A finished crawl of ``records`` pages over 250 hosts: the root offers them all,
    and each is done with a record, 500 to a transaction."""
    urls = [_ROOT] + [f"http://127.0.1.{n % 250 + 1}:9/p/{n}.html" for n in range(1, records)]
    state = StateFile(str(path), roots=[_ROOT], options={})
    try:
        batch = Batch(completions=[Completion(None, False, None, (Offer(tuple(urls), 0, 10),))])
        state.commit(batch)
        for start in range(0, records, _PER_TRANSACTION):
            done = [
                Completion(
                    FetchRequest(url=url, redirects_left=10, depth=1),
                    True,
                    FetchStatistic(
                        url=url,
                        status=200,
                        size=5000,
                        content_type="text/html",
                        encoding="utf-8",
                        num_urls=10,
                        depth=1,
                        fetched_at="2026-11-28T00:00:00.000Z",
                        elapsed=0.01,
                    ),
                )
                for url in urls[start : start + _PER_TRANSACTION]
            ]
            state.commit(Batch(completions=done))
        assert state.counts() == (0, records), state.counts()
    finally:
        state.close()


def report(package: Path, state: Path, out: Path) -> ChildCost:
    """Run the command on the finished crawl in ``state``; its report goes to ``out``."""
    cost = run_measured(
        [sys.executable, "-m", "trio_crawler", "--no-progress", "--state", str(state)],
        timeout=_TIMEOUT,
        cwd=out.parent,  # not the repository's: python -m puts the working directory first
        env={"PYTHONPATH": str(package), "PATH": "/usr/bin:/bin"},
        stdout=out,
    )
    if cost.returncode != 0 or cost.timed_out:
        raise SystemExit(f"the report run failed ({cost}); see {out}")
    return cost


def _listing(out: Path) -> list[str]:
    """The report's lines but the ones that change from run to run (rate, date)."""
    return [
        line
        for line in out.read_text().splitlines()
        if not line.startswith(("Finished ", "Date: "))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default="50000,200000", help="comma-separated counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--snapshot", type=Path, help="another package to run alternately")
    args = parser.parse_args()
    counts = [int(count) for count in args.records.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-report-") as directory:
        work = Path(directory)
        packages = {"this": snapshot_package(work / "this")}
        if args.snapshot is not None:
            packages = {"snapshot": compiled(args.snapshot), **packages}
        for name, package in packages.items():
            print(f"{name}: {package_identity(package)}")
        for count in counts:
            original = work / f"crawl-{count}.db"
            write_finished_crawl(original, count)
            costs: dict[str, list[ChildCost]] = {name: [] for name in packages}
            listings = {}
            for _ in range(args.rounds):
                for name, package in packages.items():
                    state = work / f"{name}.db"
                    shutil.copyfile(original, state)
                    out = work / f"{name}.txt"
                    costs[name].append(report(package, state, out))
                    listings[name] = _listing(out)
            for name, listing in listings.items():
                assert len(listing) - 6 == count, f"{name}: {len(listing) - 6} URL lines"
                assert listing == listings["this"], f"{name}: another report"
            for name, runs in costs.items():
                rows.append(
                    [
                        f"{count:,}",
                        name,
                        f"{statistics.median(c.wall_s for c in runs):.2f}",
                        f"{statistics.median(c.cpu_s for c in runs):.2f}",
                        f"{statistics.median(c.peak_rss_mib for c in runs):.0f}",
                    ]
                )
    headers = ["records", "package", "wall s", "CPU s", "peak RSS MiB"]
    print(f"medians of {args.rounds} runs each, alternating")
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    run_main(main, "bench_report")

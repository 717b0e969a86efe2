"""A server that stops answering in the middle of a polite crawl, and what it sees of it.

Why: a crawl with ``--max-per-host 1`` and a delay promises that no server has two of its
requests at once. That holds while the server answers. When it does not (a loaded machine,
a stalled process, a backend stuck on a lock), a request the crawler gives up on at
``--timeout`` is still the server's: the server reads it, and works on it, once it runs
again, and so it does every retry that was sent meanwhile. This benchmark stops the broad
benchmark's nginx (``SIGSTOP``) for ``--stall`` seconds, ``--stall-at`` seconds into a
crawl of its many-host site (``broad_site.py``: hosts on loopback addresses, each crawled
one request at a time with ``--delay``), starts it again (``SIGCONT``), and reads what
nginx logged once the crawl is over: the most requests one host had at once, the gaps
between two request starts to one host shorter than the delay, and every request; and,
from the crawler's own records, the URLs that ended as failures.

With ``--snapshot DIR`` (a PYTHONPATH entry holding another ``trio_crawler``, e.g. ``git
archive REV trio_crawler | tar -x -C DIR``) that package crawls the same site too, in
turn with this one, round after round.

From the repository root::

    .venv/bin/python benchmarks/bench_stall.py [--hosts 20] [--pages 10] [--delay 1]
        [--timeout 5] [--stall 20] [--stall-at 3] [--rounds 1] [--snapshot DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_broad import choose_port, serve_hosts
from benchmarks.bench_engines import snapshot_environment
from benchmarks.broad_site import GAP_TOLERANCE, BroadMetrics, generate, measure, parse_log
from benchmarks.measure import (
    compiled,
    markdown_table,
    package_identity,
    run_main,
    run_measured,
    snapshot_package,
)

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Sequence

    from benchmarks.broad_site import BroadSite, Request

# A crawl that has not ended this long after its stall did is stuck: it is killed.
_SLACK = 120.0


def most_within(requests: Sequence[Request], seconds: float) -> int:
    """The most requests one host received within ``seconds`` of each other, to the log's
    millisecond: at most 1 in a crawl that kept every host to a delay of ``seconds``. nginx
    reads what piled up while it was stopped one connection after another, so these come
    a millisecond or two apart, not at once: a count of starts, not of overlaps."""
    by_host: dict[str, list[float]] = {}
    for request in requests:
        by_host.setdefault(request.host, []).append(request.start)
    most = 0
    for starts in by_host.values():
        starts.sort()
        first = 0
        for last, start in enumerate(starts):
            while start - starts[first] >= seconds - GAP_TOLERANCE:
                first += 1
            most = max(most, last - first + 1)
    return most


@dataclass(frozen=True, slots=True, kw_only=True)
class StallRun:
    """One crawl of the site across a stall.

    Attributes:
        label: Which package crawled.
        within_delay: :func:`most_within` the delay.
        metrics: What nginx's log says of the crawl.
        failed: URLs whose record is a failure (no status): every attempt timed out.
        records: Records the crawler wrote.
        wall_s: The crawl's wall time.
        returncode: The crawler's exit status.
    """

    label: str
    within_delay: int
    metrics: BroadMetrics
    failed: int
    records: int
    wall_s: float
    returncode: int


def stall_nginx(process: subprocess.Popen[bytes], at: float, seconds: float) -> threading.Thread:
    """Stop ``process`` ``at`` seconds from now for ``seconds``, in a thread of its own;
    the caller joins it before it stops nginx (a stopped process ignores SIGTERM)."""

    def stall() -> None:
        time.sleep(at)
        os.kill(process.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(process.pid, signal.SIGCONT)

    thread = threading.Thread(target=stall, name="stall-nginx", daemon=True)
    thread.start()
    return thread


def crawl_across_a_stall(
    site: BroadSite, args: argparse.Namespace, *, label: str, env: dict[str, str], work: Path
) -> StallRun:
    """Serve ``site`` with a fresh nginx, crawl it with our CLI as ``env`` has it, stopping
    nginx for the stall; read nginx's log and our records."""
    work.mkdir(parents=True, exist_ok=True)
    roots = work / "roots.txt"
    roots.write_text("".join(f"{root}\n" for root in site.roots))
    log, records = work / "access.log", work / "records.jsonl"
    command = [
        sys.executable,
        "-m",
        "trio_crawler",
        "-q",
        "--no-progress",
        "-o",
        str(records),
        "--delay",
        f"{args.delay:g}",
        "--max-per-host",
        "1",
        "--timeout",
        f"{args.timeout:g}",
        "--max-tasks",
        str(len(site.hosts)),
        "-i",
        str(roots),
    ]
    with serve_hosts(site, log) as served:
        stalling = stall_nginx(served.process, args.stall_at, args.stall)
        try:
            cost = run_measured(
                command,
                timeout=args.stall_at + args.stall + site.pages_per_host * args.delay + _SLACK,
                cwd=work,
                env=env,
                stdout=work / "report.txt",
                stderr=work / "stderr.txt",
            )
        finally:
            stalling.join()
    with log.open() as lines:
        requests = parse_log(lines)
    metrics = measure(
        requests, hosts=site.hosts, pages_per_host=site.pages_per_host, delay=args.delay
    )
    written = [json.loads(line) for line in records.read_text().splitlines() if line]
    return StallRun(
        label=label,
        within_delay=most_within(requests, args.delay),
        metrics=metrics,
        failed=sum(record["status"] is None for record in written),
        records=len(written),
        wall_s=cost.wall_s,
        returncode=cost.returncode,
    )


HEADERS = [
    "package",
    "round",
    "most requests to one host within D",
    "most in flight at once",
    "gaps < D - 10 ms",
    "smallest gap s",
    "requests",
    "records",
    "failed (every try timed out)",
    "wall s",
    "exit",
]


def table(runs: Sequence[tuple[int, StallRun]]) -> str:
    rows = [
        [
            run.label,
            number,
            run.within_delay,
            run.metrics.max_in_flight,
            run.metrics.short_gaps,
            "-" if run.metrics.min_gap is None else f"{run.metrics.min_gap:.3f}",
            run.metrics.requests,
            run.records,
            run.failed,
            f"{run.wall_s:.1f}",
            run.returncode,
        ]
        for number, run in runs
    ]
    return markdown_table(HEADERS, rows)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--pages", type=int, default=10, help="per host")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds between requests")
    parser.add_argument("--timeout", type=float, default=5.0, help="our --timeout, s")
    parser.add_argument("--stall", type=float, default=20.0, help="seconds nginx is stopped")
    parser.add_argument("--stall-at", type=float, default=3.0, help="seconds into the crawl")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--package", type=Path, help="PYTHONPATH entry of the package under test (run.py's)"
    )
    parser.add_argument("--snapshot", type=Path, help="another package to crawl in turn")
    parser.add_argument("--keep", type=Path, help="work in DIR and keep it (logs, records)")
    return parser


def run(args: argparse.Namespace) -> tuple[str, bool]:
    """Crawl across the stall with each package; return the markdown, and whether every
    crawl ended well (exit 0, every URL a record)."""
    with tempfile.TemporaryDirectory(prefix="bench-stall-") as tmp:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)
        site = generate(
            work / "site", hosts=args.hosts, pages=args.pages, port=choose_port(args.hosts)
        )
        this = compiled(args.package) if args.package else snapshot_package(work / "this")
        packages = [("this package", this)]
        if args.snapshot is not None:
            packages.append(("snapshot", compiled(args.snapshot)))
        runs: list[tuple[int, StallRun]] = []
        for number in range(1, args.rounds + 1):
            for label, path in packages:
                print(f"bench_stall: round {number}, {label} ...", file=sys.stderr, flush=True)
                runs.append(
                    (
                        number,
                        crawl_across_a_stall(
                            site,
                            args,
                            label=label,
                            env=snapshot_environment(path),
                            work=work / f"{label.replace(' ', '-')}-{number}",
                        ),
                    )
                )
        identities = "; ".join(f"{label}: {package_identity(path)}" for label, path in packages)
    text = (
        "### A server that stalls\n\n"
        f"{args.hosts} hosts x {args.pages} pages, `--delay {args.delay:g} --max-per-host 1 "
        f"--timeout {args.timeout:g}`; nginx stopped {args.stall_at:g} s into each crawl for "
        f"{args.stall:g} s.\n\n{table(runs)}\n\nCode under test: {identities}."
    )
    ok = all(run.returncode == 0 and run.records == site.pages for _, run in runs)
    return text, ok


def main() -> None:
    text, ok = run(build_parser().parse_args())
    print(text)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    run_main(main, "bench_stall")

"""Every benchmark, one command: the tables printed, and saved under benchmarks/results/.

Ten parts, run in the order ``--only`` names them (all ten by default):

* ``synthetic``: our four engines, Scrapy and wget crawl the synthetic site, and
  ``floor.py`` measures what the libraries alone cost (``bench_engines.py``).
* ``docs``: the same tools crawl the Python docs from Debian's python3.11-doc
  (``bench_engines.py``).
* ``slow``: a server that answers after 1 s, crawled at max_tasks 10, 100 and 1000, and
  by ``floor.py``'s minimal crawler at 100 and 1000 (``bench_slow.py``).
* ``state``: the core alone, a 1 000 000-URL frontier (``bench_state.py``, in a fresh
  process that imports a snapshot of the package).
* ``durable``: what ``--state`` costs: the synthetic site crawled with and without it,
  a recrawl of it, and a 1 000 000-URL frontier in the state file (``bench_durable.py``,
  likewise in a fresh process).
* ``handler``: what a page handler costs: the synthetic site crawled with a handler that
  reads each page's title from ``page.tree`` and returns one item, against the same crawl
  without, and the parses per page (``bench_handler.py``, in a fresh process).
* ``cluster``: the shared frontier on Redis: one process with ``--frontier`` against the
  same crawl in memory on the synthetic site, and the slow server crawled by 1, 2 and 4
  processes sharing one crawl, with Redis's round trips and CPU per page
  (``bench_cluster.py``; it starts its own ``redis-server``).
* ``pushback``: servers that push back (429, 503, ``Retry-After``, an in-flight cap),
  crawled by our CLI with and without ``--no-adapt``, Scrapy with and without AutoThrottle
  and Crawlee; its numbers never fail the run (``bench_pushback.py``).
* ``broad``: many hosts on 127.0.x.y crawled politely (a delay, one request per host):
  our CLI in memory, with ``--state`` and with ``--frontier`` in 3 processes, Scrapy with
  its broad-crawl settings and Crawlee, judged by nginx's log; then our CPU per request
  across 100, 1000 and 5000 hosts; its numbers never fail the run (``bench_broad.py``).
* ``stall``: the broad site's nginx stopped for a while in the middle of a polite crawl,
  and what it saw once it ran again: the most requests one host got within a delay
  (``bench_stall.py``).

The markdown goes to stdout at the end and, section by section as each part finishes, to
``benchmarks/results/<name>.md`` (``--out NAME``; by default a name with the date and
time), so a failure late in a long run keeps the earlier tables; every single crawl is
also appended to ``<name>.jsonl``. Progress goes to stderr. The exit status is 1 if any
check failed (a tool that did not find every page, a crawl that failed), after writing.

Set up once with ``bash benchmarks/setup.sh``, then, from the repository root::

    .venv/bin/python benchmarks/run.py [--pages 10000] [--rounds 3]
        [--only synthetic,docs,slow,state,durable,handler,cluster,pushback,broad,stall]
        [--out results.md]

Defaults took 33 minutes on the 2-CPU machine (see README.md for a smoke run).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script: make the `benchmarks` folder importable as a package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import (
    bench_broad,
    bench_cluster,
    bench_engines,
    bench_pushback,
    bench_slow,
    bench_stall,
)
from benchmarks.bench_engines import BenchmarkError, parse_our_python, snapshot_environment
from benchmarks.measure import GNU_TIME, parts_argument, run_main, snapshot_package
from benchmarks.nginx import NginxError

PARTS = (
    "synthetic",
    "docs",
    "slow",
    "state",
    "durable",
    "handler",
    "cluster",
    "pushback",
    "broad",
    "stall",
)
RESULTS = Path(__file__).resolve().parent / "results"
BENCH_STATE = Path(__file__).resolve().parent / "bench_state.py"
BENCH_DURABLE = Path(__file__).resolve().parent / "bench_durable.py"
BENCH_HANDLER = Path(__file__).resolve().parent / "bench_handler.py"
# bench_state.py runs in under a minute, bench_durable.py in about five, bench_handler.py
# in about two; more is a hang.
STATE_TIMEOUT = 2400.0


def _numbers(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated whole numbers, not {text!r}"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Run the benchmarks; print the tables and save them under benchmarks/results/.",
    )
    parser.add_argument("--pages", type=int, default=10_000, help="synthetic site size")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tool (medians)")
    parser.add_argument(
        "--only",
        type=parts_argument(PARTS),
        default=list(PARTS),
        metavar="PARTS",
        help=f"comma-separated, from {','.join(PARTS)} (default: all, in that order)",
    )
    parser.add_argument(
        "--out",
        help="results file name in benchmarks/results/ (or a path); default: the date and time",
    )
    crawl = parser.add_argument_group("synthetic and docs")
    crawl.add_argument("--max-tasks", type=int, default=100, help="our --max-tasks, Scrapy's")
    crawl.add_argument(
        "--our-python",
        action="append",
        type=parse_our_python,
        metavar="LABEL=PATH",
        help="interpreter for our CLI (repeatable; the first runs every engine, the others "
        "--extra-engines; default: this one)",
    )
    crawl.add_argument(
        "--extra-engines",
        nargs="+",
        choices=bench_engines.ENGINES,
        default=["trio"],
        metavar="ENGINE",
    )
    crawl.add_argument("--no-scrapy", action="store_true")
    crawl.add_argument("--no-wget", action="store_true")
    crawl.add_argument("--no-floor", action="store_true", help="leave floor.py out (all parts)")
    slow = parser.add_argument_group("slow")
    slow.add_argument("--slow-pages", type=int, default=2000)
    slow.add_argument("--slow-max-tasks", type=_numbers, default=[10, 100, 1000], metavar="N,N,...")
    slow.add_argument("--slow-delay", type=float, default=1.0)
    slow.add_argument("--slow-fanout", type=int, default=bench_slow.DEFAULT_FANOUT)
    slow.add_argument("--slow-rounds", type=int, help="default: --rounds")
    cluster = parser.add_argument_group("cluster (also --pages, --rounds, --max-tasks, --slow-*)")
    cluster.add_argument(
        "--cluster-processes",
        type=_numbers,
        default=[1, 2, 4],
        metavar="N,N,...",
        help="processes sharing one crawl of the slow server",
    )
    state = parser.add_argument_group("state")
    state.add_argument("--state-urls", type=int, default=1_000_000)
    pushback = parser.add_argument_group("pushback (also --no-scrapy)")
    defaults = bench_pushback.PushbackOptions()
    pushback.add_argument("--pushback-hosts", type=int, default=defaults.hosts)
    pushback.add_argument("--pushback-pages", type=int, default=defaults.pages, help="per host")
    pushback.add_argument(
        "--pushback-rate", type=float, default=defaults.rate, help="requests/s per host"
    )
    pushback.add_argument("--pushback-burst", type=int, default=defaults.burst)
    pushback.add_argument(
        "--pushback-cap", type=int, default=defaults.cap, help="in flight per host"
    )
    peers = parser.add_argument_group("pushback and broad")
    peers.add_argument(
        "--peers-python",
        help="the interpreter with Scrapy and Crawlee (default: benchmarks/.venv's)",
    )
    broad = parser.add_argument_group("broad (also --no-scrapy)")
    broad.add_argument("--broad-hosts", type=int, default=500)
    broad.add_argument("--broad-pages", type=int, default=20, help="per host")
    broad.add_argument("--broad-delay", type=float, default=1.0, help="seconds")
    broad.add_argument(
        "--broad-max-tasks", type=int, default=500, help="ours per process; Scrapy's"
    )
    broad.add_argument(
        "--broad-tools",
        type=parts_argument(bench_broad.TOOLS),
        default=list(bench_broad.TOOLS),
        metavar="TOOLS",
        help=f"comma-separated, from {','.join(bench_broad.TOOLS)}",
    )
    broad.add_argument(
        "--broad-mode",
        choices=bench_broad.MODES,
        default="both",
        help="the tools side by side, our CPU per request across hosts, or both",
    )
    broad.add_argument("--broad-scaling-hosts", type=_numbers, default=[100, 1000, 5000])
    return parser


def results_path(out: str | None) -> Path:
    """Where the markdown goes: a bare name lands in benchmarks/results/."""
    if out is None:
        return RESULTS / f"run-{datetime.datetime.now():%Y%m%d-%H%M%S}.md"
    path = Path(out)
    return RESULTS / path if path.parent == Path() else path


def run_part(
    part: str, args: argparse.Namespace, *, json_out: Path, package_path: Path
) -> tuple[str, bool]:
    """Run one part on the snapshot; return its markdown and whether its checks passed."""
    our_python = [f"{label}={python}" for label, python in args.our_python or []]
    if part in ("synthetic", "docs"):
        argv = ["--sites", part, "--pages", str(args.pages), "--rounds", str(args.rounds)]
        argv += ["--snapshot", str(package_path)]
        argv += ["--max-tasks", str(args.max_tasks), "--json-out", str(json_out)]
        argv += ["--extra-engines", *args.extra_engines]
        for entry in our_python:
            argv += ["--our-python", entry]
        argv += ["--no-scrapy"] if args.no_scrapy else []
        argv += ["--no-wget"] if args.no_wget else []
        argv += ["--no-floor"] if args.no_floor else []
        return bench_engines.run(bench_engines.build_parser().parse_args(argv))
    if part == "slow":
        argv = ["--pages", str(args.slow_pages), "--delay", str(args.slow_delay)]
        argv += ["--fanout", str(args.slow_fanout)]
        argv += ["--max-tasks", *map(str, args.slow_max_tasks)]
        argv += ["--rounds", str(args.slow_rounds or args.rounds)]
        argv += ["--snapshot", str(package_path)]
        argv += ["--our-python", our_python[0]] if our_python else []
        argv += ["--floor-max-tasks"] if args.no_floor else []
        return bench_slow.run(bench_slow.build_parser().parse_args(argv))
    if part == "cluster":
        argv = ["--pages", str(args.pages), "--rounds", str(args.rounds)]
        argv += ["--max-tasks", str(args.max_tasks), "--slow-pages", str(args.slow_pages)]
        argv += ["--slow-delay", str(args.slow_delay), "--slow-fanout", str(args.slow_fanout)]
        argv += ["--slow-rounds", str(args.slow_rounds or args.rounds)]
        argv += ["--processes", *map(str, args.cluster_processes)]
        argv += ["--snapshot", str(package_path), "--json-out", str(json_out)]
        argv += ["--our-python", our_python[0]] if our_python else []
        return bench_cluster.run(bench_cluster.build_parser().parse_args(argv))
    if part == "pushback":
        argv = ["--hosts", str(args.pushback_hosts), "--pages", str(args.pushback_pages)]
        argv += ["--rate", str(args.pushback_rate), "--burst", str(args.pushback_burst)]
        argv += ["--cap", str(args.pushback_cap)]
        argv += ["--snapshot", str(package_path), "--json-out", str(json_out)]
        argv += ["--python", args.our_python[0][1]] if args.our_python else []
        argv += ["--peers-python", args.peers_python] if args.peers_python else []
        tools = [t for t in bench_pushback.TOOLS if not (args.no_scrapy and "scrapy" in t)]
        argv += ["--tools", ",".join(tools)]
        # Its numbers are for reading: it passes whatever they are (bench_pushback.py).
        return bench_pushback.run(bench_pushback.build_parser().parse_args(argv))
    if part == "broad":
        argv = ["--hosts", str(args.broad_hosts), "--pages", str(args.broad_pages)]
        argv += ["--delay", str(args.broad_delay), "--max-tasks", str(args.broad_max_tasks)]
        argv += ["--mode", args.broad_mode]
        argv += ["--scaling-hosts", ",".join(map(str, args.broad_scaling_hosts))]
        argv += ["--snapshot", str(package_path), "--json-out", str(json_out)]
        argv += ["--python", args.our_python[0][1]] if args.our_python else []
        argv += ["--peers-python", args.peers_python] if args.peers_python else []
        tools = [t for t in args.broad_tools if not (args.no_scrapy and t == "scrapy")]
        if not tools:
            return "### Broad crawl\n\nNot run: `--no-scrapy` left no tool.", True
        argv += ["--tools", ",".join(tools)]
        # Its numbers are for reading: it passes whatever they are (bench_broad.py).
        return bench_broad.run(bench_broad.build_parser().parse_args(argv))
    if part == "stall":
        argv = ["--package", str(package_path)]
        return bench_stall.run(bench_stall.build_parser().parse_args(argv))
    if part == "durable":
        argv = ["--pages", str(args.pages), "--rounds", str(args.rounds)]
        return run_state(
            args,
            package_path=package_path,
            script=BENCH_DURABLE,
            argv=[*argv, "--urls", str(args.state_urls)],
        )
    if part == "handler":
        argv = ["--pages", str(args.pages), "--rounds", str(args.rounds)]
        return run_state(args, package_path=package_path, script=BENCH_HANDLER, argv=argv)
    return run_state(args, package_path=package_path)


def run_state(
    args: argparse.Namespace,
    *,
    package_path: Path,
    script: Path = BENCH_STATE,
    argv: list[str] | None = None,
) -> tuple[str, bool]:
    """bench_state.py (or bench_durable.py, bench_handler.py) in a fresh process, importing
    the snapshot.

    A fresh process, because its memory figures should not share an interpreter with the
    harness, and the snapshot, so that it measures the same code as the crawls. It is
    started through GNU time, a small C program: Linux starts a process's peak RSS at the
    RSS of the process it was forked from, and this harness has grown large by the time it
    gets here (a full run once read 90 MiB for a frontier that peaks at 52).
    """
    python = args.our_python[0][1] if args.our_python else sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-state-") as work:
        done = subprocess.run(
            [
                GNU_TIME,
                "--format=",
                f"--output={os.devnull}",
                python,
                str(script),
                *(argv or ["--urls", str(args.state_urls)]),
            ],
            cwd=work,
            env=snapshot_environment(package_path),
            capture_output=True,
            text=True,
            timeout=STATE_TIMEOUT,
            check=False,
        )
    print(done.stderr, end="", file=sys.stderr)
    if done.returncode != 0 and done.stdout.strip():
        # It measured, and says a check failed or a target was missed: keep its tables.
        return (
            f"{done.stdout.strip()}\n\n({script.name} exited {done.returncode}: a check "
            "failed or a target was missed; see above)",
            False,
        )
    if done.returncode != 0:
        return (
            f"### {script.name}\n\n{script.name} failed (exit {done.returncode}):\n\n"
            f"```\n{done.stderr.strip()[-2000:]}\n```",
            False,
        )
    return done.stdout.strip(), True


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.pages < 1 or args.rounds < 1 or args.state_urls < 1000:
        raise SystemExit("run: --pages and --rounds must be >= 1, --state-urls >= 1000")
    out = results_path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    json_out = out.with_suffix(".jsonl")
    started = time.perf_counter()
    header = (
        f"# Benchmarks, {datetime.datetime.now():%Y-%m-%d %H:%M}\n\n"
        f"Command: `{shlex.join(sys.orig_argv)}` (cwd {os.getcwd()})"
    )
    sections = [header]
    out.write_text(header + "\n")
    passed = True
    with tempfile.TemporaryDirectory(prefix="bench-run-") as work:
        # One snapshot for every part: edits to the tree during a long run change nothing.
        package_path = snapshot_package(Path(work, "snapshot"))
        for part in args.only:
            print(f"run: {part} ...", file=sys.stderr, flush=True)
            part_started = time.perf_counter()
            try:
                markdown, part_passed = run_part(
                    part, args, json_out=json_out, package_path=package_path
                )
            except (BenchmarkError, NginxError, RuntimeError) as exc:
                markdown, part_passed = f"### {part}\n\nNot run: {exc}", False
            markdown += f"\n\n({part}: {time.perf_counter() - part_started:.0f} s wall)"
            sections.append(markdown)
            passed &= part_passed
            with out.open("a") as results:
                results.write("\n" + markdown + "\n")
    total = f"Total: {(time.perf_counter() - started) / 60:.1f} minutes."
    with out.open("a") as results:
        results.write("\n" + total + "\n")
    print("\n\n".join([*sections, total]))
    print(f"run: wrote {out} and {json_out}", file=sys.stderr)
    if not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    run_main(main, "run")

"""Slow pages, many connections: what concurrency buys when the server is the bottleneck.

The chapter's C10K argument, measured. ``slow_server.py`` answers every page after one
second and does nothing else, so it can hold thousands of connections; a crawl of its
2 000 pages then takes about pages / max_tasks seconds, until the crawler's own CPU (or the
site's shape) sets the limit. The crawl runs through the real command line,
``python -m trio_crawler --engine trio --max-tasks C -q -o FILE ROOT``, in a fresh process
per run, at each C in turn (10, 100 and 1000 by default), and the table reports the wall
time, the crawler's CPU time and its peak RSS per setting: what a thousand concurrent
requests cost in memory, and how close each setting came to its ideal.

The ideal is not pages / C: a page's links are only known once it arrives, so a crawl
needs at least one delay per level of the site's link tree before the frontier holds C
URLs. :func:`ideal_wall_seconds` replays the crawl on the same link lists with zero CPU
cost: every fetch takes exactly ``delay``, C at a time, FIFO, as the core schedules. The gap
between the measured and the ideal time is the crawler's own overhead.

The same crawl by ``floor.py``'s minimal crawler (Trio, httpx and selectolax, nothing
else) at 100 and 1000 tasks shows how much of the gap any crawler on these libraries would
have: it is the "floor" rows.

Both the server and (through inheritance) the crawler get their open-file limit raised to
the hard limit: a thousand connections are two thousand descriptors between them.

Run from the repository root::

    python benchmarks/bench_slow.py [--pages 2000] [--max-tasks 10 100 1000] [--rounds 3]
        [--delay 1.0] [--fanout 50] [--engines trio] [--floor-max-tasks 100 1000]
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import subprocess
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):
    # Run as a script: make the `benchmarks` folder importable as a package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_engines import (
    ENGINES,
    BenchmarkError,
    floor_command,
    our_command,
    parse_our_python,
    probe_our_python,
    snapshot_environment,
    tally_json,
    tally_jsonl,
)
from benchmarks.measure import (
    ChildCost,
    compiled,
    markdown_table,
    package_identity,
    raise_open_file_limit,
    run_main,
    run_measured,
    snapshot_package,
)
from benchmarks.slow_server import page_path, site_links

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

SLOW_SERVER = Path(__file__).resolve().parent / "slow_server.py"
# Descriptors beyond the connections: the interpreter's own files, the output, the
# listening socket; generous, since the limit is only raised to the hard limit anyway.
SPARE_DESCRIPTORS = 200
# Seconds the server gets to print its address (it builds 2 000 pages first).
SERVER_START_TIMEOUT = 30.0


def ideal_wall_seconds(links: Sequence[Sequence[int]], *, max_tasks: int, delay: float) -> float:
    """The wall time of a crawl from page 0 that costs no CPU: a lower bound.

    Replays the core's scheduling: a FIFO frontier, at most ``max_tasks`` fetches in flight,
    each taking exactly ``delay``; a finished page queues its unseen links, sorted by URL as
    the core sorts them.
    """
    seen = {0}
    frontier = deque([0])
    in_flight: list[tuple[float, int]] = []  # (finish time, page), a heap
    now = 0.0
    while frontier or in_flight:
        while frontier and len(in_flight) < max_tasks:
            heapq.heappush(in_flight, (now + delay, frontier.popleft()))
        now, page = heapq.heappop(in_flight)
        new_pages = [target for target in links[page] if target not in seen]
        seen.update(new_pages)
        frontier.extend(sorted(new_pages, key=page_path))
    return now


class SlowServer:
    """``slow_server.py`` in a child process; stopped by its PID."""

    def __init__(self, *, pages: int, fanout: int, delay: float, log: Path) -> None:
        command = [sys.executable, str(SLOW_SERVER), "--pages", str(pages)]
        command += ["--fanout", str(fanout), "--delay", str(delay)]
        self._log = log.open("wb")
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log
        )

    def wait_for_address(self) -> str:
        """The root URL, once the server listens.

        Raises:
            BenchmarkError: If the server exits or prints something else.
        """
        assert self._process.stdout is not None
        line = self._process.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            self.stop()
            raise BenchmarkError(f"slow_server.py did not start: {line!r}; see {self._log.name}")
        return line

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it is still there after a few seconds."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._log.close()


def _rotations(values: Sequence[int], rounds: int) -> Iterator[tuple[int, int]]:
    """(round, value) pairs: every value once per round, the order rotated each round."""
    for round_number in range(1, rounds + 1):
        shift = (round_number - 1) % len(values)
        for value in [*values[shift:], *values[:shift]]:
            yield round_number, value


DEFAULT_FANOUT = 50
# The label of floor.py's rows, where the others name an engine.
FLOOR = "floor: minimal crawl"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Crawl a server that answers after a delay at several max_tasks."
    )
    parser.add_argument("--pages", type=int, default=2000)
    # A page's links are known only once it arrives, so the tree's depth is a floor on the
    # crawl's time however many tasks run: a 20-ary tree of 2000 pages has four levels, and
    # C=1000 could then be at best 4.4x faster than C=100. 50 links per page (three levels)
    # lets concurrency, not depth, decide; the table prints the ideal time beside each row.
    parser.add_argument(
        "--fanout", type=int, default=DEFAULT_FANOUT, help="links per page (tree arity)"
    )
    parser.add_argument("--delay", type=float, default=1.0, help="server delay per page, s")
    parser.add_argument("--max-tasks", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=["trio"])
    parser.add_argument(
        "--floor-max-tasks",
        type=int,
        nargs="*",
        default=[100, 1000],
        help="concurrencies for floor.py's minimal crawl (none: leave it out)",
    )
    parser.add_argument(
        "--our-python",
        type=parse_our_python,
        metavar="LABEL=PATH",
        help="interpreter to run our CLI with (default: this one)",
    )
    # run.py's snapshot of the package, shared by every part of one run; not for people.
    parser.add_argument("--snapshot", type=Path, help=argparse.SUPPRESS)
    return parser


def run(args: argparse.Namespace) -> tuple[str, bool]:
    """Run the scenario; return (markdown, True if every crawl found every page).

    Raises:
        BenchmarkError: If the server or our CLI cannot start.
        RuntimeError: If the open-file limit cannot cover the largest max_tasks.
    """
    if args.pages < 1 or args.rounds < 1 or min(args.max_tasks) < 1:
        raise BenchmarkError("--pages, --rounds and --max-tasks must be >= 1")
    raise_open_file_limit(2 * max(args.max_tasks) + SPARE_DESCRIPTORS)
    links = site_links(args.pages, args.fanout)
    label, python = args.our_python or ("", sys.executable)
    rows = []
    problems = []
    with tempfile.TemporaryDirectory(prefix="bench-slow-") as work:
        workdir = Path(work)
        package_path = (
            compiled(args.snapshot) if args.snapshot else snapshot_package(workdir / "snapshot")
        )
        env = snapshot_environment(package_path)
        our = probe_our_python(label, python, package_path=package_path, env=env, cwd=workdir)
        server = SlowServer(
            pages=args.pages, fanout=args.fanout, delay=args.delay, log=workdir / "server.log"
        )
        results: dict[tuple[str, int], list[tuple[ChildCost, int]]] = {}
        try:
            root = server.wait_for_address()
            settings = [(engine, c) for engine in args.engines for c in args.max_tasks]
            settings += [(FLOOR, c) for c in args.floor_max_tasks]
            for round_number, index in _rotations(range(len(settings)), args.rounds):
                engine, max_tasks = settings[index]
                output = workdir / "records.jsonl"
                ideal = ideal_wall_seconds(links, max_tasks=max_tasks, delay=args.delay)
                if engine == FLOOR:
                    command = floor_command(
                        our.python, max_tasks=max_tasks, output=output, root=root
                    )
                    tally = tally_json
                else:
                    command = our_command(
                        our, engine, max_tasks=max_tasks, output=output, root=root
                    )
                    tally = tally_jsonl
                cost = run_measured(
                    command,
                    timeout=3 * ideal + 120,
                    cwd=workdir,
                    env=env,
                    stderr=workdir / "stderr.txt",
                )
                pages = tally(output).pages if output.exists() else 0
                output.unlink(missing_ok=True)
                results.setdefault((engine, max_tasks), []).append((cost, pages))
                if pages != args.pages or cost.returncode != 0:
                    problems.append(
                        f"- {engine} max_tasks={max_tasks}, round {round_number}: {pages} "
                        f"pages of {args.pages}, exit status {cost.returncode}"
                        + (" (timed out)" if cost.timed_out else "")
                    )
                print(
                    f"slow round {round_number}/{args.rounds} {engine} max_tasks={max_tasks}: "
                    f"{pages} pages, {cost.wall_s:.1f} s wall (ideal {ideal:.1f}), "
                    f"{cost.cpu_s:.1f} s CPU, {cost.peak_rss_mib:.1f} MiB peak, "
                    f"steal {cost.steal_percent:.0f}%",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            server.stop()
        identity = package_identity(package_path)
    for engine in [*args.engines, FLOOR]:
        base = results.get((engine, 100))
        base_wall = statistics.median(cost.wall_s for cost, _ in base) if base else None
        for max_tasks in args.max_tasks if engine != FLOOR else args.floor_max_tasks:
            runs = results[(engine, max_tasks)]
            walls = [cost.wall_s for cost, _ in runs]
            wall = statistics.median(walls)
            ideal = ideal_wall_seconds(links, max_tasks=max_tasks, delay=args.delay)
            found = sorted({pages for _, pages in runs})
            rows.append(
                [
                    f"{engine}, max_tasks={max_tasks}",
                    f"{wall:.1f} ({min(walls):.1f}-{max(walls):.1f})",
                    f"{ideal:.1f}",
                    f"{base_wall / wall:.1f}x" if base_wall else "",
                    f"{args.pages / wall:.0f}",
                    f"{statistics.median(cost.peak_rss_mib for cost, _ in runs):.1f}",
                    f"{statistics.median(cost.cpu_s for cost, _ in runs):.1f}",
                    str(found[0]) if len(found) == 1 else f"{found[0]}-{found[-1]}",
                    f"{statistics.median(cost.steal_percent for cost, _ in runs):.0f}",
                ]
            )
    ideal_ratio = _ideal_ratio(links, args.delay, args.max_tasks)
    table = markdown_table(
        [
            "crawl",
            "wall s (min-max)",
            "ideal s",
            "speed-up vs max_tasks=100",
            "pages/s",
            "peak RSS MiB",
            "CPU s",
            "pages found",
            "steal %",
        ],
        rows,
    )
    markdown = (
        f"### Slow server: {args.pages} pages, {args.delay:g} s per page, {args.fanout} links "
        f"per page (a {args.fanout}-ary tree), median of {args.rounds} rounds\n\n"
        f"- trio_crawler {identity}; {our.python}: {our.versions}\n"
        "- ideal s: the crawl's wall time if the crawler cost no CPU (every fetch takes the "
        "delay, max_tasks at a time, links queued as the core queues them)"
        + (
            f"; ideal speed-up of max_tasks=1000 over 100: {ideal_ratio:.1f}x"
            if ideal_ratio
            else ""
        )
        + "\n\n"
        + table
        + ("\n\nFailed checks:\n\n" + "\n".join(problems) if problems else "")
    )
    return markdown, not problems


def _ideal_ratio(links: Sequence[Sequence[int]], delay: float, settings: Sequence[int]) -> float:
    if 100 not in settings or 1000 not in settings:
        return 0.0
    return ideal_wall_seconds(links, max_tasks=100, delay=delay) / ideal_wall_seconds(
        links, max_tasks=1000, delay=delay
    )


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        markdown, passed = run(args)
    except (BenchmarkError, RuntimeError) as exc:
        raise SystemExit(f"bench_slow: {exc}") from None
    print(markdown)
    if not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    run_main(main, "bench_slow")

"""The shared frontier on Redis (``--frontier``): what it costs one process, what it buys many.

A crawl shared through Redis pays for every page in round trips to the server and in the
server's own CPU; in exchange, several processes crawl one site together. Two questions,
each answered side by side with its yardstick in the same run, because this machine's
speed moves by half within minutes and only ratios mean much:

1. **One process, the frontier on Redis against the frontier in memory** (part
   ``frontier``). The synthetic site (10 000 pages by default) on nginx, crawled by the
   command line on the trio engine, ``python -m trio_crawler --max-tasks 100 -q
   --no-progress --ignore-robots -o FILE [--frontier URL --crawl-id ID] ROOT``, the two
   commands alternating for ``--rounds`` pairs (the order swapped every round, so a steady
   drift in the machine's speed does not always favour the same one). Each frontier crawl
   is a new crawl: the server is emptied (``FLUSHALL``) and the crawl gets an id of its
   own. CPU is the crawler process's user + system time (GNU time's ``wait4``,
   ``measure.run_measured``), per page; the ratio is taken pair by pair and its median
   reported. Target: at most 1.5. The same ratio with Redis's CPU added to the crawler's
   is printed too: it is what a shared crawl costs the machine.
2. **Several processes, one crawl** (part ``slow``). ``slow_server.py`` answers every
   page after 1 s (2 000 pages, 50 links a page, by default), so a crawl's wall time is set
   by how many requests are in flight, not by CPU. It is crawled by 1, 2 and 4 processes
   (``--processes``) at ``--max-tasks 100`` each, sharing one crawl: the first is given
   the ROOT and creates the crawl, the others are given no ROOT and join it. All of one
   setting start together; the joiners are started as soon as the crawl exists on the
   server (polled with ``DBSIZE``), and one that still finds no crawl (exit 2, "no crawl
   named") is started again. The wall time runs from the first process's start to the
   last one's exit; the speed-up is over one process, beside the ideal (``bench_slow``'s
   :func:`~benchmarks.bench_slow.ideal_wall_seconds` with every process's tasks in one
   pool). Target: 4 processes at least 3x faster than 1. Every setting must find every
   page exactly once: the union of its processes' ``-o`` files must hold one record per
   page, all status 200, no URL twice; a row that does not is marked failed.

For every crawl on Redis, the server's side, read from ``INFO`` before and after (deltas,
so nothing is reset): the **script calls per page** (``EVALSHA``/``EVAL``: the crawler
batches its frontier work, links, completions, lease renewals and the next lease, into
one script call per flush, so these are its round trips; a process also sends a handful
of commands of its own when it starts, in the JSON lines), the **commands per page**
Redis ran, those run inside the scripts included, and **Redis's CPU per page**
(``used_cpu_user + used_cpu_sys``; it includes the server's idle housekeeping, ten
``serverCron`` ticks a second, a few milliseconds a second). The harness's own commands
(``INFO``, ``DBSIZE``, ``FLUSHALL``) are counted as it sends them and subtracted.

The Redis server is the harness's own: ``redis-server`` (``apt-get install
redis-server``, or ``REDIS_SERVER=/path``) on 127.0.0.1, a port picked by binding port 0,
no persistence (``--save ''``, ``--appendonly no``), its directory a temporary one; it is
stopped by its PID when the benchmark ends, however it ends (Ctrl-C and SIGTERM
included). The harness speaks RESP to it over a plain socket: it needs ``INFO``, nothing
more.

Run from the repository root (``benchmarks/setup.sh`` first, for nginx and GNU time)::

    python benchmarks/bench_cluster.py [--pages 10000] [--rounds 3] [--slow-pages 2000]
        [--processes 1 2 4] [--max-tasks 100] [--only frontier,slow]
        [--our-python LABEL=PATH] [--json-out runs.jsonl]

``benchmarks/run.py --only cluster`` runs it with the other benchmarks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):
    # Run as a script: make the `benchmarks` folder importable as a package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_engines import (
    BenchmarkError,
    OurPython,
    parse_our_python,
    probe_our_python,
    snapshot_environment,
)
from benchmarks.bench_slow import (
    DEFAULT_FANOUT,
    SPARE_DESCRIPTORS,
    SlowServer,
    _rotations,
    ideal_wall_seconds,
)
from benchmarks.measure import (
    ChildCost,
    compiled,
    markdown_table,
    package_identity,
    parts_argument,
    raise_open_file_limit,
    run_main,
    run_measured,
    snapshot_package,
)
from benchmarks.nginx import find_program, free_port, serve_directory, stop_process
from benchmarks.slow_server import site_links
from benchmarks.synthetic_site import generate

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

PARTS = ("frontier", "slow")
# A crawl of 10 000 pages takes 15-30 s here; more than this is a hang.
CRAWL_TIMEOUT = 900.0
# Debian's path, for when /usr/bin is not on PATH.
_FALLBACK_REDIS = "/usr/bin/redis-server"
# Readiness: redis-server answers PING within milliseconds; 200 attempts 25 ms apart give
# a loaded machine five seconds.
_READY_ATTEMPTS = 200
_READY_INTERVAL = 0.025
# Fresh ports to try when the one picked was taken before redis-server could bind it.
_PORT_ATTEMPTS = 5
# How long the joiners wait for the creator to make the crawl (it imports the package,
# connects and runs one script: about a second here), and how often they look.
_CREATE_TIMEOUT = 60.0
_CREATE_POLL = 0.01
# A joiner that still found no crawl is started again, this many times at most.
_JOIN_ATTEMPTS = 20
# The commands that run a script: one round trip each, whatever the script does inside.
SCRIPT_COMMANDS = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})


# -- the harness's own Redis server ---------------------------------------------------------


class RedisServerError(BenchmarkError):
    """redis-server is missing, did not start, or answered something unexpected."""


def find_redis_server() -> str:
    """``$REDIS_SERVER``, else ``redis-server`` on PATH, else Debian's /usr/bin/redis-server.

    Raises:
        RedisServerError: If none of them exists, with the command that installs it.
    """
    candidate = find_program("REDIS_SERVER", "redis-server", _FALLBACK_REDIS)
    if candidate is None:
        raise RedisServerError(
            "redis-server not found: apt-get install redis-server, or set REDIS_SERVER=/path"
        )
    return candidate


@dataclass(frozen=True, slots=True)
class RedisSnapshot:
    """What the server had done at one moment, from one ``INFO all``.

    Attributes:
        calls: Calls per command, as ``INFO commandstats`` names them (``evalsha``,
            ``client|setname``), rejected calls included (a rejected call was a round trip
            too).
        cpu_s: The server's user + system CPU seconds since it started.
        used_memory: Bytes the server's data takes (``used_memory``).
        harness_calls: The commands this harness had sent before this ``INFO``, by name;
            the server's counts include them.
    """

    calls: dict[str, int]
    cpu_s: float
    used_memory: int
    harness_calls: dict[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisUse:
    """What the crawlers made the server do between two snapshots.

    Attributes:
        calls: Commands per name, the harness's own taken out; commands run inside the
            scripts are counted under their own names.
        cpu_s: The server's CPU seconds in between.
        used_memory: Bytes the server's data took at the end.
    """

    calls: dict[str, int]
    cpu_s: float
    used_memory: int

    @property
    def script_calls(self) -> int:
        return sum(count for name, count in self.calls.items() if name in SCRIPT_COMMANDS)

    @property
    def commands(self) -> int:
        return sum(self.calls.values())


def redis_use(before: RedisSnapshot, after: RedisSnapshot) -> RedisUse:
    """The difference of two snapshots, without the commands the harness sent."""
    calls = {}
    for name, count in after.calls.items():
        made = (
            count
            - before.calls.get(name, 0)
            - (after.harness_calls.get(name, 0) - before.harness_calls.get(name, 0))
        )
        if made:
            calls[name] = made
    return RedisUse(calls=calls, cpu_s=after.cpu_s - before.cpu_s, used_memory=after.used_memory)


class RedisConnection:
    """The harness's one connection to its server: RESP over a plain socket.

    Just enough of the protocol for ``INFO``, ``DBSIZE`` and ``FLUSHALL``: a command goes
    out as an array of bulk strings, and a reply (simple string, error, integer, bulk
    string or array) is read back whole. Every command sent is counted by name, so that
    :func:`redis_use` can take the harness's own traffic out of the server's counts.
    """

    def __init__(self, port: int) -> None:
        self._socket = socket.create_connection(("127.0.0.1", port), timeout=30)
        self._reader = self._socket.makefile("rb")
        self.sent: Counter[str] = Counter()

    def close(self) -> None:
        self._reader.close()
        self._socket.close()

    def command(self, *args: str) -> Any:
        """Send one command and return its reply.

        Raises:
            RedisServerError: If the server answers with an error, or not in RESP.
        """
        self.sent[args[0].lower()] += 1
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = arg.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self._socket.sendall(b"".join(parts))
        return self._reply()

    def _reply(self) -> Any:
        line = self._reader.readline()
        if not line.endswith(b"\r\n"):
            raise RedisServerError(f"redis-server closed the connection or sent {line!r}")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RedisServerError(f"redis-server answered: {rest.decode()}")
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self._reader.read(size + 2)[:-2].decode()
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self._reply() for _ in range(size)]
        raise RedisServerError(f"redis-server sent {line!r}, which is not RESP")

    def snapshot(self) -> RedisSnapshot:
        """The server's counts now (``INFO all``: commandstats, cpu and memory in one)."""
        harness_calls = dict(self.sent)
        info: dict[str, str] = {}
        for line in self.command("INFO", "all").splitlines():
            name, sep, value = line.partition(":")
            if sep:
                info[name] = value
        calls = {}
        for name, value in info.items():
            if name.startswith("cmdstat_"):
                fields = dict(part.split("=", 1) for part in value.split(","))
                calls[name.removeprefix("cmdstat_")] = int(fields["calls"]) + int(
                    fields.get("rejected_calls", 0)
                )
        return RedisSnapshot(
            calls=calls,
            cpu_s=float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
            used_memory=int(info["used_memory"]),
            harness_calls=harness_calls,
        )


@dataclass(frozen=True, slots=True)
class RedisServer:
    """A running server of ours: its URL for ``--frontier``, and the harness's connection."""

    url: str
    version: str
    connection: RedisConnection


@contextlib.contextmanager
def serve_redis() -> Iterator[RedisServer]:
    """Run a private redis-server on 127.0.0.1 with no persistence; stop it by its PID.

    The server's working directory, log and (never written) dump file are in a temporary
    directory; nothing of the system's Redis is used.

    Raises:
        RedisServerError: If redis-server is missing, or exits or stays silent.
    """
    binary = find_redis_server()
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        log = Path(tmp, "redis.log")
        for _ in range(_PORT_ATTEMPTS):
            port = free_port()
            command = [binary, "--port", str(port), "--bind", "127.0.0.1"]
            command += ["--save", "", "--appendonly", "no", "--dir", tmp]
            command += ["--daemonize", "no", "--logfile", str(log)]
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            connection = None
            try:
                connection = _connect_when_ready(process, port)
                if connection is not None:
                    yield RedisServer(
                        url=f"redis://127.0.0.1:{port}/0", version=version, connection=connection
                    )
                    return
                text = log.read_text(errors="replace") if log.exists() else ""
                if "Address already in use" not in text:
                    raise RedisServerError(f"redis-server did not start on port {port}:\n{text}")
            finally:
                if connection is not None:
                    connection.close()
                stop_process(process)
        raise RedisServerError(f"redis-server found no free port in {_PORT_ATTEMPTS} attempts")


def _connect_when_ready(process: subprocess.Popen[bytes], port: int) -> RedisConnection | None:
    """Poll until the server answers PING; None if it exited first."""
    for _ in range(_READY_ATTEMPTS):
        if process.poll() is not None:
            return None
        try:
            connection = RedisConnection(port)
        except OSError:
            time.sleep(_READY_INTERVAL)
            continue
        try:
            if connection.command("PING") == "PONG":
                return connection
        except (OSError, RedisServerError):
            pass
        connection.close()
        time.sleep(_READY_INTERVAL)
    raise RedisServerError(
        f"redis-server did not answer on 127.0.0.1:{port} in "
        f"{_READY_ATTEMPTS * _READY_INTERVAL:g} s"
    )


# -- the crawls -----------------------------------------------------------------------------


def crawl_command(
    our: OurPython,
    *,
    max_tasks: int,
    output: Path,
    root: str | None,
    frontier: str | None = None,
    crawl_id: str | None = None,
) -> list[str]:
    """The command line: in memory, or on the shared frontier (a joiner has no ROOT)."""
    command = [our.python, "-m", "trio_crawler", "--engine", "trio"]
    command += ["--max-tasks", str(max_tasks), "-q", "--no-progress", *our.extra_args]
    command += ["-o", str(output)]
    if frontier is not None:
        command += ["--frontier", frontier, "--crawl-id", crawl_id or "crawl"]
    return [*command, root] if root is not None else command


@dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """What the ``-o`` files of one crawl (all its processes) hold.

    Attributes:
        records: Records in all the files.
        urls: Distinct URLs among them.
        not_ok: Records whose status is not 200.
    """

    records: int
    urls: int
    not_ok: int

    def problem(self, pages: int) -> str:
        """Why this is not one record per page with status 200; empty if it is."""
        if self.records == pages and self.urls == pages and not self.not_ok:
            return ""
        return (
            f"{self.records} records, {self.urls} distinct URLs, {self.not_ok} not status "
            f"200, for {pages} pages"
        )


def found_in(outputs: Sequence[Path]) -> Found:
    records = 0
    urls = set()
    not_ok = 0
    for output in outputs:
        if not output.exists():
            continue
        with output.open() as lines:
            for line in lines:
                record = json.loads(line)
                records += 1
                urls.add(record["url"])
                not_ok += record["status"] != 200
    return Found(records=records, urls=len(urls), not_ok=not_ok)


def _stderr_tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = path.read_text(errors="replace").strip().splitlines()
        if lines:
            return " | ".join(lines[-3:])[-400:]
    return ""


def _write_json(json_out: Path | None, line: dict[str, Any]) -> None:
    if json_out is not None:
        with json_out.open("a") as out:
            out.write(json.dumps(line) + "\n")


def _per_page(value: float, pages: int, scale: float = 1.0, digits: int = 2) -> str:
    return f"{value * scale / pages:.{digits}f}" if pages else "-"


# -- part 1: one process, the frontier on Redis against the frontier in memory --------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """What both parts share."""

    our: OurPython
    env: dict[str, str]
    workdir: Path
    redis: RedisServer
    json_out: Path | None


def frontier_part(args: argparse.Namespace, context: Context) -> tuple[str, bool]:
    """Part 1: the synthetic site crawled in memory and on Redis, alternating."""
    workdir = context.workdir
    redis = context.redis.connection
    rows = []
    problems = []
    ratios = []
    with_redis = []
    results: dict[str, list[tuple[ChildCost, RedisUse | None]]] = {"memory": [], "frontier": []}
    site = generate(workdir / "site", pages=args.pages)
    try:
        with serve_directory(site.directory) as root:
            for round_number in range(1, args.rounds + 1):
                modes = ("memory", "frontier") if round_number % 2 else ("frontier", "memory")
                costs: dict[str, tuple[ChildCost, RedisUse | None]] = {}
                for mode in modes:
                    output = workdir / f"{mode}.jsonl"
                    output.unlink(missing_ok=True)
                    stderr = workdir / f"{mode}.stderr"
                    on_redis = mode == "frontier"
                    if on_redis:
                        # A new crawl on an empty server: nothing of the last one is read.
                        redis.command("FLUSHALL")
                    command = crawl_command(
                        context.our,
                        max_tasks=args.max_tasks,
                        output=output,
                        root=root,
                        frontier=context.redis.url if on_redis else None,
                        crawl_id=f"frontier-{round_number}",
                    )
                    before = redis.snapshot() if on_redis else None
                    cost = run_measured(
                        command, timeout=CRAWL_TIMEOUT, cwd=workdir, env=context.env, stderr=stderr
                    )
                    use = redis_use(before, redis.snapshot()) if before else None
                    found = found_in([output])
                    problem = found.problem(site.pages)
                    if cost.returncode != 0:
                        problem = f"exit status {cost.returncode}" + (
                            " (timed out)" if cost.timed_out else ""
                        )
                        problem += f"; {found.records} records; stderr: {_stderr_tail(stderr)}"
                    if problem:
                        problems.append(f"- round {round_number}, {mode}: {problem}")
                    costs[mode] = (cost, use)
                    results[mode].append((cost, use))
                    rows.append(_frontier_row(round_number, mode, cost, use, found, problem))
                    _write_json(
                        context.json_out,
                        {
                            "part": "cluster-frontier",
                            "round": round_number,
                            "crawl": mode,
                            **asdict(cost),
                            "records": found.records,
                            "urls": found.urls,
                            "redis": asdict(use) if use else None,
                            "problem": problem,
                        },
                    )
                    print(
                        f"cluster frontier round {round_number}/{args.rounds} {mode}: "
                        f"{found.records} records, {cost.cpu_s:.1f} s CPU, "
                        f"{cost.wall_s:.1f} s wall, {cost.peak_rss_mib:.1f} MiB peak"
                        + (
                            f", Redis {use.script_calls} script calls, {use.cpu_s:.2f} s CPU"
                            if use
                            else ""
                        )
                        + f", steal {cost.steal_percent:.0f}%",
                        file=sys.stderr,
                        flush=True,
                    )
                memory_cpu = costs["memory"][0].cpu_s
                frontier_cost, frontier_use = costs["frontier"]
                ratios.append(frontier_cost.cpu_s / memory_cpu)
                assert frontier_use is not None
                with_redis.append((frontier_cost.cpu_s + frontier_use.cpu_s) / memory_cpu)
    finally:
        shutil.rmtree(site.directory, ignore_errors=True)
    table = markdown_table(
        [
            "round",
            "crawl",
            "CPU ms/page",
            "peak RSS MiB",
            "wall s",
            "records",
            "script calls/page",
            "Redis commands/page",
            "Redis CPU ms/page",
            "Redis MiB at the end",
            "steal %",
        ],
        rows,
    )
    summary = markdown_table(
        [
            "crawl",
            "CPU ms/page",
            "peak RSS MiB",
            "script calls/page",
            "Redis commands/page",
            "Redis CPU ms/page",
        ],
        [_frontier_median(mode, runs, site.pages) for mode, runs in results.items()],
    )
    text = (
        f"### The frontier on Redis against in memory: {site.pages} pages, "
        f"{site.total_bytes / 2**20:.0f} MiB, trio engine, --max-tasks {args.max_tasks}, "
        f"{args.rounds} pairs\n\n{table}\n\n{summary}\n\n"
        "CPU of the crawler with --frontier / in memory, pair by pair: "
        + ", ".join(f"{ratio:.3f}" for ratio in ratios)
        + f"; median **{statistics.median(ratios):.3f}** (target: at most 1.5). "
        "With Redis's CPU added to the crawler's: "
        + ", ".join(f"{ratio:.3f}" for ratio in with_redis)
        + f"; median {statistics.median(with_redis):.3f}."
        + ("\n\nFailed checks:\n\n" + "\n".join(problems) if problems else "")
    )
    return text, not problems


def _frontier_median(
    mode: str, runs: Sequence[tuple[ChildCost, RedisUse | None]], pages: int
) -> list[object]:
    """The summary row of one kind of crawl: medians over its rounds."""
    uses = [use for _, use in runs if use is not None]

    def median_of(values: Iterator[float], scale: float = 1.0, digits: int = 2) -> str:
        return _per_page(statistics.median(values), pages, scale, digits) if uses else "-"

    return [
        f"{mode} (median)",
        _per_page(statistics.median(cost.cpu_s for cost, _ in runs), pages, 1000),
        f"{statistics.median(cost.peak_rss_mib for cost, _ in runs):.1f}",
        median_of(use.script_calls for use in uses),
        median_of((use.commands for use in uses), digits=1),
        median_of((use.cpu_s for use in uses), 1000, 3),
    ]


def _frontier_row(
    round_number: int,
    mode: str,
    cost: ChildCost,
    use: RedisUse | None,
    found: Found,
    problem: str,
) -> list[object]:
    pages = found.records
    return [
        round_number,
        mode + (" ✗" if problem else ""),
        _per_page(cost.cpu_s, pages, 1000),
        f"{cost.peak_rss_mib:.1f}",
        f"{cost.wall_s:.1f}",
        pages,
        _per_page(use.script_calls, pages) if use else "-",
        _per_page(use.commands, pages, digits=1) if use else "-",
        _per_page(use.cpu_s, pages, 1000, 3) if use else "-",
        f"{use.used_memory / 2**20:.1f}" if use else "-",
        f"{cost.steal_percent:.0f}",
    ]


# -- part 2: several processes, one crawl of the slow server --------------------------------


@dataclass(slots=True, kw_only=True)
class Together:
    """One setting's crawl: ``processes`` crawlers sharing one crawl on the server.

    Attributes:
        processes: How many.
        wall_s: From the first process's start to the last one's exit.
        costs: Every run of every process (a joiner started again has several).
        exits: Each process's last exit status.
        found: What their ``-o`` files hold, together.
        use: What they made the Redis server do.
        started_late_s: When the last joiner started, seconds after the first process.
    """

    processes: int
    wall_s: float = 0.0
    costs: list[list[ChildCost]] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)
    found: Found | None = None
    use: RedisUse | None = None
    started_late_s: float = 0.0

    @property
    def cpu_s(self) -> float:
        return sum(cost.cpu_s for runs in self.costs for cost in runs)

    @property
    def retries(self) -> int:
        return sum(len(runs) - 1 for runs in self.costs)


def crawl_together(
    processes: int,
    *,
    args: argparse.Namespace,
    context: Context,
    root: str,
    crawl_id: str,
    timeout: float,
) -> Together:
    """Start ``processes`` crawlers on one shared crawl and wait for all of them.

    The first creates the crawl with the ROOT; the others are started once the crawl is
    on the server, and each runs under ``run_measured`` in a thread of its own (the thread
    only waits in ``wait4``). If the harness is interrupted, the crawlers (each the only
    command in a session that ``run_measured`` started) are killed before it unwinds.
    """
    redis = context.redis.connection
    workdir = context.workdir
    outputs = [workdir / f"together-{processes}-{index}.jsonl" for index in range(processes)]
    for output in outputs:
        output.unlink(missing_ok=True)
    result = Together(processes=processes, costs=[[] for _ in range(processes)])
    ended = [0.0] * processes
    exits = [0] * processes
    failures: list[BaseException] = []
    stopping = threading.Event()

    def run_one(index: int) -> None:
        stderr = workdir / f"together-{processes}-{index}.stderr"
        command = crawl_command(
            context.our,
            max_tasks=args.max_tasks,
            output=outputs[index],
            root=root if index == 0 else None,
            frontier=context.redis.url,
            crawl_id=crawl_id,
        )
        try:
            for _ in range(_JOIN_ATTEMPTS):
                if stopping.is_set():
                    break
                cost = run_measured(
                    command, timeout=timeout, cwd=workdir, env=context.env, stderr=stderr
                )
                result.costs[index].append(cost)
                exits[index] = cost.returncode
                if (
                    index == 0
                    or cost.returncode != 2
                    or "no crawl named" not in (stderr.read_text(errors="replace"))
                ):
                    break
                time.sleep(0.1)
        except BaseException as exc:
            failures.append(exc)
        finally:
            ended[index] = time.perf_counter()

    redis.command("FLUSHALL")
    before = redis.snapshot()
    started = time.perf_counter()
    threads = [threading.Thread(target=run_one, args=(0,), name="crawler-0")]
    threads[0].start()
    try:
        if processes > 1:
            deadline = started + _CREATE_TIMEOUT
            while threads[0].is_alive() and time.perf_counter() < deadline:
                if redis.command("DBSIZE") > 0:
                    break
                time.sleep(_CREATE_POLL)
            result.started_late_s = time.perf_counter() - started
            for index in range(1, processes):
                thread = threading.Thread(target=run_one, args=(index,), name=f"crawler-{index}")
                threads.append(thread)
                thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
    except BaseException:
        # Interrupted: no joiner starts again, and whatever runs is killed until the
        # threads are done (one may have been starting a crawl as we looked).
        stopping.set()
        while any(thread.is_alive() for thread in threads):
            _kill_measured_children()
            for thread in threads:
                thread.join(0.2)
        raise
    if failures:
        raise failures[0]
    result.wall_s = max(ended) - started
    result.use = redis_use(before, redis.snapshot())
    result.exits = exits
    result.found = found_in(outputs)
    redis.command("FLUSHALL")
    return result


def _kill_measured_children() -> None:
    """SIGKILL the sessions ``run_measured`` started for this process, found in /proc.

    Each is a child of ours that leads its own process group (GNU time, with the crawler
    under it); the servers we started share our group and are left to their ``finally``.
    """
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        pid, ppid, pgrp = int(entry.name), int(fields[1]), int(fields[2])
        if ppid == me and pgrp == pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _together_problem(together: Together, pages: int, workdir: Path) -> str:
    """What is wrong with one setting's crawl (pages missing or twice, a process that
    failed, with the end of its stderr); empty if nothing."""
    problems = [together.found.problem(pages) if together.found else "no records"]
    if any(together.exits):
        problems.append(f"exit statuses {together.exits}")
        for index, code in enumerate(together.exits):
            tail = _stderr_tail(workdir / f"together-{together.processes}-{index}.stderr")
            if code and tail:
                problems.append(f"stderr of process {index}: {tail}")
    return "; ".join(filter(None, problems))


def slow_part(args: argparse.Namespace, context: Context) -> tuple[str, bool]:
    """Part 2: the slow server crawled by 1, 2 and 4 processes sharing one crawl."""
    links = site_links(args.slow_pages, args.slow_fanout)
    rounds = args.slow_rounds or args.rounds
    results: dict[int, list[Together]] = {}
    problems = []
    server = SlowServer(
        pages=args.slow_pages,
        fanout=args.slow_fanout,
        delay=args.slow_delay,
        log=context.workdir / "slow-server.log",
    )
    try:
        root = server.wait_for_address()
        one = ideal_wall_seconds(links, max_tasks=args.max_tasks, delay=args.slow_delay)
        for round_number, processes in _rotations(args.processes, rounds):
            crawl_id = f"slow-{processes}-{round_number}"
            together = crawl_together(
                processes,
                args=args,
                context=context,
                root=root,
                crawl_id=crawl_id,
                timeout=3 * one + 120,
            )
            assert together.found is not None
            assert together.use is not None
            problem = _together_problem(together, args.slow_pages, context.workdir)
            if problem:
                problems.append(f"- {processes} processes, round {round_number}: {problem}")
            results.setdefault(processes, []).append(together)
            _write_json(
                context.json_out,
                {
                    "part": "cluster-slow",
                    "round": round_number,
                    "processes": processes,
                    "wall_s": together.wall_s,
                    "last_joiner_started_s": together.started_late_s,
                    "runs": [[asdict(cost) for cost in runs] for runs in together.costs],
                    **asdict(together.found),
                    "redis": asdict(together.use),
                    "problem": problem,
                },
            )
            print(
                f"cluster slow round {round_number}/{rounds} {processes} processes: "
                f"{together.found.records} records ({together.found.urls} URLs), "
                f"{together.wall_s:.1f} s wall, {together.cpu_s:.1f} s CPU, "
                f"exits {together.exits}, joiners started after "
                f"{together.started_late_s:.2f} s, {together.retries} retried, "
                f"Redis {together.use.script_calls} script calls, "
                f"{together.use.cpu_s:.2f} s CPU",
                file=sys.stderr,
                flush=True,
            )
    finally:
        server.stop()
    rows = []
    base = results.get(1)
    base_wall = statistics.median(t.wall_s for t in base) if base else None
    speedups = {}
    for processes in args.processes:
        runs = results[processes]
        walls = [t.wall_s for t in runs]
        wall = statistics.median(walls)
        ideal = ideal_wall_seconds(
            links, max_tasks=processes * args.max_tasks, delay=args.slow_delay
        )
        failed = any(_together_problem(t, args.slow_pages, context.workdir) for t in runs)
        records = sorted({t.found.records for t in runs if t.found})
        duplicates = max(t.found.records - t.found.urls for t in runs if t.found)
        pages = args.slow_pages
        every_run = [cost for t in runs for process in t.costs for cost in process]
        speedups[processes] = base_wall / wall if base_wall else 0.0
        rows.append(
            [
                f"{processes}" + (" ✗" if failed else ""),
                f"{wall:.1f} ({min(walls):.1f}-{max(walls):.1f})",
                f"{ideal:.1f}",
                f"{speedups[processes]:.2f}x" if base_wall else "",
                f"{one / ideal:.2f}x",
                f"{statistics.median(t.cpu_s for t in runs):.1f}",
                f"{max(c.peak_rss_mib for c in every_run):.1f}",
                str(records[0]) if len(records) == 1 else f"{records[0]}-{records[-1]}",
                duplicates,
                _per_page(statistics.median(t.use.script_calls for t in runs if t.use), pages),
                _per_page(statistics.median(t.use.commands for t in runs if t.use), pages, 1, 1),
                _per_page(statistics.median(t.use.cpu_s for t in runs if t.use), pages, 1000, 3),
                f"{statistics.median(t.started_late_s for t in runs):.2f}",
                sum(t.retries for t in runs),
                f"{statistics.median(c.steal_percent for c in every_run):.0f}",
            ]
        )
    table = markdown_table(
        [
            "processes",
            "wall s (min-max)",
            "ideal s",
            "speed-up vs 1",
            "ideal speed-up",
            "CPU s, all processes",
            "peak RSS MiB, largest",
            "records",
            "duplicates",
            "script calls/page",
            "Redis commands/page",
            "Redis CPU ms/page",
            "joiners started at s",
            "joins retried",
            "steal %",
        ],
        rows,
    )
    target = ""
    if 1 in speedups and 4 in speedups:
        ideal_four = one / ideal_wall_seconds(
            links, max_tasks=4 * args.max_tasks, delay=args.slow_delay
        )
        # The tree's depth bounds the speed-up: the first two levels take a delay each
        # however many processes there are, and so does each process's start-up.
        target = (
            f"\n\nSpeed-up of 4 processes over 1: **{speedups[4]:.2f}x** (target: 3x or "
            f"more; a crawl costing no CPU and starting at once would reach {ideal_four:.2f}x "
            "on this site)."
        )
    text = (
        f"### One crawl, several processes: the slow server, {args.slow_pages} pages, "
        f"{args.slow_delay:g} s per page, {args.slow_fanout} links per page, --max-tasks "
        f"{args.max_tasks} per process, median of {rounds} rounds\n\n"
        "- wall s: from the first process's start to the last one's exit; ideal s: the same "
        "crawl costing no CPU, with every process's tasks in one pool (bench_slow.py's "
        "ideal)\n"
        "- records: the union of the processes' -o files; every page must be there once, "
        "with status 200\n\n"
        + table
        + target
        + ("\n\nFailed checks:\n\n" + "\n".join(problems) if problems else "")
    )
    return text, not problems


# -- the command line -------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=10_000, help="synthetic site size")
    parser.add_argument("--rounds", type=int, default=3, help="pairs (frontier), rounds (slow)")
    parser.add_argument("--max-tasks", type=int, default=100, help="--max-tasks of each process")
    parser.add_argument(
        "--only",
        type=parts_argument(PARTS),
        default=list(PARTS),
        metavar="PARTS",
        help=f"comma-separated, from {','.join(PARTS)} (default: both)",
    )
    slow = parser.add_argument_group("slow")
    slow.add_argument("--slow-pages", type=int, default=2000)
    slow.add_argument("--slow-delay", type=float, default=1.0, help="server delay per page, s")
    slow.add_argument("--slow-fanout", type=int, default=DEFAULT_FANOUT, help="links per page")
    slow.add_argument("--slow-rounds", type=int, help="default: --rounds")
    slow.add_argument(
        "--processes", type=int, nargs="+", default=[1, 2, 4], help="crawlers sharing the crawl"
    )
    parser.add_argument(
        "--our-python",
        type=parse_our_python,
        metavar="LABEL=PATH",
        help="interpreter to run our CLI with (default: this one)",
    )
    parser.add_argument("--json-out", type=Path, help="append every crawl as JSON here")
    # run.py's snapshot of the package, shared by every part of one run; not for people.
    parser.add_argument("--snapshot", type=Path, help=argparse.SUPPRESS)
    return parser


def run(args: argparse.Namespace) -> tuple[str, bool]:
    """Run the parts ``args`` asks for; return (markdown, True if every check passed).

    Raises:
        BenchmarkError: If an option is out of range, or redis-server or our CLI cannot
            start (RedisServerError is one).
        NginxError: If nginx is missing or does not start.
        RuntimeError: If the open-file limit cannot cover the slow part's connections.
    """
    if min(args.pages, args.rounds, args.max_tasks, args.slow_pages, *args.processes) < 1:
        raise BenchmarkError("--pages, --rounds, --max-tasks, --slow-pages, --processes: >= 1")
    if "slow" in args.only:
        # The slow server holds every process's connections, each crawler its own.
        raise_open_file_limit(2 * max(args.processes) * args.max_tasks + SPARE_DESCRIPTORS)
    label, python = args.our_python or ("", sys.executable)
    sections = []
    passed = True
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as work:
        workdir = Path(work)
        package_path = (
            compiled(args.snapshot) if args.snapshot else snapshot_package(workdir / "snapshot")
        )
        env = snapshot_environment(package_path)
        our = probe_our_python(label, python, package_path=package_path, env=env, cwd=workdir)
        with serve_redis() as redis:
            context = Context(
                our=our, env=env, workdir=workdir, redis=redis, json_out=args.json_out
            )
            sections.append(
                "### The shared frontier on Redis (bench_cluster.py)\n\n"
                f"- trio_crawler {package_identity(package_path)}; {our.python}: "
                f"{our.versions}\n- {redis.version}; no persistence, on 127.0.0.1"
            )
            for part in args.only:
                text, ok = (frontier_part if part == "frontier" else slow_part)(args, context)
                sections.append(text)
                passed &= ok
    return "\n\n".join(sections), passed


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        markdown, passed = run(args)
    except (BenchmarkError, RuntimeError) as exc:
        raise SystemExit(f"bench_cluster: {exc}") from None
    print(markdown)
    if not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    run_main(main, "bench_cluster")

"""Broad crawls: many hosts, each crawled politely, all at once.

Why: a broad crawl spends its time waiting. Each host gets one request at a time with a
delay between two of them, so a crawl of ``H`` hosts of ``P`` pages at delay ``D`` cannot
take less than about ``P x D`` seconds however large ``H`` is, and takes that long only if
the crawler keeps every host busy at once: ``H / D`` requests a second, from one process or
a few. The questions: does each tool keep to the delay and to one request per host, does it
fetch every page once, how close does it come to ``P x D``, and what does a request cost it?

The site (``broad_site.py``): ``--hosts`` hosts on loopback addresses 127.0.x.y, one
nginx listening on each address (one ``listen`` each, one port), ``--pages`` pages a host,
a robots.txt allowing everything; links mostly to the same host, some to other hosts of the
site, some off it. nginx logs every request with millisecond times, and that log, not the
tools, gives the columns:

* **pages fetched / all**: distinct pages answered 200, of hosts x pages;
* **fetched twice**: pages requested more than once;
* **requests**: every request, robots.txt included;
* **wall ÷ (PxD)**: the tool's wall time (start-up included; for several processes, the first
  start to the last exit) over the least time the delay allows;
* **gaps < D-10 ms**: gaps between two consecutive request starts to one host shorter than
  the delay by more than 10 ms, robots.txt included (in brackets: between pages only), and
  the smallest gap seen;
* **max in flight / host**: the most requests one host had open at once (at the log's
  millisecond, requests on different connections in the same millisecond count as together);
* **connections**: connections the requests came on (nginx's ``$connection``): a client
  that keeps one open per host needs about one per host, one that moves between hosts
  opens one for nearly every request;
* **CPU ms/request**: user + system CPU of the tool's processes (``os.wait4``, through GNU
  time, which also gives the peak RSS) over the requests in the log.

The tools, each against a fresh nginx on the same site:

* this crawler in memory, with ``--state FILE`` (a new file), and with ``--frontier
  redis://...`` in ``--processes`` processes (3) sharing one crawl, on a private
  ``redis-server`` (``bench_cluster.serve_redis``; its own CPU and its script calls are
  given under the table), and with ``--frontier`` in one process (``ours-frontier-1``:
  the store's own cost, apart from that of splitting the requests over three processes);
  each ``python -m trio_crawler -q --no-progress --delay D --max-per-host 1 --max-tasks N``
  with the roots in a file (``-i FILE``) when ``--help`` lists ``--input-file``, else as
  arguments (the frontier's joiners get none; they start as the first process has made
  the crawl, or ``--join-after`` seconds later, or with it, ``--join-together``);
* Scrapy with its documented broad-crawl settings, ``DOWNLOAD_DELAY = D``,
  ``CONCURRENT_REQUESTS_PER_DOMAIN = 1`` and ``ROBOTSTXT_OBEY`` (``broad_peers.py``);
* Crawlee for Python's ``ParselCrawler`` at its defaults (no per-host delay exists in it).

``--mode scaling`` runs this crawler alone, in memory and with ``--frontier``
(``--scaling-tools``), over ``--scaling-hosts`` (100, 1000 and 5000 hosts) of
``--scaling-pages`` pages (5) at ``--scaling-delay`` (0.2 s): CPU per request against the
number of hosts, ours and the Redis server's, which should stay flat. Each host count is
crawled twice, the second time with more pages a host (``MARGINAL_REQUESTS`` more requests
at least): the marginal cost of a request, with what a crawl pays once taken out.

The comparison's ``÷ one host`` column is CPU per request over the same crawler's, store's
and processes' on one host: the synthetic site of the other benchmarks (3000 pages,
nginx) at ``--max-tasks 100`` with no delay, crawled just before and just after each of our
broad crawls, and the mean of the two taken (the machine's pace drifts over minutes, and a
reference measured minutes away carries that drift into the ratio). ``--mode both`` runs
the two.

Limits: nginx needs one socket and one connection slot per address it listens on, beside
those of the crawlers' connections, so its ``worker_connections`` is set from ``--hosts``,
and the harness raises its own open-file limit for nginx to inherit (see
:func:`raise_nofile`: ``worker_rlimit_nofile`` alone does not do it). On the project's VM the
hard limit is 20 000 and cannot be raised, even as root, which allows about 11 000 hosts.
The numbers never fail the benchmark.

Alone (``setup.sh`` installs the peers; ``run.py --only broad`` runs it too)::

    .venv/bin/python benchmarks/bench_broad.py [--hosts 500] [--pages 20] [--delay 1] \\
        [--tools ours,ours-state,ours-frontier,scrapy,crawlee] [--mode compare|scaling|both] \\
        [--peers-python PATH] [--keep DIR]

``--keep DIR`` works in DIR and leaves each crawl's access log, stderr and records there.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):
    # Run as a script: make the `benchmarks` folder importable as a package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_cluster import _kill_measured_children, redis_use, serve_redis
from benchmarks.bench_engines import BenchmarkError, probe_our_python, snapshot_environment
from benchmarks.broad_site import (
    LOG_FORMAT,
    BroadMetrics,
    BroadSite,
    generate,
    host_address,
    measure,
    parse_log,
)
from benchmarks.measure import (
    ChildCost,
    compiled,
    markdown_table,
    package_identity,
    parts_argument,
    run_main,
    run_measured,
    snapshot_package,
)
from benchmarks.nginx import NginxError, find_nginx, start_nginx, stop_process

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from benchmarks.bench_cluster import RedisServer, RedisUse

HERE = Path(__file__).resolve().parent
PEERS_SCRIPT = HERE / "broad_peers.py"
PEERS_PYTHON = HERE / ".venv" / "bin" / "python"
TOOLS = ("ours", "ours-state", "ours-frontier", "ours-frontier-1", "scrapy", "crawlee")
LABELS = {
    "ours": "trio-crawler, in memory",
    "ours-state": "trio-crawler, --state",
    "ours-frontier": "trio-crawler, --frontier",
    "ours-frontier-1": "trio-crawler, --frontier, 1 process",
    "scrapy": "Scrapy, broad-crawl settings",
    "crawlee": "Crawlee, ParselCrawler",
}
# The shared frontier in --processes processes, and in one: the second tells the store's
# own cost from that of splitting the crawl's requests over several event loops.
FRONTIER_TOOLS = ("ours-frontier", "ours-frontier-1")
MODES = ("compare", "scaling", "both")
# A scaling crawl that keeps up takes well under a minute (5000 hosts x 5 pages); one that
# stalls is stopped by its own --max-time, reports, and its row shows what the log holds.
SCALING_MAX_TIME = 300.0
# A crawl of 500 hosts x 20 pages at a 1 s delay takes about 25 s for a crawler that keeps
# up, a few minutes for one that is CPU-bound here; more than this is a hang.
DEFAULT_TIMEOUT = 1800.0
# Ports below Linux's ephemeral range (32768-60999 by default), so no client socket of
# another test holds ours on one of the addresses; tried at random until one binds.
_PORT_RANGE = (20000, 32000)
_PORT_ATTEMPTS = 50
# Readiness: nginx binds thousands of addresses in well under a second; 400 attempts 25 ms
# apart give a loaded machine ten seconds.
_READY_ATTEMPTS = 400
_READY_INTERVAL = 0.025
# nginx's connection slots beyond one per listening address: the crawlers' connections
# (up to --max-tasks per process, and idle keep-alive ones) with room to spare.
_SPARE_CONNECTIONS = 8192
# How long the joiners of a shared crawl wait for the creator to make it, and how often
# they look (bench_cluster.py does the same).
_CREATE_TIMEOUT = 60.0
_CREATE_POLL = 0.01

_CONFIG = """\
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile {nofile};
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;

events {{
    worker_connections {connections};
}}

http {{
    log_format broad '{log_format}';
    access_log {log} broad buffer=64k flush=1s;
    types {{
        text/html html;
        text/plain txt;
    }}
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    keepalive_timeout 60s;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;

    server {{
{listens}
        root {root}/$server_addr;
        index index.html;
        location = /__ready {{
            access_log off;
            return 204;
        }}
    }}
}}
"""


# -- the server ------------------------------------------------------------------------------


def nginx_files(hosts: int) -> int:
    """Open files nginx may need: a listening socket per address, the clients' connections,
    its logs."""
    return hosts + _SPARE_CONNECTIONS + 64


def raise_nofile(needed: int) -> None:
    """Raise this process's open-file limit to ``needed`` for nginx to inherit.

    nginx opens its listening sockets while it reads its configuration, under the limit
    it was started with; ``worker_rlimit_nofile`` is set for worker processes, and with
    ``master_process off`` comes too late to help (30 000 addresses failed with "Too many
    open files" at an inherited limit of 20 000 whatever it said). So the harness raises
    its own soft limit, and the hard one too when it may (as root).

    Raises:
        NginxError: If the limit cannot be raised that far, with the fix.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, max(hard, needed)))
    except (ValueError, OSError):
        raise NginxError(
            f"nginx needs {needed} open files for this many hosts, and the limit is {soft} "
            f"(hard {hard}): raise it (ulimit -Hn {needed}, as root) or use fewer hosts"
        ) from None


def nginx_config(site: BroadSite, *, tmp: Path, log: Path) -> str:
    """nginx.conf for ``site``: one ``listen`` per host address, each host's directory as
    the root of its address, every request logged in ``LOG_FORMAT``."""
    connections = len(site.hosts) + _SPARE_CONNECTIONS
    listens = "\n".join(f"        listen {host}:{site.port};" for host in site.hosts)
    return _CONFIG.format(
        nofile=nginx_files(len(site.hosts)),
        connections=connections,
        tmp=tmp,
        log=log,
        log_format=LOG_FORMAT,
        listens=listens,
        root=site.directory.resolve(),
    )


def choose_port(hosts: int) -> int:
    """A port that binds on the first and the last host's address a moment ago."""
    addresses = {host_address(0), host_address(hosts - 1)}
    for _ in range(_PORT_ATTEMPTS):
        port = random.randrange(*_PORT_RANGE)
        try:
            for address in addresses:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.bind((address, port))
        except OSError:
            continue
        return port
    raise NginxError(f"no free port in {_PORT_RANGE} after {_PORT_ATTEMPTS} attempts")


@dataclass(frozen=True, slots=True)
class Served:
    """A running nginx of :func:`serve_hosts`: how long it took to listen on every address,
    and its process (one: ``master_process off``), for a benchmark that stops it a while."""

    ready_s: float
    process: subprocess.Popen[bytes]


@contextlib.contextmanager
def serve_hosts(site: BroadSite, log: Path) -> Iterator[Served]:
    """Serve ``site`` with a private nginx, its access log to ``log``. nginx is stopped by
    its PID at the end, which writes out the log's buffer.

    Raises:
        NginxError: If nginx is missing, or does not start and answer.
    """
    nginx = find_nginx()
    raise_nofile(nginx_files(len(site.hosts)))
    with tempfile.TemporaryDirectory(prefix="bench-broad-nginx-") as tmp:
        config = Path(tmp, "nginx.conf")
        config.write_text(nginx_config(site, tmp=Path(tmp), log=log))
        started = time.perf_counter()
        process = start_nginx(nginx, tmp, config)
        try:
            _wait_ready(process, site, tmp)
            yield Served(time.perf_counter() - started, process)
        finally:
            stop_process(process)


def _wait_ready(process: subprocess.Popen[bytes], site: BroadSite, tmp: str) -> None:
    """Poll until nginx answers on the last address it binds (and then on the first)."""
    for address in (site.hosts[-1], site.hosts[0]):
        for _ in range(_READY_ATTEMPTS):
            if process.poll() is not None:
                raise NginxError(f"nginx exited {process.returncode}:\n{_error_log(tmp)}")
            try:
                with socket.create_connection((address, site.port), timeout=1):
                    break
            except OSError:
                time.sleep(_READY_INTERVAL)
        else:
            raise NginxError(
                f"nginx did not accept connections on {address}:{site.port} in "
                f"{_READY_ATTEMPTS * _READY_INTERVAL:g} s:\n{_error_log(tmp)}"
            )
        url = f"http://{address}:{site.port}/__ready"
        with urllib.request.urlopen(url, timeout=5) as response:
            if response.status != 204:
                raise NginxError(f"nginx answered {url} with {response.status}, not 204")


def _error_log(tmp: str) -> str:
    parts = []
    for name in ("stderr.log", "error.log"):
        with contextlib.suppress(OSError):
            parts.append(Path(tmp, name).read_text(errors="replace")[-2000:])
    return "".join(parts)


# -- the tools -------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class ToolRun:
    """One tool's crawl of the site: its processes' costs and what the log says.

    Attributes:
        tool: One of ``TOOLS``.
        costs: Each process's cost (several for the shared frontier).
        wall_s: From the first process's start to the last one's exit.
        metrics: What nginx's log says.
        nginx_start_s: Seconds nginx took to listen on every address.
        redis: For the shared frontier, what Redis did during the crawl: its own CPU
            seconds, and the script calls it ran (the processes' round trips).
        notes: Exits other than 0, timeouts, with the end of stderr.
        started_at: When the first process started (seconds since the epoch, nginx's
            clock): with ``wall_s`` and the log's times, where the wall time went.
    """

    tool: str
    costs: list[ChildCost]
    wall_s: float
    metrics: BroadMetrics
    nginx_start_s: float = 0.0
    redis: RedisUse | None = None
    notes: list[str] = field(default_factory=list)
    started_at: float = 0.0

    @property
    def cpu_s(self) -> float:
        return sum(cost.cpu_s for cost in self.costs)

    @property
    def peak_rss_mib(self) -> float:
        return max((cost.peak_rss_mib for cost in self.costs), default=0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    """What every crawl of one benchmark shares."""

    python: str
    peers_python: str
    env: dict[str, str]
    input_file: bool
    max_tasks: int
    processes: int
    timeout: float
    work: Path
    max_time: float | None = None
    nofile: int | None = None  # our crawlers' soft open-file limit (ulimit -n), if set
    # Seconds between the crawl's creation and the joiners' start: 0 starts them at once,
    # so that their interpreters start during the first process's robots.txt burst, as
    # processes started together would; more shows what that costs.
    join_after: float = 0.0
    # The joiners start with the first process, before the crawl exists (and wait for it):
    # their interpreters start during its start, not its burst.
    join_together: bool = False
    # The delay is each host's robots.txt Crawl-delay, and ours runs without --delay.
    crawl_delay: bool = False


def our_command(
    setup: Setup,
    *,
    delay: float,
    output: Path,
    roots_file: Path | None,
    roots: Sequence[str],
    extra: Sequence[str] = (),
    broad: bool = True,
) -> list[str]:
    """This crawler's command line: the manners of a broad crawl (``broad``; else none,
    as the single-host crawl runs), the roots from a file when the CLI reads one, else as
    arguments (none for a joiner: ``roots_file`` None and ``roots`` empty)."""
    command = [setup.python, "-m", "trio_crawler", "-q", "--no-progress", "-o", str(output)]
    if broad and not setup.crawl_delay:
        command += ["--delay", f"{delay:g}"]
    if broad:
        command += ["--max-per-host", "1"]
    command += ["--max-tasks", str(setup.max_tasks), *extra]
    if setup.max_time is not None:
        command += ["--max-time", f"{setup.max_time:g}"]
    if roots_file is not None and setup.input_file:
        command += ["-i", str(roots_file)]
    elif roots_file is not None:
        command += roots
    if setup.nofile is not None:
        # The shell's ulimit, then exec: the crawler itself runs under the lower limit.
        command = ["sh", "-c", 'ulimit -Sn "$0" && exec "$@"', str(setup.nofile), *command]
    return command


def _tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = path.read_text(errors="replace").strip().splitlines()
        return " / ".join(lines[-3:])[-400:]
    return ""


def finish_reason(report: Path) -> str | None:
    """The ``Finish reason:`` of our CLI's report, None if there is none."""
    with contextlib.suppress(OSError):
        for line in reversed(report.read_text(errors="replace").splitlines()):
            if line.startswith("Finish reason:"):
                return line.removeprefix("Finish reason:").strip()
    return None


def _note(label: str, cost: ChildCost, stderr: Path, report: Path | None = None) -> str | None:
    """A line for the notes if the crawl did not end well: an exit other than 0, a
    timeout, or (for our CLI) a report whose finish reason is not ``finished``."""
    reason = finish_reason(report) if report is not None else "finished"
    if cost.returncode == 0 and not cost.timed_out and reason == "finished":
        return None
    tail = _tail(stderr)
    return (
        f"{label}: exit {cost.returncode}"
        + (", timed out" if cost.timed_out else "")
        + (f", finish reason {reason}" if reason != "finished" else "")
        + (f": `{tail}`" if tail else "")
    )


def crawl(
    tool: str,
    site: BroadSite,
    setup: Setup,
    *,
    delay: float,
    redis: RedisServer | None = None,
) -> ToolRun:
    """Serve ``site`` with a fresh nginx, crawl it with ``tool``, stop nginx, read its log."""
    work = setup.work / tool
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    roots_file = work / "roots.txt"
    roots_file.write_text("".join(f"{root}\n" for root in site.roots))
    log = work / "access.log"
    notes: list[str] = []
    redis_used: RedisUse | None = None
    with serve_hosts(site, log) as served:
        if tool in ("ours", "ours-state"):
            extra = ["--state", str(work / "crawl.db")] if tool == "ours-state" else []
            command = our_command(
                setup,
                delay=delay,
                output=work / "records.jsonl",
                roots_file=roots_file,
                roots=site.roots,
                extra=extra,
            )
            stderr = work / "stderr.txt"
            report = work / "report.txt"
            started_at = time.time()
            cost = run_measured(
                command,
                timeout=setup.timeout,
                cwd=work,
                env=setup.env,
                stdout=report,
                stderr=stderr,
            )
            costs, wall = [cost], cost.wall_s
            notes += filter(None, [_note(LABELS[tool], cost, stderr, report)])
        elif tool in FRONTIER_TOOLS:
            if redis is None:
                raise BenchmarkError("the shared frontier needs a Redis server")
            shared = _crawl_shared(
                site.roots, _processes(tool, setup), delay=delay, redis=redis, roots_file=roots_file
            )
            costs, wall, started_at = shared.costs, shared.wall_s, shared.started_at
            redis_used = shared.redis
            notes += shared.notes
        else:
            if tool == "scrapy":
                command = [setup.peers_python, str(PEERS_SCRIPT), "scrapy"]
                command += ["--delay", f"{delay:g}", "--concurrency", str(setup.max_tasks)]
            else:
                command = [setup.peers_python, str(PEERS_SCRIPT), "crawlee"]
            stderr = work / "stderr.txt"
            started_at = time.time()
            cost = run_measured(
                [*command, str(roots_file)], timeout=setup.timeout, cwd=work, stderr=stderr
            )
            costs, wall = [cost], cost.wall_s
            notes += filter(None, [_note(LABELS[tool], cost, stderr)])
    with log.open() as lines:
        requests = parse_log(lines)
    metrics = measure(requests, hosts=site.hosts, pages_per_host=site.pages_per_host, delay=delay)
    return ToolRun(
        tool=tool,
        costs=costs,
        wall_s=wall,
        metrics=metrics,
        nginx_start_s=served.ready_s,
        redis=redis_used,
        notes=notes,
        started_at=started_at,
    )


# The yardstick for CPU per request: the same crawler, store and processes crawling one
# host, the synthetic site of the other benchmarks, at their --max-tasks and no delay.
SINGLE_HOST_PAGES = 3000
SINGLE_HOST_TASKS = 100
OURS = ("ours", "ours-state", "ours-frontier", "ours-frontier-1")


def _processes(tool: str, setup: Setup) -> Setup:
    """``setup`` for ``tool``: one process for ``ours-frontier-1``."""
    return dataclasses.replace(setup, processes=1) if tool == "ours-frontier-1" else setup


def single_host(
    tool: str, root: str, setup: Setup, *, redis: RedisServer | None
) -> tuple[float, int]:
    """CPU seconds and requests of ``tool`` (one of :data:`OURS`) crawling the one-host
    site at ``root``: records written, plus its robots.txt."""
    work = setup.work / f"single-{tool}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    roots_file = work / "roots.txt"
    roots_file.write_text(f"{root}\n")
    single = dataclasses.replace(_processes(tool, setup), max_tasks=SINGLE_HOST_TASKS)
    if tool in FRONTIER_TOOLS:
        if redis is None:
            raise BenchmarkError("the shared frontier needs a Redis server")
        costs = _crawl_shared(
            [root], single, delay=0.0, redis=redis, roots_file=roots_file, broad=False
        ).costs
    else:
        extra = ["--state", str(work / "crawl.db")] if tool == "ours-state" else []
        command = our_command(
            single,
            delay=0.0,
            output=work / "records-0.jsonl",
            roots_file=roots_file,
            roots=[root],
            extra=extra,
            broad=False,
        )
        costs = [run_measured(command, timeout=setup.timeout, cwd=work, env=setup.env)]
    records = 0
    for path in work.glob("records-*.jsonl"):
        with path.open() as lines:
            records += sum(1 for _ in lines)
    return sum(cost.cpu_s for cost in costs), records + 1


@contextlib.contextmanager
def one_host_site(work: Path) -> Iterator[str]:
    """Serve the one-host site (the synthetic site of the other benchmarks) for as long as
    the block runs, and yield its root, so each broad crawl can be bracketed by one-host
    crawls (:func:`one_host_cost`)."""
    from benchmarks.nginx import serve_directory
    from benchmarks.synthetic_site import generate as generate_one_host

    directory = work / "single-site"
    shutil.rmtree(directory, ignore_errors=True)
    generate_one_host(directory, pages=SINGLE_HOST_PAGES)
    try:
        with serve_directory(directory) as root:
            yield root
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def one_host_cost(tool: str, root: str, setup: Setup, *, redis: RedisServer | None) -> float:
    """CPU ms per request of ``tool`` (one of :data:`OURS`) on the one-host site."""
    print(f"bench_broad: {LABELS[tool]}, one host ...", file=sys.stderr, flush=True)
    cpu_s, requests = single_host(tool, root, setup, redis=redis)
    return 1000 * cpu_s / requests


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedRun:
    """The processes of one shared crawl: their costs, the wall time from the first start
    to the last exit, what Redis did meanwhile, notes, and the first start's time of day."""

    costs: list[ChildCost]
    wall_s: float
    redis: RedisUse
    notes: list[str]
    started_at: float


def _crawl_shared(
    roots: Sequence[str],
    setup: Setup,
    *,
    delay: float,
    redis: RedisServer,
    roots_file: Path,
    broad: bool = True,
) -> SharedRun:
    """``setup.processes`` crawlers sharing one crawl on Redis: the first creates it from
    the roots, the others join once it exists."""
    connection = redis.connection
    connection.command("FLUSHALL")
    before = connection.snapshot()
    work = roots_file.parent
    costs: list[ChildCost | None] = [None] * setup.processes
    ended = [0.0] * setup.processes
    failures: list[BaseException] = []

    def run_one(index: int) -> None:
        command = our_command(
            setup,
            delay=delay,
            output=work / f"records-{index}.jsonl",
            roots_file=roots_file if index == 0 else None,
            roots=roots if index == 0 else (),
            extra=["--frontier", redis.url, "--crawl-id", "broad"],
            broad=broad,
        )
        try:
            costs[index] = run_measured(
                command,
                timeout=setup.timeout,
                cwd=work,
                env=setup.env,
                stdout=work / f"report-{index}.txt",
                stderr=work / f"stderr-{index}.txt",
            )
        except BaseException as exc:
            failures.append(exc)
        finally:
            ended[index] = time.perf_counter()

    started_at = time.time()
    started = time.perf_counter()
    threads = [threading.Thread(target=run_one, args=(0,), name="crawler-0")]
    threads[0].start()
    try:
        deadline = -math.inf if setup.join_together else started + _CREATE_TIMEOUT
        while threads[0].is_alive() and time.perf_counter() < deadline:
            if connection.command("DBSIZE") > 0:
                break
            time.sleep(_CREATE_POLL)
        if setup.join_after > 0:
            time.sleep(setup.join_after)
        for index in range(1, setup.processes):
            thread = threading.Thread(target=run_one, args=(index,), name=f"crawler-{index}")
            threads.append(thread)
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
    except BaseException:
        while any(thread.is_alive() for thread in threads):
            _kill_measured_children()
            for thread in threads:
                thread.join(0.2)
        raise
    if failures:
        raise failures[0]
    use = redis_use(before, connection.snapshot())
    connection.command("FLUSHALL")
    done = [cost for cost in costs if cost is not None]
    notes = [
        note
        for index, cost in enumerate(done)
        if (
            note := _note(
                f"{LABELS['ours-frontier']} process {index}",
                cost,
                work / f"stderr-{index}.txt",
                work / f"report-{index}.txt",
            )
        )
    ]
    return SharedRun(
        costs=done, wall_s=max(ended) - started, redis=use, notes=notes, started_at=started_at
    )


# -- the tables ------------------------------------------------------------------------------

COMPARE_HEADERS = [
    "tool",
    "pages fetched / all",
    "fetched twice",
    "requests",
    "wall s",
    "wall ÷ (PxD)",
    "gaps < D-10 ms (pages only)",
    "smallest gap s",
    "max in flight / host",
    "connections",
    "CPU s",
    "CPU ms/request",
    "÷ one host",
    "peak RSS MiB",
]


def compare_row(
    label: str, run: ToolRun, *, pages: int, delay: float, one_host: float | None = None
) -> list[object]:
    metrics = run.metrics
    return [
        label,
        f"{metrics.pages_ok}/{metrics.pages}",
        metrics.fetched_twice,
        metrics.requests,
        f"{run.wall_s:.1f}",
        f"{run.wall_s / (pages * delay):.2f}",
        f"{metrics.short_gaps} ({metrics.short_page_gaps})",
        "-" if metrics.min_gap is None else f"{metrics.min_gap:.3f}",
        metrics.max_in_flight,
        metrics.connections,
        f"{run.cpu_s:.1f}",
        _per_request(run.cpu_s, metrics.requests),
        "-"
        if one_host is None or not metrics.requests
        else f"{1000 * run.cpu_s / metrics.requests / one_host:.2f}",
        f"{run.peak_rss_mib:.0f}",
    ]


TIME_HEADERS = [
    "tool",
    "start to first request s",
    "first request to last host's first s",
    "median page gap s",
    "p90 page gap s",
    "a host's gaps past D in all, median s",
    "spread of the last round s",
    "last request to exit s",
    "wall s",
]


def _row_label(tool: str, run: ToolRun, setup: Setup, *, round_number: int | None) -> str:
    """A crawl's row name: the tool, how many processes shared a frontier and when they
    joined, and its round when there are several."""
    label = LABELS[tool]
    if tool == "ours-frontier":
        label += f", {len(run.costs)} processes"
        if setup.join_after > 0:
            label += f", joined {setup.join_after:g} s after"
        if setup.join_together:
            label += ", started together"
    if round_number is not None:
        label += f", round {round_number}"
    return label


def _redis_note(label: str, run: ToolRun) -> list[str]:
    """What the Redis server spent on a shared crawl, which the row's CPU leaves out."""
    if run.redis is None:
        return []
    requests, calls = run.metrics.requests, run.redis.script_calls
    return [
        f"{label}: Redis's own CPU {run.redis.cpu_s:.1f} s "
        f"({_per_request(run.redis.cpu_s, requests)} ms/request), not in the row; "
        f"{calls} step calls" + (f" ({calls / requests:.2f} a request)." if requests else ".")
    ]


def wall_summary(walls: dict[str, list[float]]) -> str:
    """Each tool's wall ÷ (PxD) over its rounds: the median, and the smallest and largest,
    since on a shared machine one crawl's ratio moves by more than the bound's margin."""
    parts = [
        f"{label} {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        if len(ratios) > 1
        else f"{label} {ratios[0]:.3f} (one round)"
        for label, ratios in walls.items()
    ]
    return "Wall ÷ (PxD), median of the rounds (smallest-largest): " + "; ".join(parts) + "."


def time_row(label: str, run: ToolRun) -> list[object]:
    """Where ``run``'s wall time went, from the log's times: a polite crawl ends no sooner
    than P x D after its last host's first request, so the wall time is the start, the
    spread of the first requests, P gaps of at least D, and the exit; what a host's gaps
    came to past D in all is what its last request carries, and the last round's spread
    shows how much later than the first host the last one was served by then."""
    metrics = run.metrics
    if not metrics.requests or not run.started_at:
        return [label, *["-"] * (len(TIME_HEADERS) - 1)]

    def gap(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    return [
        label,
        f"{metrics.first_start - run.started_at:.2f}",
        f"{metrics.last_host_start - metrics.first_start:.2f}",
        gap(metrics.median_page_gap),
        gap(metrics.p90_page_gap),
        gap(metrics.median_host_lateness),
        f"{metrics.last_round_spread:.2f}",
        f"{run.started_at + run.wall_s - metrics.last_end:.2f}",
        f"{run.wall_s:.1f}",
    ]


def _per_request(cpu_s: float, requests: int) -> str:
    return f"{1000 * cpu_s / requests:.2f}" if requests else "-"


SCALING_HEADERS = [
    "tool",
    "hosts",
    "pages fetched / all",
    "requests",
    "wall s",
    "wall ÷ (PxD)",
    "gaps < D-10 ms",
    "max in flight / host",
    "connections",
    "CPU s",
    "CPU ms/request",
    "CPU ms/request less start-up",
    "CPU ms/request, marginal",
    "Redis CPU ms/request",
    "Redis, marginal",
    "peak RSS MiB",
    "nginx start s",
]
# The marginal cost a request: each host count is crawled a second time with more pages a
# host, at least this many more requests in all, and the difference in CPU is divided by
# the difference in requests. What a crawl costs once (start-up, the robots.txt of every
# host, the workers' teardown, the report) cancels out, which at 100 hosts and 600
# requests is about half the CPU.
MARGINAL_REQUESTS = 2000


def _json_line(run: ToolRun, site: BroadSite, delay: float, mode: str) -> dict[str, Any]:
    return {
        "part": "broad",
        "mode": mode,
        "tool": run.tool,
        "hosts": len(site.hosts),
        "pages_per_host": site.pages_per_host,
        "delay": delay,
        "metrics": dataclasses.asdict(run.metrics),
        "wall_s": run.wall_s,
        "cpu_s": run.cpu_s,
        "costs": [dataclasses.asdict(cost) for cost in run.costs],
        "redis_cpu_s": None if run.redis is None else run.redis.cpu_s,
        "step_calls": None if run.redis is None else run.redis.script_calls,
        "notes": run.notes,
    }


def _write_json(path: Path | None, line: dict[str, Any]) -> None:
    if path is not None:
        with path.open("a") as out:
            out.write(json.dumps(line) + "\n")


# -- the benchmark ---------------------------------------------------------------------------


def _hosts_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers, not {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Crawl many hosts politely with several tools; print a table."
    )
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--pages", type=int, default=20, help="per host")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds between requests")
    parser.add_argument(
        "--tools",
        type=parts_argument(TOOLS),
        default=list(TOOLS),
        metavar="TOOLS",
        help=f"comma-separated, from {','.join(TOOLS)} (default: all)",
    )
    parser.add_argument("--mode", choices=MODES, default="compare")
    parser.add_argument("--max-tasks", type=int, default=500, help="ours; Scrapy's concurrency")
    parser.add_argument("--processes", type=int, default=3, help="sharing --frontier")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="--mode compare: crawl with each of ours N times, in turn, and give the median "
        "wall ÷ (PxD) (Scrapy and Crawlee crawl once)",
    )
    parser.add_argument(
        "--crawl-delay",
        action="store_true",
        help="--mode compare: each host's robots.txt asks for the delay (Crawl-delay: D) and "
        "this crawler runs without --delay, as a crawl that keeps to the hosts' own delays "
        "(Scrapy and Crawlee are given D as before: neither applies a Crawl-delay)",
    )
    parser.add_argument(
        "--join-after",
        type=float,
        default=0.0,
        metavar="S",
        help="start the --frontier joiners S seconds after the crawl exists (default: at once)",
    )
    parser.add_argument(
        "--join-together",
        action="store_true",
        help="start the --frontier joiners with the first process, before the crawl exists",
    )
    scaling = parser.add_argument_group("--mode scaling: this crawler alone")
    scaling.add_argument(
        "--scaling-hosts", type=_hosts_list, default=[100, 1000, 5000], metavar="H,H,..."
    )
    scaling.add_argument(
        "--scaling-tools",
        type=parts_argument(OURS),
        default=["ours", "ours-frontier"],
        metavar="TOOLS",
        help=f"comma-separated, from {','.join(OURS)} (default: ours,ours-frontier)",
    )
    scaling.add_argument("--scaling-pages", type=int, default=5)
    scaling.add_argument("--scaling-delay", type=float, default=0.2)
    scaling.add_argument(
        "--scaling-max-time",
        type=float,
        default=SCALING_MAX_TIME,
        help="each crawl's --max-time, s (a row cut short shows what the log holds)",
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for our CLI")
    parser.add_argument("--peers-python", default=str(PEERS_PYTHON), help="Scrapy's, Crawlee's")
    parser.add_argument(
        "--snapshot", type=Path, help="PYTHONPATH entry holding trio_crawler (run.py's)"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="per crawl, s")
    parser.add_argument(
        "--our-nofile",
        type=int,
        metavar="N",
        help="run our crawlers under ulimit -n N (nginx keeps the harness's higher limit)",
    )
    parser.add_argument("--json-out", type=Path, help="append each crawl as a JSON line")
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="work in DIR and keep it (each tool's access log, stderr and records)",
    )
    return parser


def _check(args: argparse.Namespace) -> None:
    hosts = [args.hosts, *args.scaling_hosts]
    if min(hosts) < 1 or args.pages < 1 or args.scaling_pages < 1:
        raise BenchmarkError("--hosts, --pages and their --scaling- forms must be >= 1")
    if args.delay <= 0 or args.scaling_delay <= 0:
        raise BenchmarkError("--delay and --scaling-delay must be > 0")
    if args.max_tasks < 1 or args.processes < 1 or args.rounds < 1:
        raise BenchmarkError("--max-tasks, --processes and --rounds must be >= 1")
    if args.join_together and args.join_after > 0:
        raise BenchmarkError("--join-together and --join-after exclude each other")
    if not 0 <= args.join_after < args.timeout:
        raise BenchmarkError("--join-after must be from 0 to less than --timeout")


def run(args: argparse.Namespace) -> tuple[str, bool]:
    """Run the chosen mode; return the markdown and True whatever the numbers."""
    _check(args)
    sections = []
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            work = args.keep.resolve()
            work.mkdir(parents=True, exist_ok=True)
            for stale in ("scratch", "snapshot"):
                shutil.rmtree(work / stale, ignore_errors=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-broad-")))
        package_path = (
            compiled(args.snapshot) if args.snapshot else snapshot_package(work / "snapshot")
        )
        env = snapshot_environment(package_path)
        scratch = work / "scratch"
        scratch.mkdir()
        our = probe_our_python("", args.python, package_path=package_path, env=env, cwd=scratch)
        help_text = subprocess.run(
            [args.python, "-m", "trio_crawler", "--help"],
            capture_output=True,
            text=True,
            env=env,
            cwd=scratch,
            check=True,
        ).stdout
        setup = Setup(
            python=args.python,
            peers_python=args.peers_python,
            env=env,
            input_file="--input-file" in help_text,
            max_tasks=args.max_tasks,
            processes=args.processes,
            timeout=args.timeout,
            work=work / "runs",
            nofile=args.our_nofile,
            join_after=args.join_after,
            join_together=args.join_together,
            crawl_delay=args.crawl_delay,
        )
        identity = f"Code under test: {package_identity(package_path)}; {our.versions}."
        if args.mode in ("compare", "both"):
            sections.append(compare(args, setup, work))
        if args.mode in ("scaling", "both"):
            sections.append(scaling(args, setup, work))
    return "\n\n".join([*sections, identity]), True


def _new_site(work: Path, hosts: int, pages: int, crawl_delay: float | None = None) -> BroadSite:
    directory = work / "site"
    shutil.rmtree(directory, ignore_errors=True)
    print(f"bench_broad: writing {hosts} hosts x {pages} pages ...", file=sys.stderr, flush=True)
    port = choose_port(hosts)
    return generate(directory, hosts=hosts, pages=pages, port=port, crawl_delay=crawl_delay)


def compare(args: argparse.Namespace, setup: Setup, work: Path) -> str:
    site = _new_site(work, args.hosts, args.pages, args.delay if args.crawl_delay else None)
    rows: list[list[object]] = []
    time_rows: list[list[object]] = []
    notes: list[str] = []
    tools = list(args.tools)
    if any(tool in tools for tool in ("scrapy", "crawlee")) and not os.access(
        setup.peers_python, os.X_OK
    ):
        notes.append(f"Scrapy and Crawlee: not run, no {setup.peers_python} (run setup.sh).")
        tools = [tool for tool in tools if tool not in ("scrapy", "crawlee")]
    with contextlib.ExitStack() as stack:
        frontier = any(tool in FRONTIER_TOOLS for tool in tools)
        redis = stack.enter_context(serve_redis()) if frontier else None
        one_root = (
            stack.enter_context(one_host_site(work)) if any(t in OURS for t in tools) else None
        )
        # The machine's pace drifts over minutes, so each of our crawls is measured between
        # two one-host crawls of the same tool, and divided by their mean.
        one_host: dict[str, tuple[float, float]] = {}
        walls: dict[str, list[float]] = {}
        # Each round crawls every one of ours once, in turn, so that the machine's drift
        # falls on all of them alike; the peers, slower by far, crawl in the first only.
        for number in range(args.rounds):
            for tool in tools if number == 0 else [t for t in tools if t in OURS]:
                reference = one_root if tool in OURS else None
                before = (
                    None
                    if reference is None
                    else one_host_cost(tool, reference, setup, redis=redis)
                )
                print(f"bench_broad: {LABELS[tool]} ...", file=sys.stderr, flush=True)
                result = crawl(tool, site, setup, delay=args.delay, redis=redis)
                walls.setdefault(LABELS[tool], []).append(result.wall_s / (args.pages * args.delay))
                in_rounds = args.rounds > 1 and tool in OURS
                label = _row_label(
                    tool, result, setup, round_number=number + 1 if in_rounds else None
                )
                if reference is not None and before is not None:
                    one_host[label] = (before, one_host_cost(tool, reference, setup, redis=redis))
                notes += _redis_note(label, result)
                rows.append(
                    compare_row(
                        label,
                        result,
                        pages=args.pages,
                        delay=args.delay,
                        one_host=statistics.fmean(one_host[label]) if label in one_host else None,
                    )
                )
                time_rows.append(time_row(label, result))
                notes += result.notes
                _write_json(args.json_out, _json_line(result, site, args.delay, "compare"))
    roots = "`-i FILE`" if setup.input_file else "the roots as arguments (no `--input-file`)"
    ours_delay = f"--delay {args.delay:g} "
    if args.crawl_delay:
        roots += f"; no `--delay`: each robots.txt says `Crawl-delay: {args.delay:g}`"
        ours_delay = ""
    lines = [
        "### Broad crawl",
        "",
        f"{args.hosts} hosts (127.0.x.y, one nginx) x {args.pages} pages "
        f"({site.total_bytes / 2**20:.1f} MiB), delay D = {args.delay:g} s, one request at "
        f"a time per host; PxD = {args.pages * args.delay:g} s. trio-crawler: `{ours_delay}"
        f"--max-per-host 1 --max-tasks {args.max_tasks}`, {roots}. Scrapy: "
        f"its broad-crawl settings, CONCURRENT_REQUESTS {args.max_tasks}, DOWNLOAD_DELAY "
        f"{args.delay:g} (randomized 0.5-1.5x, its default), CONCURRENT_REQUESTS_PER_DOMAIN "
        "1, ROBOTSTXT_OBEY. Crawlee: its defaults (no per-host delay, robots.txt not read, "
        "same-host links only).",
        "",
        markdown_table(COMPARE_HEADERS, rows),
    ]
    if one_host:
        measured = ", ".join(
            f"{label} {before:.2f} / {after:.2f}" for label, (before, after) in one_host.items()
        )
        lines += [
            "",
            f"÷ one host: CPU per request over the same crawler's on one host: the synthetic "
            f"site ({SINGLE_HOST_PAGES} pages, nginx), `--max-tasks {SINGLE_HOST_TASKS}`, no "
            f"delay, the same store and processes, crawled just before and just after the "
            f"broad crawl; the mean of the two (ms/request before / after: {measured}).",
        ]
    if args.rounds > 1:
        lines += ["", wall_summary(walls)]
    lines += [
        "",
        "Where the wall time went, from nginx's log and each tool's start and exit: the first "
        "request, the last host's first (after the first request), the gaps between two page "
        "requests to one host, by how much a host's requests went later than a delay apart "
        "in all (the median host), how far apart the hosts' last round of requests was (each "
        "host's n-th, n the fewest any host had), and the last request's end to the exit.",
        "",
        markdown_table(TIME_HEADERS, time_rows),
    ]
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    return "\n".join(lines)


def scaling(args: argparse.Namespace, setup: Setup, work: Path) -> str:
    startup = _startup_cpu(setup, work)
    rows: list[list[object]] = []
    notes: list[str] = []
    pages, delay = args.scaling_pages, args.scaling_delay
    tools = args.scaling_tools
    limited = dataclasses.replace(
        setup, max_time=args.scaling_max_time, timeout=args.scaling_max_time + 120
    )
    with contextlib.ExitStack() as stack:
        frontier = any(tool in FRONTIER_TOOLS for tool in tools)
        redis = stack.enter_context(serve_redis()) if frontier else None
        for hosts in args.scaling_hosts:
            more = pages + max(pages, math.ceil(MARGINAL_REQUESTS / hosts))
            runs: dict[str, list[ToolRun]] = {tool: [] for tool in tools}
            for site_pages in (pages, more):
                site = _new_site(work, hosts, site_pages)
                for tool in tools:
                    print(
                        f"bench_broad: scaling, {LABELS[tool]}, {hosts} hosts x {site_pages}"
                        " pages ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    result = crawl(tool, site, limited, delay=delay, redis=redis)
                    runs[tool].append(result)
                    notes += [f"{hosts} hosts: {note}" for note in result.notes]
                    _write_json(args.json_out, _json_line(result, site, delay, "scaling"))
            for tool in tools:
                first, second = runs[tool]
                rows.append(_scaling_row(LABELS[tool], hosts, first, second, pages, delay, startup))
    shutil.rmtree(work / "site", ignore_errors=True)
    lines = [
        "### Broad crawl: CPU per request against the number of hosts",
        "",
        f"Each host {pages} pages, delay {delay:g} s (PxD = {pages * delay:g} s), `--delay "
        f"{delay:g} --max-per-host 1 --max-tasks {args.max_tasks} --max-time "
        f"{args.scaling_max_time:g}`; the shared frontier in {args.processes} processes on "
        f"one Redis, whose own CPU has a column. Requests include one "
        f"robots.txt per host. Start-up (`python -m trio_crawler --version`): {startup:.2f} "
        "CPU s per process, taken out in the second CPU column. Marginal: each host count "
        f"crawled again with more pages a host (at least {MARGINAL_REQUESTS} more requests), "
        "the difference in CPU over the difference in requests, so that what a crawl costs "
        "once cancels out; the other columns are the first crawl's. nginx start: seconds "
        "until it listened on every address.",
        "",
        markdown_table(SCALING_HEADERS, rows),
    ]
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    return "\n".join(lines)


def _scaling_row(
    label: str,
    hosts: int,
    result: ToolRun,
    more: ToolRun,
    pages: int,
    delay: float,
    startup: float,
) -> list[object]:
    """The row of ``result``, with the marginal costs against ``more``, the same hosts'
    crawl with more pages."""
    metrics = result.metrics
    extra = more.metrics.requests - metrics.requests
    redis_extra = (
        None
        if result.redis is None or more.redis is None
        else more.redis.cpu_s - result.redis.cpu_s
    )
    return [
        label,
        hosts,
        f"{metrics.pages_ok}/{metrics.pages}",
        metrics.requests,
        f"{result.wall_s:.1f}",
        f"{result.wall_s / (pages * delay):.2f}",
        f"{metrics.short_gaps} ({metrics.short_page_gaps})",
        metrics.max_in_flight,
        metrics.connections,
        f"{result.cpu_s:.1f}",
        _per_request(result.cpu_s, metrics.requests),
        _per_request(result.cpu_s - startup * len(result.costs), metrics.requests),
        _per_request(more.cpu_s - result.cpu_s, extra) if extra > 0 else "-",
        "-" if result.redis is None else _per_request(result.redis.cpu_s, metrics.requests),
        "-" if redis_extra is None or extra <= 0 else _per_request(redis_extra, extra),
        f"{result.peak_rss_mib:.0f}",
        f"{result.nginx_start_s:.2f}",
    ]


def _startup_cpu(setup: Setup, work: Path) -> float:
    """CPU seconds of ``python -m trio_crawler --version``: the least of three."""
    costs = [
        run_measured(
            [setup.python, "-m", "trio_crawler", "--version"],
            timeout=120,
            cwd=work / "scratch",
            env=setup.env,
        ).cpu_s
        for _ in range(3)
    ]
    return min(costs)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        markdown, _ = run(args)
    except (BenchmarkError, NginxError) as exc:
        raise SystemExit(f"bench_broad: {exc}") from None
    print(markdown)


if __name__ == "__main__":
    run_main(main, "bench_broad")

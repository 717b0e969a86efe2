"""How should the Trio engine arrange its httpx clients? Three arrangements, measured.

The question: :class:`trio_crawler.Crawler` runs ``max_tasks`` workers. They can share one
``httpx.AsyncClient`` whose pool holds ``max_tasks`` connections, or each have a client
with a pool of one. Per-worker clients can share one SSL context or build their own. This
benchmark crawls a real site with the real crawler each way and reports CPU time per page
and peak memory, the two costs that differ; wall time on a shared machine mostly measures
the neighbours.

    A  one shared AsyncClient for all workers: ``Crawler(..., client=open_client(
       max_connections=max_tasks))``, a pool as large as the number of workers
    B  a client per worker sharing one SSL context (the engine's default, no ``client=``),
       made at the first https connection, so never on this plain-http site
    C  a client per worker, each given its own SSL context, made as the worker starts
       (``OwnSSLContextCrawler``): what a context per client would cost

How it measures
---------------
The parent process writes a synthetic site (:mod:`benchmarks.synthetic_site`), serves it
with a private nginx (:mod:`benchmarks.nginx`), and then, round by round, runs every
arrangement once, each in a fresh child process (this script with ``--child``). A fresh
process makes peak RSS (``ru_maxrss``) and CPU time belong to that one crawl, and no
arrangement inherits another's warmed allocator or imports. The order of the arrangements
rotates from round to round, so slow drift in the machine's load does not always fall on
the same one.

The children import a copy of ``trio_crawler`` taken when the run starts (put first on
their ``PYTHONPATH``), so edits to the working tree during a long run cannot change the
code under test halfway through; the report names the commit the copy came from.

The child measures ``getrusage(RUSAGE_SELF)`` user + system CPU around the crawl (making
the clients, crawling, closing them) and again at exit for the whole process (interpreter
start and imports included), and prints one JSON object. It also counts calls of
``ssl.create_default_context`` (which both httpx and the engine use), so the parent can
check that each arrangement really is what it claims: at most one context for A and B,
one per worker for C. The parent checks that every page of the site was fetched once with status
200, then prints medians as a markdown table. CPU time, not wall time, is the figure to
compare: nginx and other tenants share the cores. On a virtual machine whose host is
oversubscribed, CPU time is noisy too (the same crawl has measured from 39 to 53 CPU
seconds), so the parent reports the machine's steal time (``/proc/stat``) during each run,
and the table shows each arrangement's range next to its median.

Run from the repository root::

    python benchmarks/bench_clients.py --pages 10000 --rounds 3 --max-tasks 100 10
    python benchmarks/bench_clients.py --pages 2000 --profile A B   # cProfile, one run each
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import cProfile
import datetime
import io
import json
import os
import platform
import pstats
import resource
import shlex
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import trio

import trio_crawler
from trio_crawler import Crawler
from trio_crawler._clients import choose_http_library, open_client
from trio_crawler._crawler import CLEANUP_TIMEOUT

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    import httpx

    from trio_crawler._clients import Client

ARRANGEMENTS = {
    "A": "one shared AsyncClient",
    "B": "client per worker, shared SSL context",
    "C": "client per worker, own SSL context",
}
# The baseline of the ratio column: the engine's default arrangement.
BASELINE = "B"
# A child that has not finished a 10 000-page crawl in this long is stuck, not slow: the
# slowest run seen took 213 s of wall time, with the host stealing half the CPU.
CHILD_TIMEOUT = 900.0
# Lines of each cProfile listing printed by --profile.
PROFILE_LINES = 30


class OwnSSLContextCrawler(Crawler):
    """Arrangement C: the engine's client per worker, each with an SSL context of its own.

    Each worker's client is given a context made as the worker starts (the CA bundle
    loaded each time), where the engine shares one, made at the first https connection.
    Everything else is the engine's own ``Fetcher.new_client()``: the crawl's shared
    idle connections and host-name cache, its user agent and headers, its one look at
    the environment for a proxy. So C differs from B in the SSL context alone. The client
    is closed as the engine closes its own (shielded and bounded).
    """

    @contextlib.asynccontextmanager
    async def _open_client(self) -> AsyncIterator[Client]:
        client = self._fetcher.new_client(ssl_context=ssl.create_default_context())
        try:
            yield client
        finally:
            with trio.move_on_after(CLEANUP_TIMEOUT, shield=True):
                await client.aclose()


# The engine hook that OwnSSLContextCrawler overrides. If the engine renames it, the
# override would silently do nothing and C would measure B; the child refuses instead.
_WORKER_CLIENT_HOOK = "_open_client"


# -- the child: one crawl, one JSON line ------------------------------------------------


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _count_calls(module: Any, name: str) -> Callable[[], int]:
    """Wrap ``module.name`` to count its calls; returns a function that reads the count."""
    original = getattr(module, name)
    calls = 0

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    setattr(module, name, counting)
    return lambda: calls


def _rss_mib() -> float:
    """Current resident set size, from /proc (Linux), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _crawl(arrangement: str, url: str, max_tasks: int) -> Crawler:
    if arrangement == "A":
        async with open_client(library=choose_http_library(), max_connections=max_tasks) as client:
            # The engine's own kind of client, shared: Crawler's annotation names the public
            # type (httpx's), and the engine takes either.
            crawler = Crawler([url], max_tasks=max_tasks, client=cast("httpx.AsyncClient", client))
            await crawler.crawl()
        return crawler
    crawler_class = Crawler if arrangement == "B" else OwnSSLContextCrawler
    crawler = crawler_class([url], max_tasks=max_tasks)
    await crawler.crawl()
    return crawler


def run_child(arrangement: str, url: str, max_tasks: int, *, profile: bool) -> dict[str, Any]:
    """Crawl ``url`` once with ``arrangement`` and measure it (runs in the child process)."""
    if not callable(getattr(Crawler, _WORKER_CLIENT_HOOK, None)):
        raise SystemExit(
            f"trio_crawler's Crawler has no {_WORKER_CLIENT_HOOK}(); update "
            "OwnSSLContextCrawler in benchmarks/bench_clients.py to the engine's new hook"
        )
    ssl_contexts = _count_calls(ssl, "create_default_context")
    rss_before = _rss_mib()
    profiler = cProfile.Profile() if profile else None
    cpu_start = _cpu_seconds()
    wall_start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    crawler = trio.run(_crawl, arrangement, url, max_tasks)
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - wall_start
    cpu_crawl = _cpu_seconds() - cpu_start
    if profiler is not None:
        _print_profile(profiler, len(crawler.done))
    records = crawler.done
    return {
        "arrangement": arrangement,
        "max_tasks": max_tasks,
        "trio_crawler": trio_crawler.__file__,
        "ssl_contexts": ssl_contexts(),
        "finish_reason": crawler.finish_reason,
        "pages": len(records),
        "not_200": sum(1 for record in records if record.status != 200),
        "exceptions": sum(1 for record in records if record.exception is not None),
        "wall_s": wall,
        "cpu_crawl_s": cpu_crawl,
        "cpu_process_s": _cpu_seconds(),
        "rss_before_mib": rss_before,
        # ru_maxrss is in KiB on Linux.
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _print_profile(profiler: cProfile.Profile, pages: int) -> None:
    """Print the profile by package, then pstats' listings by cumulative and own time.

    On a shared machine the seconds in a profile swell with the neighbours' load, but call
    counts do not, so the package summary gives calls per page next to the time.
    """
    stats = pstats.Stats(profiler)
    own_time: dict[str, float] = {}
    calls: dict[str, int] = {}
    # Stats.stats is documented (pstats "The Stats Class") but missing from typeshed.
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    raw = stats.stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, ncalls, tottime, _, _) in raw.items():
        package = _package_of(filename)
        own_time[package] = own_time.get(package, 0.0) + tottime
        calls[package] = calls.get(package, 0) + ncalls
    total = sum(own_time.values())
    print("---- own time by package ----", file=sys.stderr)
    print(f"{'package':<22} {'own s':>8} {'share':>6} {'calls/page':>11}", file=sys.stderr)
    for package, seconds in sorted(own_time.items(), key=lambda item: -item[1])[:12]:
        print(
            f"{package:<22} {seconds:8.2f} {seconds / total:6.1%} {calls[package] / pages:11.0f}",
            file=sys.stderr,
        )
    for key in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(PROFILE_LINES)
        print(f"---- sorted by {key} ----", file=sys.stderr)
        # Drop pstats' header lines up to the column titles.
        text = out.getvalue()
        print(text[text.find("   ncalls") :], file=sys.stderr)


def _package_of(filename: str) -> str:
    """The package a profiled function belongs to: a distribution, the stdlib module, or C."""
    path = Path(filename)
    if "site-packages" in path.parts:
        return path.parts[path.parts.index("site-packages") + 1]
    if "trio_crawler" in path.parts:
        return "trio_crawler"
    if filename.startswith(("~", "<")):
        return "builtins and C"
    return f"stdlib {path.stem if path.parent.name.startswith('python') else path.parent.name}"


# -- the parent: site, server, rounds, table ---------------------------------------------


def _snapshot_package(directory: Path) -> Path:
    """Copy the trio_crawler package under ``directory``; returns the PYTHONPATH entry."""
    source = Path(trio_crawler.__file__).parent
    shutil.copytree(
        source, directory / "trio_crawler", ignore=shutil.ignore_patterns("__pycache__")
    )
    compileall.compile_dir(directory / "trio_crawler", quiet=1)  # as pip does on install
    return directory


def _source_revision() -> str:
    """The commit the package was copied from, and whether its files had local changes."""
    source = Path(trio_crawler.__file__).parent

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(source), *args], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "not a git checkout"
    dirty = git("status", "--porcelain", "--", ".")
    return f"{commit} + uncommitted changes" if dirty else commit


def _steal_ticks() -> tuple[int, int]:
    """(steal, total) CPU ticks from /proc/stat: how much the hypervisor took from us."""
    fields = [int(field) for field in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice], guests already
    # counted in user and nice.
    return fields[7], sum(fields[:8])


def _spawn(
    arrangement: str, url: str, max_tasks: int, *, package_path: Path, profile: bool
) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", arrangement, "--url", url]
    command += ["--max-tasks", str(max_tasks)]
    if profile:
        command.append("--profile-child")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(package_path), *filter(None, [env.get("PYTHONPATH")])])
    steal_start, total_start = _steal_ticks()
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CHILD_TIMEOUT, check=False, env=env
    )
    steal_end, total_end = _steal_ticks()
    if done.stderr:
        print(done.stderr, file=sys.stderr, end="")
    if done.returncode != 0:
        raise SystemExit(f"child {arrangement} exited with {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["steal_percent"] = 100 * (steal_end - steal_start) / max(1, total_end - total_start)
    return result


def _check(result: dict[str, Any], *, pages: int, package_path: Path) -> None:
    """Same work, same code, the arrangement it claims; otherwise the numbers mislead."""
    problems = []
    if result["pages"] != pages:
        problems.append(f"{result['pages']} records, expected {pages}")
    if result["not_200"] or result["exceptions"]:
        problems.append(f"{result['not_200']} not 200, {result['exceptions']} exceptions")
    if result["finish_reason"] != "finished":
        problems.append(f"finish_reason {result['finish_reason']!r}")
    if not Path(result["trio_crawler"]).is_relative_to(package_path):
        problems.append(f"imported {result['trio_crawler']}, not the snapshot")
    contexts = result["ssl_contexts"]
    if result["arrangement"] == "C":
        if contexts != result["max_tasks"]:
            problems.append(f"{contexts} SSL contexts, expected {result['max_tasks']}")
    elif contexts > 1:
        problems.append(f"{contexts} SSL contexts, expected at most 1")
    if problems:
        raise SystemExit(f"arrangement {result['arrangement']}: " + "; ".join(problems))


def _table(results: list[dict[str, Any]], max_tasks: int) -> str:
    rows = []
    medians: dict[str, dict[str, float]] = {}
    for arrangement in ARRANGEMENTS:
        runs = [r for r in results if r["arrangement"] == arrangement]
        per_page = [r["cpu_crawl_s"] * 1000 / r["pages"] for r in runs]
        medians[arrangement] = {
            "rate": statistics.median(r["pages"] / r["wall_s"] for r in runs),
            "cpu_ms": statistics.median(per_page),
            "cpu_min": min(per_page),
            "cpu_max": max(per_page),
            "process_s": statistics.median(r["cpu_process_s"] for r in runs),
            "rss": statistics.median(r["peak_rss_mib"] for r in runs),
            "steal": statistics.median(r["steal_percent"] for r in runs),
        }
    base = medians[BASELINE]["cpu_ms"]
    for arrangement, label in ARRANGEMENTS.items():
        m = medians[arrangement]
        rows.append(
            f"| {arrangement}: {label} | {m['rate']:.0f} "
            f"| {m['cpu_ms']:.2f} ({m['cpu_min']:.2f}-{m['cpu_max']:.2f}) "
            f"| {m['cpu_ms'] / base:.2f} | {m['rss']:.1f} | {m['process_s']:.1f} "
            f"| {m['steal']:.0f} |"
        )
    runs_each = len(results) // len(ARRANGEMENTS)
    return "\n".join(
        [
            f"max_tasks={max_tasks}, median of {runs_each} runs each "
            "(CPU ms/page range: min-max over the runs)",
            "",
            f"| arrangement | pages/s | CPU ms/page, crawl | CPU/page vs {BASELINE} "
            "| peak RSS MiB | CPU s, whole process | steal % |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )


def _environment(pages: int, total_bytes: int) -> str:
    nginx = subprocess.run(
        [_nginx_binary(), "-v"], capture_output=True, text=True, check=False
    ).stderr.strip()
    versions = ", ".join(f"{name} {version(name)}" for name in ("trio", "httpx", "httpcore"))
    return (
        f"{datetime.date.today().isoformat()}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {versions}, "
        f"{nginx.removeprefix('nginx version: ')}; trio_crawler {_source_revision()}; "
        f"site: {pages} pages, {total_bytes / 2**20:.0f} MiB"
    )


def _nginx_binary() -> str:
    from benchmarks.nginx import find_nginx

    return find_nginx()


def run_parent(args: argparse.Namespace) -> None:
    from benchmarks.nginx import serve_directory
    from benchmarks.synthetic_site import generate

    with tempfile.TemporaryDirectory(prefix="bench-clients-") as work:
        package_path = _snapshot_package(Path(work, "snapshot"))
        environment_line = ""
        site = generate(Path(work, "site"), pages=args.pages, seed=args.seed)
        with serve_directory(site.directory) as url:
            environment_line = _environment(site.pages, site.total_bytes)
            print(environment_line, file=sys.stderr)
            if args.profile:
                for arrangement in args.profile:
                    print(f"==== cProfile, arrangement {arrangement} ====", file=sys.stderr)
                    result = _spawn(
                        arrangement,
                        url,
                        args.max_tasks[0],
                        package_path=package_path,
                        profile=True,
                    )
                    _check(result, pages=site.pages, package_path=package_path)
                    print(json.dumps(result), file=sys.stderr)
                return
            tables = []
            for max_tasks in args.max_tasks:
                results = []
                names = list(ARRANGEMENTS)
                for round_number in range(args.rounds):
                    shift = round_number % len(names)
                    for arrangement in names[shift:] + names[:shift]:
                        result = _spawn(
                            arrangement, url, max_tasks, package_path=package_path, profile=False
                        )
                        _check(result, pages=site.pages, package_path=package_path)
                        results.append(result)
                        print(
                            f"max_tasks={max_tasks} round {round_number + 1}/{args.rounds} "
                            f"{arrangement}: {result['pages']} pages, "
                            f"{result['wall_s']:.1f} s wall, "
                            f"{result['cpu_crawl_s']:.1f} s CPU (crawl), "
                            f"{result['peak_rss_mib']:.1f} MiB peak, "
                            f"{result['ssl_contexts']} SSL contexts, "
                            f"steal {result['steal_percent']:.0f}%",
                            file=sys.stderr,
                        )
                        if args.json_out:
                            with args.json_out.open("a") as out:
                                out.write(json.dumps(result) + "\n")
                tables.append(_table(results, max_tasks))
        print(f"Command: `{shlex.join(sys.orig_argv)}`")
        print(f"Machine: {environment_line}")
        for table in tables:
            print()
            print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--max-tasks", type=int, nargs="+", default=[100], help="one table per value"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--profile",
        nargs="+",
        choices=list(ARRANGEMENTS),
        help="instead of the rounds, run these arrangements once each under cProfile",
    )
    parser.add_argument("--json-out", type=Path, help="append every run's JSON here")
    # The child's side of the protocol; not for people.
    parser.add_argument("--child", choices=list(ARRANGEMENTS), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--profile-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pages < 1 or args.rounds < 1 or min(args.max_tasks) < 1:
        parser.error("--pages, --rounds and --max-tasks must be >= 1")
    if args.child:
        result = run_child(args.child, args.url, args.max_tasks[0], profile=args.profile_child)
        print(json.dumps(result))
        return
    if __package__ in (None, ""):
        # Run as a script: make the `benchmarks` folder importable as a package.
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.nginx import NginxError

    try:
        run_parent(args)
    except NginxError as exc:
        raise SystemExit(f"bench_clients: {exc}") from None


if __name__ == "__main__":
    main()

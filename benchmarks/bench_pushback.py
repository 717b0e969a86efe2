"""Manners that adapt: how crawlers fare against servers that push back.

Why: a crawler that sends as fast as it may is rude to a server that says "too many"
(429), "unavailable" (503) or "come back in N seconds" (``Retry-After``), and loses pages
when it runs out of tries; one that slows too much wastes the time the server would give
it. This benchmark runs ``tests/pushback_server.py`` (several hosts, each with a token
bucket of ``--rate`` requests a second and ``--burst`` saved up, a cap of ``--cap``
requests in flight, latency that grows with load, ``Retry-After`` on every other host)
and crawls it with each tool in turn, a fresh server for each, and reads the server's
log:

* **pages 200**: the site's pages each host answered 200 at least once, of all its pages;
* **requests**: every request the server saw, ``/robots.txt`` included;
* **pushback %**: the share of them answered 429 or 503;
* **in Retry-After**: requests that arrived while a ``Retry-After`` the same host had sent
  the same client (``User-Agent``) ran, ``[answer, answer + Retry-After)``;
* **max in flight**: the most requests one host had open at once (the cap, plus the one
  being turned away, is all a client that keeps to it shows);
* **wall ÷ bound**: the crawler's process wall time (start-up included) over
  ``pages / rate``, the least time the server allows for every page;
* **CPU s**: user + system CPU of the crawler's process, from ``os.wait4``.

The tools: this crawler at its defaults (``python -m trio_crawler -q -o FILE ROOT...``,
obeying robots.txt), and with ``--no-adapt`` when its ``--help`` lists that option; Scrapy
at its defaults and with AutoThrottle; Crawlee for Python's ``ParselCrawler`` at its
defaults (``pushback_peers.py`` says what those are). The targets the crawler is held to
(every page 200, pushback at most 15 % of requests, no request inside a Retry-After
window, wall at most 1.5 times the bound) are checked for every row, in its last column;
the benchmark exits 0 whatever the numbers.

:func:`measure_command` is the piece the crawler's acceptance tests can use: one command
against a fresh server, its metrics and cost, and :func:`missed_targets` on the result.
It needs only the project's environment (no GNU time: this benchmark reports no memory)::

    from benchmarks.bench_pushback import crawler_command, measure_command, missed_targets
    result = measure_command(lambda roots: crawler_command(roots, output))
    assert missed_targets(result) == []

Alone (``setup.sh`` installs the peers; ``run.py --only pushback`` runs it too)::

    .venv/bin/python benchmarks/bench_pushback.py [--hosts 4] [--pages 200] [--rate 20] \\
        [--burst 5] [--cap 4] [--tools ours,ours-no-adapt,scrapy,scrapy-autothrottle,crawlee]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):
    # Run as a script: make the `benchmarks` folder importable as a package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_engines import snapshot_environment
from benchmarks.measure import (
    REPOSITORY,
    compiled,
    markdown_table,
    package_identity,
    parts_argument,
    run_main,
    run_waited,
    snapshot_package,
)

# The server lives with the tests, which use it in their own task groups; it is imported
# by bare name, as the tests import it.
TESTS = REPOSITORY / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from pushback_server import (  # noqa: E402
    Metrics,
    PushbackOptions,
    ServedRun,
    options_from,
    read_run,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

HERE = Path(__file__).resolve().parent
SERVER_SCRIPT = TESTS / "pushback_server.py"
PEERS_SCRIPT = HERE / "pushback_peers.py"
PEERS_PYTHON = HERE / ".venv" / "bin" / "python"
TOOLS = ("ours", "ours-no-adapt", "scrapy", "scrapy-autothrottle", "crawlee")
LABELS = {
    "ours": "trio-crawler, defaults",
    "ours-no-adapt": "trio-crawler, --no-adapt",
    "scrapy": "Scrapy, defaults",
    "scrapy-autothrottle": "Scrapy, AutoThrottle",
    "crawlee": "Crawlee, ParselCrawler",
}
# The crawler's targets (benchmarks/README.md, the part pushback): pushback at most 15 % of
# requests, none inside a Retry-After window, and a wall time at most 1.5 times the bound.
MAX_PUSHBACK_SHARE = 0.15
MAX_WALL_OVER_BOUND = 1.5
# Seconds a crawl may take before it is killed: far past any crawl that keeps going
# (Scrapy with AutoThrottle is the slowest, at a few times the bound).
DEFAULT_TIMEOUT = 900.0
# Seconds the server gets to start and print its roots, and to write its log at the end.
SERVER_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PushbackResult:
    """One command against one fresh server.

    Attributes:
        roots: The roots the command was given.
        run: The server's options, hosts and log.
        metrics: What the log says (see ``tests/pushback_server.py``, ``Metrics``).
        returncode: The command's exit status (negative: killed by that signal).
        wall_s: Seconds from the command's start to its exit.
        cpu_s: User plus system CPU seconds of the command's process and what it waited for.
        timed_out: True if it was killed for running past its time limit.
    """

    roots: list[str]
    run: ServedRun
    metrics: Metrics
    returncode: int
    wall_s: float
    cpu_s: float
    timed_out: bool

    @property
    def wall_over_bound(self) -> float:
        return self.wall_s / self.metrics.bound_s


def missed_targets(result: PushbackResult) -> list[str]:
    """The crawler's targets ``result`` misses, in words; empty if it meets them all."""
    metrics = result.metrics
    missed = []
    if not metrics.all_pages_ok:
        missed.append("not every page 200")
    if metrics.pushback_share > MAX_PUSHBACK_SHARE:
        missed.append(f"pushback > {MAX_PUSHBACK_SHARE:.0%}")
    if metrics.inside_retry_after:
        missed.append("requests in Retry-After")
    if result.wall_over_bound > MAX_WALL_OVER_BOUND:
        missed.append(f"wall > {MAX_WALL_OVER_BOUND}x bound")
    if result.returncode != 0:
        missed.append(f"exit {result.returncode}")
    return missed


def crawler_command(
    roots: Sequence[str], output: Path, *extra: str, python: str = sys.executable
) -> list[str]:
    """This crawler's command line for ``roots``: its defaults, records to ``output``."""
    return [python, "-m", "trio_crawler", "-q", "-o", str(output), *extra, *roots]


def server_command(options: PushbackOptions, log: Path, python: str = sys.executable) -> list[str]:
    """The standalone server's command line for ``options``, its log to ``log``."""
    command = [python, str(SERVER_SCRIPT), "--log", str(log)]
    for field in dataclasses.fields(options):
        command += [f"--{field.name.replace('_', '-')}", str(getattr(options, field.name))]
    return command


def measure_command(
    command: Callable[[list[str]], Sequence[str]],
    options: PushbackOptions | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    stdout: Path | None = None,
    stderr: Path | None = None,
    server_python: str = sys.executable,
) -> PushbackResult:
    """Start a fresh server, run ``command(roots)`` to its end, stop the server, measure.

    The server is a process of its own (``tests/pushback_server.py``), so its CPU is not
    the command's and its event loop does not share a GIL with this one; the command's
    output goes to the given files or nowhere. ``cwd`` defaults to a scratch directory
    (Crawlee writes ``./storage``; ``python -m`` puts the working directory on
    ``sys.path``).

    Raises:
        RuntimeError: If the server does not start, or leaves no log.
    """
    with (
        tempfile.TemporaryDirectory(prefix="bench-pushback-") as work,
        Path(work, "server.err").open("wb") as server_err,
    ):
        log_path = Path(work, "server.json")
        server = subprocess.Popen(
            server_command(options or PushbackOptions(), log_path, server_python),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=server_err,
            text=True,
            start_new_session=True,  # a Ctrl-C to the harness reaches it through us only
        )
        try:
            roots = _read_roots(server, (options or PushbackOptions()).hosts, work)
            scratch = Path(work, "cwd")
            scratch.mkdir()
            waited = run_waited(
                command(roots),
                timeout=timeout,
                cwd=cwd or scratch,
                env=env,
                stdout=stdout,
                stderr=stderr,
            )
        finally:
            _stop_server(server)
        if not log_path.exists():
            raise RuntimeError(f"the pushback server left no log:\n{_tail(work)}")
        run = read_run(log_path)
    return PushbackResult(
        roots=roots,
        run=run,
        metrics=run.metrics(),
        returncode=waited.returncode,
        wall_s=waited.wall_s,
        cpu_s=waited.cpu_s,
        timed_out=waited.timed_out,
    )


def _read_roots(server: subprocess.Popen[str], hosts: int, work: str) -> list[str]:
    """The roots the server prints once it listens on every host."""
    assert server.stdout is not None
    timer = threading.Timer(SERVER_TIMEOUT, server.kill)
    timer.start()
    try:
        roots = [server.stdout.readline().strip() for _ in range(hosts)]
    finally:
        timer.cancel()
    if not all(roots):
        raise RuntimeError(f"the pushback server did not start:\n{_tail(work)}")
    return roots


def _tail(work: str) -> str:
    with contextlib.suppress(OSError):
        return Path(work, "server.err").read_text(errors="replace")[-2000:]
    return ""


def _stop_server(server: subprocess.Popen[str]) -> None:
    """SIGTERM: the server stops listening and writes its log; SIGKILL if it hangs."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(SERVER_TIMEOUT)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    if server.stdout is not None:
        server.stdout.close()


# -- the benchmark ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    defaults = PushbackOptions()
    parser = argparse.ArgumentParser(
        description="Crawl servers that push back with several tools; print a table."
    )
    server = parser.add_argument_group("the server")
    server.add_argument("--hosts", type=int, default=defaults.hosts)
    server.add_argument("--pages", type=int, default=defaults.pages, help="per host")
    server.add_argument("--rate", type=float, default=defaults.rate, help="requests/s per host")
    server.add_argument("--burst", type=int, default=defaults.burst)
    server.add_argument("--cap", type=int, default=defaults.cap, help="in flight per host")
    server.add_argument("--base-latency", type=float, default=defaults.base_latency)
    server.add_argument("--latency-per-request", type=float, default=defaults.latency_per_request)
    parser.add_argument(
        "--tools",
        type=parts_argument(TOOLS),
        default=list(TOOLS),
        metavar="TOOLS",
        help=f"comma-separated, from {','.join(TOOLS)} (default: all)",
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for our CLI")
    parser.add_argument("--peers-python", default=str(PEERS_PYTHON), help="Scrapy's, Crawlee's")
    parser.add_argument(
        "--snapshot", type=Path, help="PYTHONPATH entry holding trio_crawler (run.py's)"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="per crawl, s")
    parser.add_argument("--json-out", type=Path, help="append each crawl as a JSON line")
    return parser


def has_option(python: str, env: Mapping[str, str], option: str) -> bool:
    """Whether this crawler's ``--help`` lists ``option`` (run from a scratch directory)."""
    with tempfile.TemporaryDirectory(prefix="bench-pushback-help-") as scratch:
        done = subprocess.run(
            [python, "-m", "trio_crawler", "--help"],
            cwd=scratch,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    return option in done.stdout


def pages_cell(metrics: Metrics) -> str:
    counts = list(metrics.pages_ok.values())
    if len(set(counts)) == 1:
        return f"{counts[0]}/{metrics.pages} x{len(counts)}"
    return f"{' '.join(map(str, counts))} / {metrics.pages}"


def row(label: str, result: PushbackResult) -> list[object]:
    metrics = result.metrics
    missed = missed_targets(result)
    if result.timed_out:
        missed.insert(0, "timed out")
    return [
        label,
        pages_cell(metrics),
        metrics.requests,
        f"{100 * metrics.pushback_share:.1f}",
        metrics.inside_retry_after,
        metrics.max_in_flight,
        f"{result.wall_s:.1f}",
        f"{result.wall_over_bound:.2f}",
        f"{result.cpu_s:.2f}",
        "met" if not missed else "; ".join(missed),
    ]


HEADERS = [
    "tool",
    "pages 200 / all, per host",
    "requests",
    "pushback %",
    "in Retry-After",
    "max in flight",
    "wall s",
    "wall ÷ bound",
    "CPU s",
    "targets",
]


def run(args: argparse.Namespace) -> tuple[str, bool]:
    """Run the chosen tools, each against a fresh server; return the markdown and True.

    True whatever the numbers: they are for reading, and the crawler's own tests hold it
    to its targets. A tool that could not run gets a note instead of a row.
    """
    options = options_from(args)
    notes: list[str] = []
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="bench-pushback-run-") as work:
        package_path = (
            compiled(args.snapshot) if args.snapshot else snapshot_package(Path(work, "snapshot"))
        )
        our_env = snapshot_environment(package_path)
        commands: dict[str, Callable[[list[str]], list[str]]] = {}
        for tool in args.tools:
            output = Path(work, f"{tool}.jsonl")
            if tool == "ours":
                commands[tool] = lambda roots, output=output: crawler_command(
                    roots, output, python=args.python
                )
            elif tool == "ours-no-adapt":
                if has_option(args.python, our_env, "--no-adapt"):
                    commands[tool] = lambda roots, output=output: crawler_command(
                        roots, output, "--no-adapt", python=args.python
                    )
                else:
                    notes.append(f"{LABELS[tool]}: not run, `--help` lists no such option.")
            elif not os.access(args.peers_python, os.X_OK):
                notes.append(f"{LABELS[tool]}: not run, no {args.peers_python} (run setup.sh).")
            elif tool.startswith("scrapy"):
                extra = ["--autothrottle"] if tool == "scrapy-autothrottle" else []
                commands[tool] = lambda roots, extra=extra: [
                    args.peers_python,
                    str(PEERS_SCRIPT),
                    "scrapy",
                    *extra,
                    *roots,
                ]
            else:
                commands[tool] = lambda roots: [
                    args.peers_python,
                    str(PEERS_SCRIPT),
                    "crawlee",
                    *roots,
                ]
        for tool, command in commands.items():
            print(f"bench_pushback: {LABELS[tool]} ...", file=sys.stderr, flush=True)
            stderr = Path(work, f"{tool}.err")
            result = measure_command(
                command,
                options,
                timeout=args.timeout,
                env=our_env if tool.startswith("ours") else None,
                stderr=stderr,
                server_python=args.python,
            )
            rows.append(row(LABELS[tool], result))
            if result.returncode != 0 or result.timed_out:
                tail = stderr.read_text(errors="replace").strip().splitlines()[-5:]
                notes.append(
                    f"{LABELS[tool]}: exit {result.returncode}"
                    + (", timed out" if result.timed_out else "")
                    + (": `" + " / ".join(tail)[-400:] + "`" if tail else "")
                )
            if args.json_out:
                with args.json_out.open("a") as out:
                    out.write(json.dumps(_json_line(tool, result)) + "\n")
        identity = package_identity(package_path)
    lines = [
        "### Servers that push back",
        "",
        f"{options.hosts} hosts x {options.pages} pages (an index linking to every page), "
        f"each {options.rate:g} requests/s with a burst of {options.burst}, at most "
        f"{options.cap} in flight, latency {options.base_latency:g} s + "
        f"{options.latency_per_request:g} s per request in flight; 429 and 503 carry "
        f"Retry-After on {(options.hosts + 1) // 2} of the hosts. Bound: "
        f"{options.bound_s:g} s. Code under test: {identity}.",
        "",
        markdown_table(HEADERS, rows),
        "",
        f"Targets for trio-crawler: every page 200, pushback ≤ {MAX_PUSHBACK_SHARE:.0%}, "
        f"no request in a Retry-After window, wall ≤ {MAX_WALL_OVER_BOUND}x bound; shown "
        "for every tool.",
    ]
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    return "\n".join(lines), True


def _json_line(tool: str, result: PushbackResult) -> dict[str, object]:
    metrics = result.metrics
    return {
        "part": "pushback",
        "tool": tool,
        "options": dataclasses.asdict(result.run.options),
        "pages_ok": dict(metrics.pages_ok),
        "requests": metrics.requests,
        "pushback": metrics.pushback,
        "inside_retry_after": metrics.inside_retry_after,
        "max_in_flight": metrics.max_in_flight,
        "bound_s": metrics.bound_s,
        "wall_s": result.wall_s,
        "cpu_s": result.cpu_s,
        "returncode": result.returncode,
        "timed_out": result.timed_out,
        "missed": missed_targets(result),
    }


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        options_from(args)
    except ValueError as exc:
        raise SystemExit(f"bench_pushback: {exc}") from None
    markdown, _ = run(args)
    print(markdown)


if __name__ == "__main__":
    run_main(main, "bench_pushback")

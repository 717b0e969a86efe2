"""Run a command in a fresh process and measure what it cost: wall, CPU and peak memory.

Why a child process per run: peak RSS (``ru_maxrss``) only means "this crawl" in a process
that did nothing else, and CPU time read from the parent with ``os.wait4`` covers the whole
child (interpreter start, imports, crawl, report, exit) with no cooperation from it, so our
crawler, Scrapy and wget are measured the same way. ``wait4`` returns the child's own
``rusage``, not the sum over every child the parent ever reaped, as
``getrusage(RUSAGE_CHILDREN)`` would.

The machine is a shared virtual machine whose host takes CPU away from it ("steal", see
``benchmarks/README.md``); the same crawl's CPU time rises with the steal. So every run also
records the machine-wide steal share from ``/proc/stat`` while it ran, and the tables show
it beside the medians.

The helpers here are used by ``bench_engines.py`` and ``bench_slow.py``; ``markdown_table``
by every script that prints a table.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

# GNU time (Debian package "time"): see run_measured for why the children run under it.
GNU_TIME = "/usr/bin/time"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildCost:
    """What one child process cost, as seen by its parent.

    Attributes:
        returncode: The exit status (negative: killed by that signal).
        wall_s: Seconds from start to exit, interpreter start-up included.
        cpu_s: User plus system CPU seconds of the child itself.
        peak_rss_mib: The child's peak resident set (``ru_maxrss``, KiB on Linux) in MiB.
        steal_percent: Share of the machine's CPU time that the hypervisor stole while the
            child ran; a high value means the CPU figures are inflated.
        timed_out: True if the child was killed for running past its time limit.
    """

    returncode: int
    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    steal_percent: float
    timed_out: bool


def steal_ticks() -> tuple[int, int]:
    """(steal, total) CPU ticks from the first line of ``/proc/stat``; (0, 1) elsewhere."""
    try:
        first_line = Path("/proc/stat").read_text().split("\n")[0]
    except OSError:
        return 0, 1
    fields = [int(field) for field in first_line.split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice]; guest time is
    # already counted in user and nice.
    return fields[7], sum(fields[:8])


def run_measured(
    command: Sequence[str],
    *,
    timeout: float,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    stdout: Path | None = None,
    stderr: Path | None = None,
) -> ChildCost:
    """Run ``command`` to its end and measure it.

    Peak RSS comes from GNU time, not from our own ``wait4``. Linux starts the peak RSS
    of a process that calls ``exec`` at the peak of the memory it had before (``exec_mmap``
    keeps the old ``hiwater_rss`` in ``signal->maxrss``), and a child made by ``fork``,
    ``vfork`` or ``posix_spawn`` from this Python process has this process's memory before
    its ``exec``. So ``ru_maxrss`` of any direct child of ours is at least our own peak,
    about 30 MiB: measured that way, ``sleep 1`` "peaks" at 32 MiB and wget looks six times
    its size. ``/usr/bin/time`` is a small C program; the command it forks starts from its
    1-2 MiB, and it reports the command's own ``ru_maxrss`` (``%M``). CPU time is our
    ``wait4`` of GNU time, which covers GNU time and the command it reaped (the command's
    CPU plus a millisecond), in microseconds where ``%U``/``%S`` give hundredths.

    Output goes to the given files (or is discarded), never to a pipe: a pipe that nobody
    reads while the child runs can fill and stall it, and reading it would cost the parent
    CPU during the measurement. The parent blocks in ``wait4`` the whole time.

    A command still running after ``timeout`` seconds is killed with its process group;
    the result then says ``timed_out`` and the caller decides what that means.

    Raises:
        RuntimeError: If GNU time is missing (``benchmarks/setup.sh`` installs it).
    """
    if not os.access(GNU_TIME, os.X_OK):
        raise RuntimeError(f"{GNU_TIME} not found: run benchmarks/setup.sh (apt-get install time)")
    steal_start, total_start = steal_ticks()
    with tempfile.NamedTemporaryFile("r", prefix="bench-time-", suffix=".txt") as report:
        waited = run_waited(
            # Its own process group, so a timeout kills the command, not only GNU time.
            [GNU_TIME, "--format=%M", f"--output={report.name}", *command],
            timeout=timeout,
            cwd=cwd,
            env=env,
            stdout=stdout,
            stderr=stderr,
        )
        # GNU time writes "Command exited with non-zero status N" or "Command terminated
        # by signal N" before the format's line when the command failed.
        lines = report.read().split()
    steal_end, total_end = steal_ticks()
    peak_kib = int(lines[-1]) if lines and lines[-1].isdigit() else 0
    return ChildCost(
        returncode=waited.returncode,
        wall_s=waited.wall_s,
        cpu_s=waited.cpu_s,
        peak_rss_mib=peak_kib / 1024,
        steal_percent=100 * (steal_end - steal_start) / max(1, total_end - total_start),
        timed_out=waited.timed_out,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Waited:
    """How a command run by :func:`run_waited` ended.

    Attributes:
        returncode: Its exit status (negative: the signal that ended it).
        wall_s: Seconds from its start to its reaping.
        cpu_s: User + system seconds, from ``os.wait4`` of the child.
        timed_out: Whether it was killed for outlasting its timeout.
    """

    returncode: int
    wall_s: float
    cpu_s: float
    timed_out: bool


def run_waited(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    stdout: Path | None = None,
    stderr: Path | None = None,
) -> Waited:
    """Run ``argv`` in a session of its own and block in ``os.wait4`` until it ends.

    Output goes to the given files (or is discarded), never to a pipe (see
    :func:`run_measured`). The child and its process group are killed after ``timeout``
    seconds, or if the harness is interrupted (Ctrl-C, or SIGTERM turned into one by
    :func:`unwind_on_sigterm`): in a session of its own it would outlive the harness. It
    needs no GNU time, so the crawler's tests can use it too.
    """
    timed_out = threading.Event()
    with contextlib.ExitStack() as files:
        out = files.enter_context(stdout.open("wb")) if stdout else subprocess.DEVNULL
        err = files.enter_context(stderr.open("wb")) if stderr else subprocess.DEVNULL
        started = time.perf_counter()
        process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )

        def kill() -> None:
            timed_out.set()
            os.killpg(process.pid, signal.SIGKILL)

        killer = threading.Timer(timeout, kill)
        killer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        finally:
            killer.cancel()
        wall = time.perf_counter() - started
        # wait4 reaped the child; tell Popen, so it never waits for (or signals) it again.
        process.returncode = os.waitstatus_to_exitcode(status)
    return Waited(
        returncode=process.returncode,
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        timed_out=timed_out.is_set(),
    )


def parts_argument(parts: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type for ``--only``: a comma-separated list of some of ``parts``."""

    def parse(text: str) -> list[str]:
        chosen = [part.strip() for part in text.split(",") if part.strip()]
        if not chosen or any(part not in parts for part in chosen):
            raise argparse.ArgumentTypeError(
                f"--only takes a comma-separated list of {', '.join(parts)}, not {text!r}"
            )
        return chosen

    return parse


def run_main(main: Callable[[], None], name: str) -> None:
    """Run a benchmark's ``main``; Ctrl-C or SIGTERM ends it with one line and status 130.

    The servers and crawls are stopped by then (see :func:`unwind_on_sigterm`); a
    traceback through ``os.wait4`` would say nothing more.
    """
    unwind_on_sigterm()
    try:
        main()
    except KeyboardInterrupt:
        print(f"{name}: interrupted; its servers and crawls are stopped", file=sys.stderr)
        raise SystemExit(130) from None


def unwind_on_sigterm() -> None:
    """Make SIGTERM raise KeyboardInterrupt, as Ctrl-C does.

    The harness starts servers (nginx, the slow server) and crawlers that are stopped in
    ``finally`` blocks; Python's default SIGTERM ends the process without running them,
    and the servers would go on listening.
    """
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def raise_open_file_limit(minimum: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; children inherit it.

    A crawl at ``max_tasks=1000`` holds a thousand sockets, and so does the server that
    answers it; the common default soft limit is 1024. Returns the new soft limit.

    Raises:
        RuntimeError: If even the hard limit is below ``minimum``, with the fix.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, minimum, 65536)
    if target < minimum:
        raise RuntimeError(
            f"the open-file limit is {hard} (hard), below the {minimum} this benchmark needs: "
            f"raise it (ulimit -Hn {minimum}, as root) or lower the concurrency"
        )
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table; the first column is left-aligned, the others right-aligned."""
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# -- the code under test -----------------------------------------------------------------


# The repository this folder belongs to, and the package under test in it. The harness
# finds the package by path and never imports it: the code under test runs in the children.
REPOSITORY = Path(__file__).resolve().parent.parent
PACKAGE = REPOSITORY / "trio_crawler"


def snapshot_package(directory: Path) -> Path:
    """Copy the trio_crawler package into ``directory``; return the PYTHONPATH entry.

    Children import this copy, so edits to the working tree during a long run cannot change
    the code under test halfway through. Run the children with a working directory other
    than the repository's: ``python -m`` puts the working directory first on ``sys.path``,
    ahead of ``PYTHONPATH``.
    """
    shutil.copytree(
        PACKAGE, directory / "trio_crawler", ignore=shutil.ignore_patterns("__pycache__")
    )
    return compiled(directory)


def compiled(package_path: Path) -> Path:
    """Compile the bytecode of the ``trio_crawler`` package in ``package_path`` (a
    PYTHONPATH entry) once, as pip does when it installs a package; return the entry.

    A package run from source without its ``__pycache__`` is compiled by every process
    that imports it when ``PYTHONDONTWRITEBYTECODE`` is set, or by the first one
    otherwise: about 45 ms of CPU a start on the 2-CPU VM (0.31 s against 0.26 s), which
    the peers, installed with their bytecode, never pay. Files already compiled are left
    as they are.
    """
    if not compileall.compile_dir(package_path / "trio_crawler", quiet=1):
        raise RuntimeError(f"cannot compile the package in {package_path}")
    return package_path


def package_identity(package_path: Path) -> str:
    """Which code a snapshot holds: the commit ``.git/HEAD`` names, and a hash of the files.

    Read from the files (no ``git`` process), so it works in any checkout. The hash tells
    two snapshots apart even when uncommitted changes make the commit alone misleading.
    """
    digest = hashlib.sha256()
    for path in sorted((package_path / "trio_crawler").rglob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"{_git_head(REPOSITORY)} (files sha256 {digest.hexdigest()[:12]})"


def _git_head(start: Path) -> str:
    """The short commit id in ``start/.git/HEAD``, or ``"no git checkout"``."""
    git = start / ".git"
    if not git.is_dir():
        return "no git checkout"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:7]
        ref = head.removeprefix("ref: ")
        if (git / ref).is_file():
            return (git / ref).read_text().strip()[:7]
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0][:7]
    except OSError:
        pass
    return "unknown commit"

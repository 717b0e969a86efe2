"""Scenario f: Ctrl-C, sent as a real SIGINT to a child process, per runtime.

What is compared is the order in which the crawl unwinds and how the process ends:

* ``asyncio.run`` turns the first SIGINT into a cancellation of the main task only. The
  main task's ``finally`` runs while the workers are still running; they are cancelled
  afterwards, when ``asyncio.run`` cleans up, and then KeyboardInterrupt is raised.
* With the workers in an ``asyncio.TaskGroup``, or in a Trio nursery, or an AnyIO task
  group, the workers unwind first and the main task's ``finally`` runs last.
* What comes out of ``run`` differs: a bare KeyboardInterrupt from ``asyncio.run`` and from
  ``anyio.run`` on asyncio (the interpreter then ends itself by SIGINT: status -2), a
  ``BaseExceptionGroup`` holding it from ``trio.run`` and ``anyio.run`` on Trio (an ordinary
  uncaught exception: status 1). Code that catches ``KeyboardInterrupt`` around ``run``
  needs ``except*`` (or a check of the group) on Trio.
* The crawler's CLI catches the signal as data, stops the crawl through its cancel scope,
  prints the partial report and exits 130.

The parent waits for the child to be ready (a line it prints, or a request the test
server receives), never for a guessed time; ``trio.fail_after`` is the hang detector.
"""

from __future__ import annotations

import functools
import re
import signal
import subprocess
from dataclasses import dataclass

import pytest
import trio

from trio_crawler._cli import ENGINES

from cancellation_support import CHILDREN, PYTHON
from httpserver import Handler, Reply, Request, open_test_server
from support import HANG_LIMIT, page

# The engines the CLI's Ctrl-C test runs: every one the CLI offers.
CLI_ENGINES = list(ENGINES)


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupted:
    returncode: int
    stdout: list[str]
    stderr: str


async def interrupt(command: list[str], *, when: trio.Event | None = None) -> Interrupted:
    """Run ``command``, send it SIGINT once ``when`` is set (without it: once the child
    prints a line ``ready``), and wait for it to exit."""
    stdout, stderr = bytearray(), bytearray()
    ready = when if when is not None else trio.Event()

    async def read(stream: trio.abc.ReceiveStream | None, into: bytearray) -> None:
        assert stream is not None
        async for chunk in stream:
            into.extend(chunk)
            if when is None and b"ready\n" in stdout:
                ready.set()
        if when is None:
            ready.set()  # the child ended without "ready": the test's assertions say how

    async with trio.open_nursery() as nursery:
        # run_process kills the child if the hang detector cancels this nursery.
        run = functools.partial(
            trio.run_process, command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False
        )
        process: trio.Process = await nursery.start(run)
        nursery.start_soon(read, process.stdout, stdout)
        nursery.start_soon(read, process.stderr, stderr)
        await ready.wait()
        process.send_signal(signal.SIGINT)
    assert process.returncode is not None
    return Interrupted(
        returncode=process.returncode,
        stdout=stdout.decode().splitlines(),
        stderr=stderr.decode(),
    )


WORKERS_FIRST = ["worker finally", "worker finally", "main finally; workers running: 0"]
MAIN_FIRST = ["main finally; workers running: 2", "worker finally", "worker finally"]
BARE = "KeyboardInterrupt"
GROUPED = "BaseExceptionGroup[KeyboardInterrupt]"
# The line of the child's traceback (stderr) that names what ended it.
BARE_TRACEBACK = "\nKeyboardInterrupt\n"
GROUPED_TRACEBACK = "| BaseExceptionGroup: Exceptions from Trio nursery (1 sub-exception)\n"


@pytest.mark.parametrize(
    ("runtime", "unwinding", "raised", "returncode", "last_words"),
    [
        pytest.param(runtime, *outcome, id=runtime)
        for runtime, outcome in {
            "asyncio": (MAIN_FIRST, BARE, -signal.SIGINT, BARE_TRACEBACK),
            "asyncio-taskgroup": (WORKERS_FIRST, BARE, -signal.SIGINT, BARE_TRACEBACK),
            "trio": (WORKERS_FIRST, GROUPED, 1, GROUPED_TRACEBACK),
            "anyio-asyncio": (WORKERS_FIRST, BARE, -signal.SIGINT, BARE_TRACEBACK),
            "anyio-trio": (WORKERS_FIRST, GROUPED, 1, GROUPED_TRACEBACK),
        }.items()
    ],
)
@pytest.mark.trio
async def test_f_ctrl_c_unwinds_in_this_order_and_exits_with_this_status(
    runtime: str, unwinding: list[str], raised: str, returncode: int, last_words: str
) -> None:
    """Per runtime: the order of the ``finally`` blocks after SIGINT, the shape of what
    ``run`` raised, the exit status, and the traceback's telling line on stderr."""
    with trio.fail_after(HANG_LIMIT):
        result = await interrupt([PYTHON, str(CHILDREN / "child_ctrl_c.py"), runtime])
    events = [re.sub(r"^worker \d finally$", "worker finally", line) for line in result.stdout]
    assert events == ["ready", *unwinding, f"run raised {raised}"], result.stderr
    assert result.returncode == returncode
    assert last_words in result.stderr


@pytest.mark.parametrize("engine", CLI_ENGINES)
@pytest.mark.trio
async def test_f_cli_prints_the_partial_report_and_exits_130(engine: str) -> None:
    """The CLI: SIGINT while one page never answers stops the crawl through its cancel
    scope; the report is printed with "Finish reason: interrupted" and the exit status is
    130, with no traceback."""
    never_requested = trio.Event()

    async def never(request: Request) -> Reply:
        never_requested.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    routes: dict[str, Handler] = {"/": page("/never", "/ok"), "/ok": page(), "/never": never}
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server:
            command = [
                PYTHON,
                "-m",
                "trio_crawler",
                "--engine",
                engine,
                "--grace",
                "0",
                server.url(),
            ]
            result = await interrupt(command, when=never_requested)
    assert result.returncode == 130, result.stderr
    assert result.stdout[0] == "*** Report ***"
    assert "Finish reason: interrupted" in result.stdout
    assert "Traceback" not in result.stderr

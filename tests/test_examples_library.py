"""The library examples (04-06) run as their readers run them, against a real demo site.

Each example runs as a subprocess, ``python examples/0N_....py ROOT ...`` from the
repository root, against the demo site served in the test's own nursery; the assertions are
on what it printed that it fetched. The examples print ``fetched <url> <status>`` lines, so
the set of URLs must be the demo site's ``expected_urls``. Each example is also run once
without a URL, when it serves the demo site itself, and must exit 0.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trio_crawler._demo import build_demo_site, serve_demo

from demo_expectations import expected_urls
from support import HANG_LIMIT, REPO, bare_python, run_example

FETCHED = re.compile(r"fetched (\S+) (\d{3}|None)")

TRIO_CRAWL = "examples/04_trio_crawl.py"
ANYIO_CRAWL = "examples/05_anyio_on_asyncio.py"
DEADLINE = "examples/06_deadline_and_ctrl_c.py"


def fetched_urls(stdout: str) -> list[str]:
    """The URLs of the ``fetched`` lines; every such line must be whole."""
    urls = []
    for line in stdout.splitlines():
        if line.startswith("fetched"):
            match = FETCHED.fullmatch(line)
            assert match is not None, f"not a whole fetched line: {line!r}"
            urls.append(match[1])
    return urls


@pytest.mark.trio
@pytest.mark.parametrize(
    "args",
    [
        pytest.param([TRIO_CRAWL], id="04-trio"),
        pytest.param([ANYIO_CRAWL], id="05-anyio-asyncio"),
        pytest.param([ANYIO_CRAWL, "--backend", "trio"], id="05-anyio-trio"),
    ],
)
async def test_full_crawl_fetches_the_demo_site(args: list[str]) -> None:
    async with trio.open_nursery() as nursery:
        root = await nursery.start(serve_demo)
        result = await run_example(args[0], root, *args[1:])
        nursery.cancel_scope.cancel("example done")
    stdout = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    urls = fetched_urls(stdout)
    expected = expected_urls(build_demo_site(), root)
    assert len(urls) == len(set(urls))
    assert set(urls) == expected
    assert f"{len(expected)} urls fetched, 8 redirects, 3 errors" in stdout.splitlines()


@pytest.mark.trio
async def test_deadline_stops_the_crawl_early() -> None:
    async with trio.open_nursery() as nursery:
        root = await nursery.start(serve_demo)
        result = await run_example(DEADLINE, root, "--max-time", "0.05", "--max-tasks", "1")
        nursery.cancel_scope.cancel("example done")
    stdout = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "finish reason: deadline" in stdout.splitlines()
    assert stdout.endswith("Finish reason: deadline\n")
    urls = fetched_urls(stdout)
    assert set(urls) < expected_urls(build_demo_site(), root)
    assert f"Done: {len(urls)}" in stdout.splitlines()


@pytest.mark.trio
async def test_ctrl_c_stops_the_crawl_cleanly() -> None:
    async with trio.open_nursery() as nursery:
        root = await nursery.start(serve_demo)
        with trio.fail_after(HANG_LIMIT):
            output = await interrupt_after_first_record(root)
        nursery.cancel_scope.cancel("example done")
    returncode, stdout = output
    assert returncode == 130, stdout
    assert "finish reason: interrupted" in stdout.splitlines()
    assert stdout.endswith("Finish reason: interrupted\n")
    urls = fetched_urls(stdout)
    assert urls
    assert set(urls) < expected_urls(build_demo_site(), root)
    assert f"Done: {len(urls)}" in stdout.splitlines()


async def interrupt_after_first_record(root: str) -> tuple[int, str]:
    """Run example 06 slowly, SIGINT it once a whole ``fetched`` line has arrived."""
    process = await trio.lowlevel.open_process(
        [sys.executable, DEADLINE, root, "--max-time", "60", "--max-tasks", "1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    received = bytearray()
    try:
        signalled = False
        while chunk := await process.stdout.receive_some():
            received += chunk
            if not signalled and re.search(rb"^fetched .*\n", received, re.MULTILINE):
                process.send_signal(signal.SIGINT)
                signalled = True
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        await process.stdout.aclose()
    return process.returncode, received.decode()


@pytest.mark.trio
@pytest.mark.parametrize("script", [TRIO_CRAWL, ANYIO_CRAWL, DEADLINE])
async def test_example_serves_its_own_demo_without_a_url(script: str) -> None:
    result = await run_example(script)
    assert result.returncode == 0, result.stderr.decode()
    assert fetched_urls(result.stdout.decode())


@pytest.mark.trio
@pytest.mark.parametrize("script", [TRIO_CRAWL, DEADLINE])
async def test_without_the_dependencies_it_says_what_to_install(
    tmp_path: Path, script: str
) -> None:
    """Run with a Python that lacks trio_crawler's dependencies, the example's own imports
    fail: one line naming the module and the command to run instead, no traceback."""
    result = await run_example(script, "http://127.0.0.1:9/", python=bare_python(tmp_path))
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"{script}: no module named 'trio' in this Python ({tmp_path / 'bin' / 'python'}): the "
        f"examples need trio_crawler's dependencies; run .venv/bin/python {script} after "
        "python3 -m venv .venv && .venv/bin/pip install -e ."
    ]

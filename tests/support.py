"""Helpers shared by the test modules: one copy of each, imported by bare name (pytest puts
``tests/`` on ``sys.path``). Fixtures live in conftest.py; servers in httpserver.py and
hostile_server.py."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import re
import subprocess
import sys
import venv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio

from trio_crawler import FetchStatistic
from trio_crawler._crawler import CrawlerBase
from trio_crawler._events import (
    FetchRequest,
    Outcome,
    Recorded,
    Requeued,
    Retry,
    RobotsSettled,
)
from trio_crawler._state import CrawlState

from conftest import Engine
from httpserver import Reply

# Seconds after which a test that is still waiting is hung: the bound every ``fail_after``,
# ``move_on_after`` and ``asyncio.timeout`` that guards against a hang uses. It is a hang
# detector, not a performance bound: a test that passes never comes near it, and a larger
# figure costs time only when something is already wrong. On Trio's virtual clock it costs
# nothing at all. The figure is set by the slowest real-time uses: subprocess runs of the
# command (an interpreter start, imports, a crawl of the 333-page demo site) and the
# resource tests' long crawl, on a loaded 2-core CI machine that runs two tests at once.
# Each takes seconds there; 120 leaves a wide margin over the slowest of them.
HANG_LIMIT = 120

# The repository's root: where the examples run from.
REPO = Path(__file__).resolve().parent.parent

# The JSON keys of one record, in order (docs/usage.md, "One record per URL"). Spelled out here
# rather than read from FetchStatistic, so that a change to the code cannot change what the
# tests expect.
RECORD_KEYS = [
    "url",
    "next_url",
    "status",
    "exception",
    "size",
    "content_type",
    "encoding",
    "num_urls",
    "num_new_urls",
    "depth",
    "referrer",
    "fetched_at",
    "elapsed",
    "handler_error",
]


# A record's fetched_at: UTC, ISO 8601, milliseconds, "Z".
FETCHED_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def open_descriptors() -> int:
    """How many file descriptors this process has open (Linux), after a collection: a
    socket an earlier test left to a reference cycle is closed here, not in the middle of
    a count."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def untimed(record: FetchStatistic) -> FetchStatistic:
    """``record`` without ``fetched_at`` and ``elapsed``, once they are checked to be an
    attempt's: a UTC time in the contract's form, and a number of seconds not below 0.
    For tests that compare whole records, whose times the wall clock decides."""
    assert record.fetched_at is not None, record
    assert FETCHED_AT.fullmatch(record.fetched_at), record
    assert isinstance(record.elapsed, float), record
    assert record.elapsed >= 0, record
    return dataclasses.replace(record, fetched_at=None, elapsed=None)


def page(*hrefs: str, extra: str = "") -> Reply:
    """An HTML page linking to each of ``hrefs`` (the href is the link's text too), with
    ``extra`` HTML after the links."""
    links = "".join(f'<a href="{href}">{href}</a>\n' for href in hrefs)
    return Reply.html(f"<html><body>{links}{extra}</body></html>")


def store_options(
    store: str, tmp_path: Path, request: pytest.FixtureRequest, crawl_id: str
) -> dict[str, Any]:
    """The crawl options that put a crawl on ``store`` (``memory``, ``sqlite`` or
    ``redis``): a state file under ``tmp_path``, or the module's ``redis_server`` fixture
    with ``crawl_id``."""
    if store == "sqlite":
        return {"state": str(tmp_path / "crawl.db")}
    if store == "redis":
        server = request.getfixturevalue("redis_server")
        return {"frontier": server.url(), "crawl_id": crawl_id}
    return {}


async def crawl(
    engine: Engine, roots: list[str] | str, *, hang_limit: float = HANG_LIMIT, **options: Any
) -> CrawlerBase:
    """Crawl ``roots`` on ``engine`` with ``options``; a crawl that outlasts ``hang_limit``
    fails the test. A module whose tests share options binds them with
    ``functools.partial``."""
    crawler = engine.crawler([roots] if isinstance(roots, str) else roots, **options)
    with anyio.fail_after(hang_limit):
        await crawler.crawl()
    return crawler


def by_url(crawler: CrawlerBase) -> dict[str, FetchStatistic]:
    """The crawl's records by URL, checking that no URL was recorded twice."""
    records = {stat.url: stat for stat in crawler.done}
    assert len(records) == len(crawler.done), "a URL was recorded twice"
    return records


def finish(
    state: CrawlState, request: FetchRequest, outcome: Outcome, *, now: float
) -> FetchRequest | None:
    """``attempt_finished``, answered as a worker reads it: the request to attempt again at
    once, or None when the worker is done with this one (whichever way it ended)."""
    result = state.attempt_finished(request, outcome, now=now)
    if isinstance(result, Retry):
        return result.request
    assert isinstance(result, Recorded | Requeued | RobotsSettled), result
    return None


async def run_cli(
    *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m trio_crawler`` with ``args`` (and ``env``, if given, as its whole
    environment) to its end; its output captured, its exit status not checked."""
    return await trio.run_process(
        [sys.executable, "-m", "trio_crawler", *args],
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


def read_records(path: Path, context: object = "") -> list[dict[str, object]]:
    """The records of a JSON Lines file, each checked to be a whole line with the record's
    keys in order; ``context`` goes into the assertion messages."""
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), f"last line cut short: {text[-200:]!r}\n{context}"
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise AssertionError(
                f"line {number} is not JSON ({exc}): {line!r}\n{context}"
            ) from None
        assert list(records[-1]) == RECORD_KEYS, f"line {number}: {line}\n{context}"
    return records


async def run_example(
    script: str, *args: str, python: str | Path = sys.executable
) -> subprocess.CompletedProcess[bytes]:
    """Run ``examples/``'s ``script`` (a path from the repository's root) with ``args`` to
    its end, bounded by :data:`HANG_LIMIT`; its output captured, its status not checked.
    ``python`` runs it: this test run's interpreter unless given (another one runs without
    this run's PYTHONPATH, which could lend it packages)."""
    environment = None
    if python != sys.executable:
        environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    with trio.fail_after(HANG_LIMIT):
        return await trio.run_process(
            [str(python), script, *args],
            cwd=REPO,
            env=environment,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def bare_python(directory: Path) -> Path:
    """A Python without trio_crawler's dependencies, as in a fresh shell: a virtual
    environment made in ``directory`` from this one's base interpreter, without pip and
    without the system's packages (symlinks: it takes milliseconds)."""
    venv.create(directory, with_pip=False, symlinks=True)
    return directory / "bin" / "python"


async def first_line_then_close(
    command: list[str], stderr: Path, release: trio.Event
) -> tuple[bytes, trio.Process]:
    """Run ``command`` with its stdout on a pipe, read up to its first line, close the
    reading end as ``head -1`` does, then set ``release`` (for a route that answers once
    the reader is gone) and wait for the process to exit. Returns what was read (the
    first line, perhaps with more) and the finished process; its stderr is in ``stderr``.
    """
    read_end, write_end = os.pipe()
    with stderr.open("wb") as errors:
        process = await trio.lowlevel.open_process(command, stdout=write_end, stderr=errors)
    os.close(write_end)  # the child holds the only writing end
    reader = trio.lowlevel.FdStream(read_end)
    first = b""
    while b"\n" not in first:
        chunk = await reader.receive_some()
        assert chunk, "the child closed stdout before its first line"
        first += chunk
    await reader.aclose()
    release.set()
    await process.wait()
    return first, process

"""Runs of one crawl kept in a state file: what each run takes from the file, and what is
its own.

What docs/long-crawls.md promises ("Options between runs"): the options that say *what* to
crawl are fixed by the run that made the crawl (left out, the file's values apply; given
with other values, a usage error that changes nothing), and those that say *how* are each
run's own, ``--delay`` included (the floor of every origin's delay; a longer
``Crawl-delay`` still applies).

Each test is a behaviour a user found broken, through the command line as a child
process, with a real state file in ``tmp_path`` and a real server in the test's own task
group.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
from sites import Site

from trio_crawler import Crawler
from trio_crawler._between_runs import OptionChanged

from httpserver import Reply, Request, open_test_server
from support import HANG_LIMIT, page, read_records, run_cli

SEED = 20261125


def crawl_args(state: Path, *extra: str) -> list[str]:
    return ["--state", str(state), "--no-progress", *extra]


# (the options of the run that made the crawl, a later run's, the error's start, its rest)
CHANGED = [
    pytest.param(
        ["--max-depth", "2"], ["--max-depth", "3"], "--max-depth 3:", "made with --max-depth 2",
        id="max-depth",
    ),
    pytest.param([], ["--max-pages", "5"], "--max-pages 5:", "with no --max-pages", id="max-pages"),
    pytest.param(
        ["--exclude", "/a"], ["--exclude", "/b"], "--exclude '/b':", "with --exclude '/a'",
        id="exclude",
    ),
    pytest.param([], ["--lenient"], "--lenient:", "made with --strict", id="lenient"),
    pytest.param(["--lenient"], ["--strict"], "--strict:", "made with --lenient", id="strict"),
    pytest.param(
        ["--sitemaps"], ["--sitemaps", "--ignore-robots"], "--ignore-robots:",
        "made with no --ignore-robots", id="ignore-robots",
    ),
    pytest.param(
        ["--include", "/a", "--include", "/b"], ["--include", "/a"], "--include '/a':",
        "made with --include '/a' --include '/b'", id="include",
    ),
    pytest.param([], ["--no-parent"], "--no-parent:", "made with no --no-parent", id="no-parent"),
]  # fmt: skip


@pytest.mark.parametrize(("made", "later", "start", "rest"), CHANGED)
@pytest.mark.trio
async def test_an_option_that_says_what_to_crawl_cannot_change(
    tmp_path: Path, made: list[str], later: list[str], start: str, rest: str
) -> None:
    """Exit 2, one line naming the option and both values, no request, no file changed.

    The later run is a ``--recrawl``, which would request every URL again if it ran."""
    state, output = tmp_path / "crawl.db", tmp_path / "out.jsonl"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.route("/", page())
            first = await run_cli(*crawl_args(state, "-o", str(output), *made), server.url("/"))
            assert first.returncode == 0, first.stderr
            kept, written, requests = state.read_bytes(), output.read_bytes(), len(server.requests)
            later_output = tmp_path / "again.jsonl"  # a recrawl is a new pass: a new file
            run = await run_cli(*crawl_args(state, "-o", str(later_output), "--recrawl", *later))
    error = run.stderr.decode()
    assert run.returncode == 2, error
    assert error.count("\n") == 1, error
    assert error.startswith(f"trio-crawler: error: {start} "), error
    assert rest in error, error
    assert str(state) in error, error
    assert run.stdout == b""
    assert len(server.requests) == requests, "a refused run made a request"
    assert state.read_bytes() == kept
    assert output.read_bytes() == written
    assert not later_output.exists()


@pytest.mark.trio
async def test_options_that_say_what_to_crawl_are_the_crawls_when_left_out(
    tmp_path: Path,
) -> None:
    """A recrawl given no options keeps the crawl's --max-depth, --exclude and
    --ignore-robots: it fetches neither the page beyond the depth, nor the one excluded,
    nor robots.txt."""
    state = tmp_path / "crawl.db"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            # "/" has no ETag, so the recrawl reads it again (and its links with the scope).
            server.route("/", page("/a", "/x/secret"))
            server.route("/a", page("/b"))
            server.route("/b", page())
            server.route("/x/secret", page())
            made = ["--max-depth", "1", "--exclude", "/x/", "--ignore-robots"]
            first = await run_cli(*crawl_args(state, *made), server.url("/"))
            assert first.returncode == 0, first.stderr
            assert sorted(server.requests) == ["/", "/a"]
            del server.requests[:]
            again = await run_cli(*crawl_args(state, "--recrawl"))
    assert again.returncode == 0, again.stderr
    assert sorted(server.requests) == ["/", "/a"], again.stdout.decode()


@pytest.mark.trio
async def test_include_and_no_parent_are_the_crawls_headers_each_runs_own(
    tmp_path: Path,
) -> None:
    """A recrawl given no scope options keeps --include and --no-parent; the headers are
    each run's own, sent only by the run given them, and never kept in the file (they may
    hold credentials)."""
    state = tmp_path / "crawl.db"
    seen: dict[str, list[str | None]] = {}

    def answer(target: str, reply: Reply) -> Callable[[Request], Awaitable[Reply]]:
        async def handler(request: Request) -> Reply:
            seen.setdefault(target, []).append(request.headers.get("x-token"))
            return reply

        return handler

    # /docs/b is left out by --include, /blog/a by --no-parent, /blog/c by both.
    routes = {
        "/docs/": page("/docs/a", "/docs/b", "/blog/a", "/blog/c", "/"),
        "/docs/a": page(),
        "/docs/b": page(),
        "/blog/a": page(),
        "/blog/c": page(),
        "/": page(),
    }
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            for target, reply in routes.items():
                server.route(target, answer(target, reply))
            made = ["--ignore-robots", "--no-parent", "--include", "/a$", "--include", "/docs/$"]
            first = await run_cli(
                *crawl_args(state, *made, "--header", "X-Token: secret-1"), server.url("/docs/")
            )
            assert first.returncode == 0, first.stderr
            assert sorted(seen) == ["/docs/", "/docs/a"]
            again = await run_cli(*crawl_args(state, "--recrawl", "--header", "X-Token: two"))
    assert again.returncode == 0, again.stderr
    assert seen == {"/docs/": ["secret-1", "two"], "/docs/a": ["secret-1", "two"]}
    assert b"secret-1" not in state.read_bytes()
    with sqlite3.connect(state) as db:
        (options,) = db.execute("SELECT value FROM crawl WHERE key = 'options'").fetchone()
    kept = json.loads(options)
    assert (kept["include"], kept["no_parent"]) == (["/a$", "/docs/$"], True)
    assert "headers" not in kept


def test_the_api_keeps_the_crawls_options_too(tmp_path: Path) -> None:
    """``Crawler(state=...)``: keyword arguments left out are the crawl's; one given with
    another value raises, before anything is opened."""
    state = str(tmp_path / "crawl.db")
    Crawler(["http://127.0.0.1:9/"], state=state, max_depth=2, strict=False).store.close()
    resumed = Crawler([], state=state, max_tasks=3)
    resumed.store.close()
    assert (resumed.config.max_depth, resumed.config.strict) == (2, False)
    assert resumed.config.max_tasks == 3
    same = Crawler([], state=state, max_depth=2)
    same.store.close()
    with pytest.raises(OptionChanged, match=r"^max_depth is 3, but the crawl in .* with 2"):
        Crawler([], state=state, max_depth=3)
    with pytest.raises(OptionChanged, match=r"^strict is True, but the crawl in .* with False"):
        Crawler([], state=state, strict=True)


# The site of the delay tests: 300 pages (each linking to the next and four others), more
# than any run below fetches within its --max-time, and robots.txt as each test says.
PAGES = 300


async def pages_fetched_by_a_resumed_run(
    tmp_path: Path, *, robots: Reply, first: list[str], later: list[str]
) -> int:
    """Make a crawl that stops at its deadline after fetching robots.txt and a few pages,
    then run it again with ``later`` for one second; the pages the second run fetched."""
    site = Site(PAGES, random.Random(SEED))
    state = tmp_path / "crawl.db"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.route("/robots.txt", robots)
            server.fallback(site.handle)
            site.pause = 0.05  # two at a time: no more than a few pages before the deadline
            made = crawl_args(state, "--max-tasks", "2", "--max-time", "0.5", *first)
            run = await run_cli(*made, server.url("/p/0.html"))
            assert run.returncode == 0, run.stderr
            assert b"Finish reason: deadline" in run.stdout, run.stdout
            assert server.hits["/robots.txt"] == 1
            site.pause = 0.0
            served = site.served
            again = await run_cli(*crawl_args(state, "--max-time", "1", *later))
            assert again.returncode == 0, again.stderr
            assert server.hits["/robots.txt"] == 1, "the resumed run fetched robots.txt again"
    return site.served - served


@pytest.mark.trio
async def test_a_resumed_runs_delay_is_the_floor_for_every_origin(tmp_path: Path) -> None:
    """The crawl was made without --delay; a resumed run given one keeps it (the run that
    kept the origin's robots.txt had no delay, and that used to stick: hundreds of pages
    a second)."""
    fetched = await pages_fetched_by_a_resumed_run(
        tmp_path, robots=Reply.html("none", status=404), first=[], later=["--delay", "0.1"]
    )
    assert 1 <= fetched <= 12  # one at once, then one per 0.1 s for a second


@pytest.mark.trio
async def test_a_resumed_run_without_delay_is_not_slowed_by_the_first_runs(
    tmp_path: Path,
) -> None:
    fetched = await pages_fetched_by_a_resumed_run(
        tmp_path, robots=Reply.html("none", status=404), first=["--delay", "0.2"], later=[]
    )
    assert fetched > 30  # at --delay 0.2, five or six


@pytest.mark.trio
async def test_a_longer_crawl_delay_still_applies_to_a_resumed_run(tmp_path: Path) -> None:
    robots = Reply(
        headers=(("content-type", "text/plain"),), body=b"User-agent: *\nCrawl-delay: 0.25\n"
    )
    fetched = await pages_fetched_by_a_resumed_run(
        tmp_path, robots=robots, first=[], later=["--delay", "0.05"]
    )
    assert 1 <= fetched <= 6  # one at once, then one per 0.25 s for a second


def rate_line_count(report: bytes) -> int:
    """N of the report's ``Finished N urls in S secs ...`` line."""
    found = re.search(rb"^Finished (\d+) urls in [\d.]+ secs", report, re.MULTILINE)
    assert found is not None, report.decode()
    return int(found[1])


@pytest.mark.trio
async def test_the_rate_line_of_a_resumed_crawl_counts_this_runs_records(
    tmp_path: Path,
) -> None:
    """The report covers the whole crawl (``Done:``), the rate line this run: its records
    over its time. It used to count the whole crawl's records over this run's time."""
    site = Site(PAGES, random.Random(SEED))
    state, output = tmp_path / "crawl.db", tmp_path / "out.jsonl"
    args = crawl_args(state, "-o", str(output), "--ignore-robots")
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.fallback(site.handle)
            site.pause = 0.05
            first = await run_cli(
                *args, "--max-tasks", "2", "--max-time", "0.5", server.url("/p/0.html")
            )
            site.pause = 0.0
            second = await run_cli(*args)
            third = await run_cli(*args)
    assert b"Finish reason: deadline" in first.stdout, first.stdout.decode()
    made = rate_line_count(first.stdout)
    assert 0 < made < PAGES
    assert f"Done: {made}\n".encode() in first.stdout
    assert b"Finish reason: finished" in second.stdout, second.stdout.decode()
    assert rate_line_count(second.stdout) == PAGES - made, second.stdout.decode()
    assert f"Done: {PAGES}\n".encode() in second.stdout
    # A finished crawl's report, no request made: nothing this run.
    assert rate_line_count(third.stdout) == 0, third.stdout.decode()
    assert f"Done: {PAGES}\n".encode() in third.stdout
    assert len(read_records(output)) == PAGES


@pytest.mark.trio
async def test_the_rate_line_of_a_crawl_resumed_at_its_max_pages_counts_nothing(
    tmp_path: Path,
) -> None:
    site = Site(PAGES, random.Random(SEED))
    state = tmp_path / "crawl.db"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.fallback(site.handle)
            args = crawl_args(state, "--ignore-robots")
            first = await run_cli(*args, "--max-pages", "20", server.url("/p/0.html"))
            served = site.served
            again = await run_cli(*args)
    assert rate_line_count(first.stdout) == 20, first.stdout.decode()
    assert site.served == served, "the crawl's --max-pages was spent"
    assert rate_line_count(again.stdout) == 0, again.stdout.decode()
    assert b"Done: 20\n" in again.stdout
    assert b"Finish reason: max-pages" in again.stdout


def refused_for_pass(run: subprocess.CompletedProcess[bytes], output: str, number: int) -> None:
    error = run.stderr.decode()
    assert run.returncode == 2, error
    assert error == (
        f"trio-crawler: error: --output {output} holds the records of pass {number}; "
        "give a new file for this pass\n"
    )
    assert run.stdout == b""


@pytest.mark.trio
async def test_a_recrawl_refuses_the_output_file_of_an_earlier_pass(tmp_path: Path) -> None:
    """``--recrawl -o FIRST.jsonl`` replaced the first pass's records with the new pass's;
    now it is refused, one line, exit 2, with no request made and no file changed."""
    state, first, second = tmp_path / "crawl.db", tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.route("/", page("/a"))
            server.route("/a", page())
            made = await run_cli(
                *crawl_args(state, "-o", str(first), "--ignore-robots"), server.url("/")
            )
            assert made.returncode == 0, made.stderr
            kept, written, requests = state.read_bytes(), first.read_bytes(), len(server.requests)
            recrawl = crawl_args(state, "--recrawl", "-o")
            refused = await run_cli(*recrawl, str(first))
            # The same file by another name is the same file.
            alias = f"{tmp_path}/./{first.name}"
            refused_alias = await run_cli(*recrawl, alias)
            assert len(server.requests) == requests, "a refused run made a request"
            assert state.read_bytes() == kept
            assert first.read_bytes() == written
            passed = await run_cli(*recrawl, str(second))
            assert passed.returncode == 0, passed.stderr
            # The second pass is finished: its report may be asked for with its own file,
            # but the first pass's file would be cut back to hold the second's records.
            report = await run_cli(*crawl_args(state, "-o", str(second)))
            refused_report = await run_cli(*crawl_args(state, "-o", str(first)))
    refused_for_pass(refused, str(first), 1)
    refused_for_pass(refused_alias, alias, 1)
    refused_for_pass(refused_report, str(first), 1)
    assert report.returncode == 0, report.stderr
    assert first.read_bytes() == written
    # Both pages, in the order they finished: the pass fetches them at once.
    assert sorted(record["url"] for record in read_records(second)) == [
        server.url("/"),
        server.url("/a"),
    ]


@pytest.mark.trio
async def test_an_interrupted_recrawl_pass_goes_on_with_its_own_file(tmp_path: Path) -> None:
    site = Site(PAGES, random.Random(SEED))
    state, first, second = tmp_path / "crawl.db", tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    args = crawl_args(state, "--ignore-robots", "-o")
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.fallback(site.handle)
            made = await run_cli(*args, str(first), server.url("/p/0.html"))
            assert made.returncode == 0, made.stderr
            written = first.read_bytes()
            site.pause = 0.05
            cut = await run_cli(
                *args, str(second), "--recrawl", "--max-tasks", "2", "--max-time", "0.5"
            )
            assert b"Finish reason: deadline" in cut.stdout, cut.stdout.decode()
            site.pause = 0.0
            refused = await run_cli(*args, str(first), "--recrawl")
            resumed = await run_cli(*args, str(second), "--recrawl")
    refused_for_pass(refused, str(first), 1)
    assert resumed.returncode == 0, resumed.stderr
    assert b"Finish reason: finished" in resumed.stdout, resumed.stdout.decode()
    assert first.read_bytes() == written
    records = read_records(second)
    assert len({record["url"] for record in records}) == len(records) == PAGES
    assert {record["status"] for record in records} == {304}


def report_counters(report: bytes) -> dict[str, int]:
    """The report's counters (``     N name`` lines), by name."""
    return {
        name.decode(): int(count)
        for count, name in re.findall(rb"^ +(\d+) (\w+)$", report, re.MULTILINE)
    }


@pytest.mark.trio
async def test_a_recrawls_304s_are_not_modified_not_errors(tmp_path: Path) -> None:
    """A recrawl of a site where one page went away: each unchanged page's 304 counts as
    ``not_modified`` (and ``status_304``), and only the 404 as an ``error``. The report
    used to file every 304 under ``error`` (``533 error`` beside ``532 status_304``)."""
    site = Site(40, random.Random(SEED))
    state = tmp_path / "crawl.db"
    gone = 7
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.fallback(site.handle)
            made = await run_cli(*crawl_args(state, "--ignore-robots"), server.url("/p/0.html"))
            assert made.returncode == 0, made.stderr
            site.removed.add(gone)
            again = await run_cli(*crawl_args(state, "--ignore-robots", "--recrawl"))
    assert again.returncode == 0, again.stderr
    report = again.stdout.decode()
    assert "Finish reason: finished" in report, report
    assert "Done: 40\n" in report, report
    counters = report_counters(again.stdout)
    assert counters["not_modified"] == counters["status_304"] == 39, report
    assert counters["error"] == counters["status_404"] == 1, report
    assert f"{server.url(f'/p/{gone}.html')} 404 None None 4\n" in report

"""The ``trio-crawler`` command run as users and scripts run it (``_cli.py``): real
processes, real servers on 127.0.0.1, real signals.

These tests start ``python -m trio_crawler`` as a subprocess, so they run on Trio's real
clock; ``trio.fail_after`` is their hang detector. Where a test must act "while the crawl is
running" it waits for an event the crawl itself causes (the server receiving a request),
never for a guessed amount of time. Tests where the engine could make a difference run on
every engine. The WARC file is checked with warcio's own reader and its ``check`` command;
the progress display is checked in a real pseudo-terminal, since it is only drawn on one.

Parsing the command line is test_cli_args.py's subject, the JSON Lines output
test_output.py's, and what a signal does to a crawl at any moment test_signals.py's.
"""

from __future__ import annotations

import functools
import gc
import io
import json
import os
import platform
import pty
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO

import httpx
import pytest
import trio
from warcio.archiveiterator import ArchiveIterator

import trio_crawler._cli
from trio_crawler._cli import (
    ENGINES,
    HEAP_TOP_PAD,
    HEAP_TRIM_THRESHOLD,
    REPORT_CHUNK,
    _write_report,
)
from trio_crawler._clients import installed_http_libraries
from trio_crawler._demo import build_demo_site

from demo_expectations import expected_urls
from hostile_server import closed_port
from httpserver import DropConnection, Handler, Reply, Request, open_test_server
from support import HANG_LIMIT, first_line_then_close, read_records, run_cli


def never_answers(requested: trio.Event) -> Handler:
    """A handler that sets ``requested`` and never replies: the crawl is running while it
    waits."""

    async def never(request: Request) -> Reply:
        requested.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return never


@pytest.mark.trio
async def test_verbose_logs_info_to_stderr() -> None:
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": Reply.html("x")}) as server:
            server.drop_first("/", 1)
            result = await run_cli("-v", server.url())
    assert result.returncode == 0
    assert f"try 1 for {server.url()} raised RemoteProtocolError" in result.stderr.decode()
    assert "*** Report ***" in result.stdout.decode()


@pytest.mark.trio
async def test_very_verbose_logs_one_line_per_request_attempt() -> None:
    """-vv: a DEBUG line for every attempt, robots.txt and retries included, with its answer
    and time; -v: the crawler's decisions only, none of those lines."""
    routes = {
        "/": Reply.html('<a href="/a">a</a> <a href="/moved">m</a> <a href="/gone">g</a>'),
        "/a": Reply.html("a page"),
        "/moved": Reply.redirect("/a"),
    }
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server:
            server.drop_first("/a", 1)
            debug = await run_cli("-vv", "--no-progress", server.url())
            attempts = list(server.requests)
            info = await run_cli("-v", "--no-progress", server.url())
    assert debug.returncode == 0, debug.stderr
    lines = [
        line
        for line in debug.stderr.decode().splitlines()
        if line.startswith("DEBUG trio_crawler: GET ")
    ]
    assert sorted(line.split()[3].rstrip(":") for line in lines) == sorted(
        server.url(target) for target in attempts
    ), lines
    took = r" in \d+\.\d{3} s"
    for pattern in [
        rf"GET {re.escape(server.url())}: 200 text/html, \d+ bytes{took}",
        rf"GET {re.escape(server.url('/robots.txt'))}: 404 text/html, \d+ bytes{took}",
        rf"GET {re.escape(server.url('/moved'))}: 302 to /a, 0 bytes{took}",
        rf"GET {re.escape(server.url('/a'))}: RemoteProtocolError: .+{took}",
        rf"GET {re.escape(server.url('/a'))} \(try 2\): 200 text/html, 6 bytes{took}",
    ]:
        assert any(re.fullmatch(f"DEBUG trio_crawler: {pattern}", line) for line in lines), (
            pattern,
            lines,
        )
    assert info.returncode == 0, info.stderr
    assert b"GET " not in info.stderr
    assert b"DEBUG" not in info.stderr


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_max_time_exits_0_with_a_deadline_report(tmp_path: Path, engine: str) -> None:
    output = tmp_path / "out.jsonl"
    never = never_answers(trio.Event())

    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(
            {"/": Reply.html('<a href="/slow">s</a>'), "/slow": never}
        ) as server:
            result = await run_cli(
                "--engine", engine, "--max-time", "1", "-o", str(output), server.url()
            )
    assert result.returncode == 0
    report = result.stdout.decode()
    assert report.splitlines()[-1] == "Finish reason: deadline"
    assert "Todo: 1" in report
    assert [record["url"] for record in read_records(output)] == [server.url()]


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.trio
async def test_signal_stops_the_crawl_with_status_130(
    tmp_path: Path, signum: signal.Signals, engine: str
) -> None:
    output = tmp_path / "out.jsonl"
    report_path = tmp_path / "report.txt"
    slow_page_requested = trio.Event()
    never = never_answers(slow_page_requested)

    # A chain: once /slow is requested, /, /a and /b have finished, on any engine.
    routes = {
        "/": Reply.html('<a href="/a">a</a>'),
        "/a": Reply.html('<a href="/b">b</a>'),
        "/b": Reply.html('<a href="/slow">s</a>'),
        "/slow": never,
    }
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server, trio.open_nursery() as nursery:
            command = [
                *[sys.executable, "-m", "trio_crawler", "--engine", engine],
                *["--grace", "0", "-o", str(output), server.url()],
            ]
            with report_path.open("wb") as report_file:
                run = functools.partial(trio.run_process, command, stdout=report_file, check=False)
                process = await nursery.start(run)
            await slow_page_requested.wait()
            process.send_signal(signum)
            await process.wait()
    assert process.returncode == 130
    report = report_path.read_text().splitlines()
    assert report[0] == "*** Report ***"
    assert report[-1] == "Finish reason: interrupted"
    assert "Todo: 1" in report  # /slow
    records = read_records(output)
    assert {record["url"] for record in records} == {server.url(p) for p in ("/", "/a", "/b")}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_demo_crawls_the_whole_bundled_site(tmp_path: Path, engine: str) -> None:
    output = tmp_path / "demo.jsonl"
    with trio.fail_after(HANG_LIMIT):
        result = await run_cli("--demo", "--engine", engine, "-o", str(output))
    assert result.returncode == 0, result.stderr
    records = read_records(output)
    root = str(records[0]["url"])
    assert {record["url"] for record in records} == expected_urls(build_demo_site(), root)
    report = result.stdout.decode().splitlines()
    assert report[-1] == "Finish reason: finished"
    assert f"Done: {len(records)}" in report
    kinds = {"redirect", "html", "other", "error", "fail", "status_404"}
    assert kinds <= {line.split()[-1] for line in report if line.startswith("   ")}


@pytest.mark.trio
async def test_serve_demo_serves_until_interrupted() -> None:
    with trio.fail_after(HANG_LIMIT):
        async with trio.open_nursery() as nursery:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "trio_crawler", "--serve-demo"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            assert process.stdout is not None
            first_line = b""
            while not first_line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, "--serve-demo exited before printing its URL"
                first_line += chunk
            url = first_line.decode().split()[5]
            async with httpx.AsyncClient() as client:
                response = await client.get(url)
            process.send_signal(signal.SIGINT)
            await process.wait()
            await process.stdout.aclose()
            nursery.cancel_scope.cancel()
    assert first_line.decode().startswith("Serving the demo site at http://127.0.0.1:")
    assert response.status_code == 200
    assert "text/html" in response.headers["content-type"]
    assert process.returncode == 130


# In a fresh process: allocate and free a number of 64 KiB heap blocks, then ask glibc
# how much free memory it kept at the top of the heap (mallinfo2's keepcost).
_KEPT_AT_THE_TOP = """
import ctypes, sys
from trio_crawler._cli import _pad_the_heap


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "pad" and not _pad_the_heap():
    sys.exit("mallopt refused")
blocks = [bytearray(64 * 1024) for _ in range(int(sys.argv[2]))]  # below the mmap threshold
del blocks
print(libc.mallinfo2().keepcost)
"""


def test_the_console_command_keeps_the_collector_off_what_the_imports_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run() freezes the objects alive before the crawl (the modules, classes and functions
    of the imports, which live as long as the process), so that no collection during the
    crawl walks them, and freezes again after it, for the teardown."""
    frozen_during: list[int] = []

    def main() -> int:
        frozen_during.append(gc.get_freeze_count())
        gc.unfreeze()  # what run() froze after main() is then main()'s own leftovers alone
        return 3

    monkeypatch.setattr(trio_crawler._cli, "main", main)
    gc.unfreeze()
    try:
        assert trio_crawler._cli.run() == 3
        assert frozen_during
        assert frozen_during[0] > 1000  # the test process's imports
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


# python -c this ROOT...: the command line's crawl, then the modules it imported, on stderr.
_MODULES_OF_A_CRAWL = """
import json, runpy, sys
try:
    runpy.run_module("trio_crawler", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    if stop.code:
        raise
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize("library", [library.__name__ for library in installed_http_libraries()])
def test_a_crawl_imports_only_the_engine_and_the_http_library_it_uses(library: str) -> None:
    """Each process of a shared crawl starts while the others crawl, on the same CPUs: the
    engines and the HTTP library a crawl does not use are never imported (about 30 ms of a
    start-up of 250). The one refused request still ends as its record says, mapped by the
    errors of the library in use."""
    url = f"http://127.0.0.1:{closed_port()}/"
    done = subprocess.run(
        [sys.executable, "-c", _MODULES_OF_A_CRAWL, "--no-progress", "-o", "-", url],
        capture_output=True,
        text=True,
        check=True,
        timeout=HANG_LIMIT,
        env={**os.environ, "TRIO_CRAWLER_HTTP": library},
    )
    imported = set(json.loads(done.stderr.splitlines()[-1]))
    assert "trio_crawler.engine_trio" in imported
    assert not imported & {"trio_crawler.engine_anyio", "trio_crawler.engine_asyncio"}
    assert library in imported
    assert not imported & ({"httpx", "httpx2"} - {library})
    [record] = [json.loads(line) for line in done.stdout.splitlines()]
    assert record["url"] == url
    assert record["exception"].startswith("ConnectError:")


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="mallopt's M_TOP_PAD and mallinfo2 are glibc's",
)
def test_the_command_line_keeps_a_pad_at_the_top_of_the_heap() -> None:
    """A pad is kept after a burst freed (12.5 MiB, over the trim threshold), and a burst
    under the threshold (4 MiB) is kept whole, where glibc alone gives it back: each page
    of a crawl would otherwise move the top of the heap down and up again."""

    def kept(mode: str, blocks: int) -> int:
        done = subprocess.run(
            [sys.executable, "-c", _KEPT_AT_THE_TOP, mode, str(blocks)],
            capture_output=True,
            text=True,
            check=True,
            timeout=HANG_LIMIT,
        )
        return int(done.stdout)

    assert kept("pad", 200) >= HEAP_TOP_PAD > kept("default", 200)
    under = 64 * 64 * 1024
    assert under < HEAP_TRIM_THRESHOLD
    assert kept("pad", 64) >= under > kept("default", 64)


WARCIO = str(Path(sys.executable).with_name("warcio"))


def read_warc(path: Path) -> list[tuple[str, str | None, str | None]]:
    """(WARC-Type, WARC-Target-URI, HTTP status) of every record, in file order."""
    records = []
    with path.open("rb") as stream:
        for record in ArchiveIterator(stream):
            status = record.http_headers.get_statuscode() if record.http_headers else None
            if record.rec_type != "response":
                status = None
            records.append(
                (record.rec_type, record.rec_headers.get_header("WARC-Target-URI"), status)
            )
    return records


def warcio_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WARCIO, "check", "-v", str(path)], capture_output=True, text=True)


async def drop(request: Request) -> Reply:
    raise DropConnection


SITE = {
    "/robots.txt": Reply(
        headers=(("content-type", "text/plain"),),
        body=b"User-agent: *\nDisallow: /private\n",
    ),
    "/": Reply.html(
        '<a href="/a">a</a> <a href="/moved">m</a> <a href="/missing">x</a>'
        ' <a href="/broken">b</a> <a href="/private/p">p</a>'
    ),
    "/a": Reply.html("a page"),
    "/moved": Reply.redirect("/a"),
    "/broken": drop,
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_warc_archives_every_attempt_and_every_record_has_its_response(
    tmp_path: Path, engine: str
) -> None:
    output, warc = tmp_path / "out.jsonl", tmp_path / "crawl.warc.gz"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(SITE) as server:
            result = await run_cli(
                *["--engine", engine, "--max-tries", "2", "-o", str(output)],
                *["--warc", str(warc), server.url()],
            )
    assert result.returncode == 0, result.stderr
    records = read_records(output)
    archived = read_warc(warc)
    assert archived[0][0] == "warcinfo"
    responses = {(uri, status) for kind, uri, status in archived if kind == "response"}
    # Every record with a status has a response record for its URL with that status.
    for record in records:
        if record["status"] is not None:
            assert (record["url"], str(record["status"])) in responses, record
    # robots.txt is archived though it is not a record; the disallowed page is neither.
    assert (server.url("/robots.txt"), "200") in responses
    assert not any(uri == server.url("/private/p") for _, uri, _ in archived)
    assert server.url("/private/p") not in {record["url"] for record in records}
    # The failed URL: one request per attempt, each with a metadata record saying why.
    broken = [kind for kind, uri, _ in archived if uri == server.url("/broken")]
    assert broken == ["request", "metadata"] * 2
    # Requests and responses pair up, one request per attempt.
    requests = [uri for kind, uri, _ in archived if kind == "request"]
    assert len(requests) == len(server.requests)
    check = warcio_check(warc)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "digest pass" in check.stdout


@pytest.mark.parametrize("engine", ["trio", "asyncio"])
@pytest.mark.trio
async def test_warc_of_an_interrupted_crawl_is_valid_to_its_last_record(
    tmp_path: Path, engine: str
) -> None:
    warc = tmp_path / "crawl.warc"
    hanging = trio.Event()
    never = never_answers(hanging)

    routes = {"/": Reply.html('<a href="/a">a</a>'), "/a": Reply.html('<a href="/n">n</a>')}
    with trio.fail_after(HANG_LIMIT):
        async with (
            open_test_server({**routes, "/n": never}) as server,
            trio.open_nursery() as nursery,
        ):
            command = [sys.executable, "-m", "trio_crawler", "--engine", engine]
            command += ["--grace", "0", "--warc", str(warc), server.url()]
            run = functools.partial(
                trio.run_process, command, stdout=subprocess.DEVNULL, check=False
            )
            process = await nursery.start(run)
            await hanging.wait()
            process.send_signal(signal.SIGINT)
    assert process.returncode == 130
    archived = read_warc(warc)
    assert ("response", server.url("/a"), "200") in archived
    assert ("request", server.url("/n"), None) not in archived  # never finished
    assert warcio_check(warc).returncode == 0


def run_in_terminal(args: list[str], stdout: IO[bytes] | None = None) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal (and stdout to ``stdout``, if given);
    return its status and what it drew."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "trio_crawler", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL if stdout is None else stdout,
        stderr=terminal,
        env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
    )
    os.close(terminal)
    drawn = bytearray()
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the child closed its end of the terminal
            break
        if not chunk:
            break
        drawn.extend(chunk)
    os.close(controller)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn.decode(errors="replace"))
    return process.wait(timeout=HANG_LIMIT), text


@pytest.mark.parametrize("engine", list(ENGINES))
def test_progress_is_drawn_on_a_terminal(engine: str) -> None:
    status, drawn = run_in_terminal(["--demo", "--engine", engine])
    assert status == 0
    for label in ("done", "queued", "in flight", "pages/s", "error", "fail"):
        assert label in drawn, drawn[-500:]
    # The last line drawn is the finished crawl: every demo page done, nothing queued.
    last = drawn.strip().splitlines()[-1]
    assert last.startswith("333 done  0 queued  0 in flight"), last


PROGRESS_LINE = re.compile(
    r"^(?P<done>\d+) done  (?P<queued>\d+) queued  (?P<in_flight>\d+) in flight  "
    r"[\d.]+ pages/s  (?P<error>\d+) error  (?P<fail>\d+) fail  (?:\d+ slowed  )?"
    r"\d+:\d\d:\d\d$"
)


@pytest.mark.trio
async def test_the_last_progress_line_agrees_with_the_report(tmp_path: Path) -> None:
    """After a crawl with a 404 and a refused connection, the last progress line's
    numbers are the report's: ``done`` its ``Done``, ``error`` and ``fail`` its counters,
    queued and in flight its ``Todo``. The line used to say ``0 errors`` beside a report's
    ``1 error`` (the 404): it counted failures only, under another name."""
    with socket.socket() as probe:  # a port with nobody listening: connections are refused
        probe.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{probe.getsockname()[1]}/down"
    routes = {
        "/": Reply.html(f'<a href="/a">a</a> <a href="/gone">g</a> <a href="{refused}">r</a>')
    }
    report_path = tmp_path / "report.txt"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({**routes, "/a": Reply.html("a page")}) as server:
            with report_path.open("wb") as report_file:
                args = ["--ignore-robots", "--max-tries", "1", server.url()]
                status, drawn = await trio.to_thread.run_sync(run_in_terminal, args, report_file)
    assert status == 0, drawn[-1000:]
    report = report_path.read_text()
    last = drawn.strip().splitlines()[-1]
    line = PROGRESS_LINE.match(last)
    assert line is not None, last
    counters = {
        name: int(count) for count, name in re.findall(r"^ +(\d+) (\w+)$", report, re.MULTILINE)
    }
    assert (counters["error"], counters["status_404"], counters["fail"]) == (1, 1, 1), report
    assert int(line["error"]) == counters["error"]
    assert int(line["fail"]) == counters["fail"]
    assert f"Done: {line['done']}\n" in report, (last, report)
    assert f"Todo: {int(line['queued']) + int(line['in_flight'])}\n" in report, (last, report)


def test_no_progress_turns_it_off_on_a_terminal() -> None:
    status, drawn = run_in_terminal(["--demo", "--no-progress"])
    assert status == 0
    assert "pages/s" not in drawn


@pytest.mark.trio
async def test_progress_is_not_drawn_when_stderr_is_not_a_terminal() -> None:
    with trio.fail_after(HANG_LIMIT):
        result = await run_cli("--demo")
    assert result.returncode == 0
    assert b"pages/s" not in result.stderr


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_limits_show_in_the_report(tmp_path: Path, engine: str) -> None:
    output = tmp_path / "out.jsonl"
    long_link = "/" + "x" * 3000
    chain = {f"/{n}": Reply.html(f'<a href="/{n + 1}">next</a>') for n in range(1, 30)}
    root = Reply.html(
        f'<a href="/1">1</a> <a href="{long_link}">long</a> <a href="/private/">p</a>'
    )
    routes = {**SITE, **chain, "/": root}
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server:
            result = await run_cli(
                *["--engine", engine, "--max-pages", "5", "--max-tasks", "1"],
                *["-o", str(output), server.url()],
            )
    assert result.returncode == 0, result.stderr
    report = result.stdout.decode().splitlines()
    assert report[-1] == "Finish reason: max-pages"
    assert [record["url"] for record in read_records(output)] == [
        server.url(path) for path in ("/", "/1", "/2", "/3", "/4")
    ]
    counters = {line.split()[1]: int(line.split()[0]) for line in report if line.startswith("  ")}
    assert counters["links_too_long"] == 1
    assert counters["robots_disallowed"] == 1
    assert "Todo: 1" in report  # /5 was queued when the limit stopped the crawl


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["-o", "/nonexistent/out.jsonl", "--warc", "ok.warc"],
            "--output '/nonexistent/out.jsonl'",
        ),
        (
            ["-o", "ok.jsonl", "--warc", "/nonexistent/crawl.warc"],
            "--warc '/nonexistent/crawl.warc'",
        ),
    ],
)
@pytest.mark.trio
async def test_an_output_that_cannot_be_opened_is_a_one_line_usage_error(
    tmp_path: Path, args: list[str], message: str
) -> None:
    args = [arg if arg.startswith(("-", "/")) else str(tmp_path / arg) for arg in args]
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": Reply.html("hi")}) as server:
            result = await run_cli(*args, server.url())
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert lines == [f"trio-crawler: error: {message}: No such file or directory"]
    assert server.requests == []


# --- a reader that goes away ----------------------------------------------------------------


@pytest.mark.parametrize("engine", ["trio", "asyncio"])
@pytest.mark.trio
async def test_a_reader_that_goes_away_ends_the_crawl_as_ctrl_c_does(
    tmp_path: Path, engine: str
) -> None:
    """``-o - | head -1`` through a real pipe: the reader takes the first record and closes
    its end while the crawl runs. The next record finds no reader, and the crawl stops as
    after a first Ctrl-C: status 130, the report (on stderr) says so, the WARC file is whole,
    and no traceback."""
    release = trio.Event()
    others = [f"/p{number}" for number in range(50)]

    async def slow(request: Request) -> Reply:
        await release.wait()  # answered once the reader is gone
        return Reply.html("".join(f'<a href="{path}">{path}</a>' for path in others))

    routes: dict[str, Reply | Handler] = {path: Reply.html("a page") for path in others}
    routes.update({"/": Reply.html('<a href="/slow">slow</a>'), "/slow": slow})
    warc = tmp_path / "crawl.warc.gz"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server:
            command = [sys.executable, "-m", "trio_crawler", "--engine", engine, "--no-progress"]
            command += ["--max-tasks", "1", "-o", "-", "--warc", str(warc), server.url()]
            first, process = await first_line_then_close(command, tmp_path / "stderr", release)
    stderr_text = (tmp_path / "stderr").read_text()
    assert json.loads(first.decode().splitlines()[0])["url"] == server.url()
    assert process.returncode == 130, stderr_text
    assert "the reader of <stdout> went away" in stderr_text
    assert "Finish reason: interrupted" in stderr_text
    assert "Traceback" not in stderr_text
    assert "Exception ignored" not in stderr_text
    fetched = [target for target in server.requests if target in others]
    assert len(fetched) < len(others), "the crawl went on after the reader was gone"
    check = warcio_check(warc)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_report_is_written_in_chunks_not_a_line_at_a_time() -> None:
    """With PYTHONUNBUFFERED set, each write() of stdout is a system call: the report, a
    line for every URL, goes out in a few large writes, and whole."""

    class CountingWrites(io.StringIO):
        writes = 0

        def write(self, text: str) -> int:
            self.writes += 1
            return super().write(text)

    lines = [
        f"http://127.0.0.1:8080/p/{n}.html 200 text/html utf-8 4550 9/9\n" for n in range(20_000)
    ]
    text = "".join(lines)
    stream = CountingWrites()
    _write_report(stream, iter(lines))
    assert stream.getvalue() == text
    assert stream.writes <= len(text) // REPORT_CHUNK + 1 < len(lines) // 100
    short = CountingWrites()
    _write_report(short, iter(lines[:3]))
    assert (short.getvalue(), short.writes) == ("".join(lines[:3]), 1)


@pytest.mark.trio
async def test_a_report_into_a_pipe_with_no_reader_is_no_traceback(tmp_path: Path) -> None:
    """The report written to a pipe whose reader is gone (``| true``): status 130, no
    traceback, not even Python's "Exception ignored" as it flushes stdout on the way out,
    and the -o file whole."""
    output = tmp_path / "out.jsonl"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte
    try:
        with trio.fail_after(HANG_LIMIT):
            async with open_test_server({"/": Reply.html('<a href="/a">a</a>')}) as server:
                result = await trio.run_process(
                    [sys.executable, "-m", "trio_crawler", "-o", str(output), server.url()],
                    stdout=write_end,
                    capture_stderr=True,
                    check=False,
                )
    finally:
        os.close(write_end)
    assert result.returncode == 130, result.stderr
    assert result.stderr == b""
    assert [record["url"] for record in read_records(output)] == [
        server.url(),
        server.url("/a"),
    ]

"""The command line as users and scripts see it: real processes, real signals, real servers.

These tests start ``python -m trio_crawler`` as a subprocess, so they run on Trio's real
clock; ``trio.fail_after`` is their hang detector. Where a test must act "while the crawl is
running" it waits for an event the crawl itself causes (the server receiving a request),
never for a guessed amount of time.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from trio_crawler import ConfigError, Crawler
from trio_crawler._cli import ENGINES, HEAP_TOP_PAD
from trio_crawler._cli_args import parse_args
from trio_crawler._demo import build_demo_site

from conftest import CONTRACT_KEYS
from demo_expectations import expected_urls
from httpserver import Reply, Request, open_test_server

HANG_LIMIT = 60  # real seconds; generous for a loaded CI machine


async def run_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "trio_crawler", *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


def read_records(path: Path) -> list[dict[str, object]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert all(list(record) == CONTRACT_KEYS for record in records)
    return records


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--exclude", "("], "--exclude is not a valid regular expression"),
        ([], "no ROOT given"),
        (["--max-tasks", "0"], "--max-tasks must be >= 1, not 0"),
        (["--max_tasks", "many"], "--max-tasks must be a whole number, not 'many'"),
        (["--max-tries", "0"], "--max-tries must be >= 1, not 0"),
        (["--max-redirect", "-1"], "--max-redirect must be >= 0, not -1"),
        (["--timeout", "-3"], "--timeout must be a positive number of seconds, not -3.0"),
        (["--timeout", "nan"], "--timeout must be a positive number of seconds, not nan"),
        (["--max-time", "soon"], "--max-time must be a number, not 'soon'"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
        (["--engine", "twisted"], "--engine must be one of trio, anyio-trio, anyio-asyncio"),
        (["--port", "80"], "--port goes with --serve-demo"),
        (["--demo"], "--demo crawls the demo site; drop the ROOT"),
        (["ftp://example.com/"], "ROOT has 'ftp://example.com/', which is not an http(s) URL"),
    ],
)
@pytest.mark.trio
async def test_usage_error_is_one_line_and_makes_no_request(args: list[str], message: str) -> None:
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": Reply.html("hi")}) as server:
            root = [] if args == [] else [server.url()]
            if args and args[0].startswith("ftp"):
                root = []
            result = await run_cli(*args, *root)
    assert result.returncode == 2
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("trio-crawler: error: ")
    assert message in lines[0]
    assert server.requests == []


@pytest.mark.trio
async def test_an_http_library_not_installed_is_a_one_line_usage_error() -> None:
    with trio.fail_after(HANG_LIMIT):
        result = await trio.run_process(
            [sys.executable, "-m", "trio_crawler", "http://127.0.0.1:9/"],
            env={**os.environ, "TRIO_CRAWLER_HTTP": "urllib3"},
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 2
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("trio-crawler: error: TRIO_CRAWLER_HTTP must name an installed ")
    assert line.endswith(", not 'urllib3'")


def test_an_http_library_not_installed_stops_a_crawler_that_makes_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRIO_CRAWLER_HTTP", "urllib3")
    with pytest.raises(ConfigError, match=r"^TRIO_CRAWLER_HTTP must name"):
        Crawler(["http://127.0.0.1/"])
    # Given a client, the crawler makes none, and the setting does not matter.
    client = httpx.AsyncClient()
    Crawler(["http://127.0.0.1/"], client=client)
    trio.run(client.aclose)


@pytest.mark.trio
async def test_output_file_and_report(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    routes = {"/": Reply.html('<a href="/a">a</a><a href="/gone">g</a>'), "/a": Reply.html("a")}
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server:
            result = await run_cli("-o", str(output), "--max_tasks", "3", server.url())
    assert result.returncode == 0, result.stderr
    records = read_records(output)
    assert {record["url"] for record in records} == {server.url(p) for p in ("/", "/a", "/gone")}
    report = result.stdout.decode().splitlines()
    assert report[0] == "*** Report ***"
    assert report[1:4] == [
        f"{server.url('/')} 200 text/html utf-8 {len(routes['/'].body)} 2/2",
        f"{server.url('/a')} 200 text/html utf-8 1 0/0",
        f"{server.url('/gone')} 404 None None {server_404_size(records)}",
    ]
    assert report[4].startswith("Finished 3 urls in ")
    assert report[4].endswith("urls/sec/task)")
    assert "(max_tasks=3)" in report[4]
    assert "         1 status_404" in report
    assert report[-4:-2] == ["Todo: 0", "Done: 3"]
    assert report[-2].startswith("Date: ")
    assert report[-1] == "Finish reason: finished"
    assert result.stderr == b""  # default log level is WARNING: nothing went wrong


def server_404_size(records: list[dict[str, object]]) -> object:
    [gone] = [record for record in records if str(record["url"]).endswith("/gone")]
    return gone["size"]


@pytest.mark.trio
async def test_output_to_stdout_sends_the_report_to_stderr() -> None:
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": Reply.html("x")}) as server:
            result = await run_cli("-o", "-", "-q", server.url())
    assert result.returncode == 0
    [line] = result.stdout.decode().splitlines()
    assert json.loads(line)["url"] == server.url()
    assert result.stderr.decode().startswith("*** Report ***")


@pytest.mark.trio
async def test_verbose_logs_info_to_stderr() -> None:
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": Reply.html("x")}) as server:
            server.drop_first("/", 1)
            result = await run_cli("-v", server.url())
    assert result.returncode == 0
    assert f"try 1 for {server.url()} raised RemoteProtocolError" in result.stderr.decode()
    assert "*** Report ***" in result.stdout.decode()


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_max_time_exits_0_with_a_deadline_report(tmp_path: Path, engine: str) -> None:
    output = tmp_path / "out.jsonl"

    async def never(request: Request) -> Reply:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

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

    async def never(request: Request) -> Reply:
        slow_page_requested.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

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


def test_help_and_version() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "trio_crawler", "--help"], capture_output=True, check=True, text=True
    ).stdout
    for option in ("--max-redirect", "--max-tries", "--max-tasks", "--exclude", "--lenient"):
        assert option in help_text
    version = subprocess.run(
        [Path(sys.executable).with_name("trio-crawler"), "--version"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert version.startswith("trio-crawler ")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["x.com"], {"max_tasks": 100, "max_tries": 4, "max_redirect": 10, "strict": True}),
        (
            ["--max_tasks", "5", "--max_tries", "2", "--max_redirect", "1", "x.com"],
            {"max_tasks": 5, "max_tries": 2, "max_redirect": 1},
        ),
        (
            ["--max-tasks", "6", "--lenient", "--timeout", "2.5", "--max-time", "9", "x.com"],
            {"max_tasks": 6, "strict": False, "timeout": 2.5, "max_time": 9.0},
        ),
    ],
)
def test_options_and_chapter_aliases(argv: list[str], expected: dict[str, object]) -> None:
    options = parse_args(argv)
    assert options.roots == ("x.com",)
    assert {key: getattr(options.crawl, key) for key in expected} == expected


# In a fresh process: allocate and free 12.5 MiB of heap blocks, then ask glibc how much
# free memory it kept at the top of the heap (mallinfo2's keepcost).
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
blocks = [bytearray(64 * 1024) for _ in range(200)]  # below the mmap threshold: on the heap
del blocks
print(libc.mallinfo2().keepcost)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="mallopt's M_TOP_PAD and mallinfo2 are glibc's",
)
def test_the_command_line_keeps_a_pad_at_the_top_of_the_heap() -> None:
    def kept(mode: str) -> int:
        done = subprocess.run(
            [sys.executable, "-c", _KEPT_AT_THE_TOP, mode],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return int(done.stdout)

    assert kept("pad") >= HEAP_TOP_PAD > kept("default")

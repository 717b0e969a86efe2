"""The command line's archive, progress display, limits and help, as a user meets them.

Like test_cli.py, these run ``python -m trio_crawler`` as a subprocess against a real
server on 127.0.0.1, on every engine where the engine could make a difference. The WARC
file is checked with warcio's own reader and its ``check`` command; the progress display
is checked in a real pseudo-terminal, since it is only drawn on one.
"""

from __future__ import annotations

import functools
import json
import os
import pty
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from warcio.archiveiterator import ArchiveIterator

from trio_crawler._cli import ENGINES

from conftest import CONTRACT_KEYS
from httpserver import DropConnection, Reply, Request, open_test_server

HANG_LIMIT = 60  # real seconds; generous for a loaded CI machine
WARCIO = str(Path(sys.executable).with_name("warcio"))


async def run_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "trio_crawler", *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


def read_records(path: Path) -> list[dict[str, object]]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert all(list(record) == CONTRACT_KEYS for record in records)
    return records


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

    async def never(request: Request) -> Reply:
        hanging.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

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


def run_in_terminal(args: list[str]) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal; return its status and what it drew."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "trio_crawler", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
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
    for label in ("done", "queued", "in flight", "pages/s", "errors"):
        assert label in drawn, drawn[-500:]
    # The last line drawn is the finished crawl: every demo page done, nothing queued.
    last = drawn.strip().splitlines()[-1]
    assert last.startswith("333 done  0 queued  0 in flight"), last


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


def test_help_groups_options_and_ends_with_examples() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "trio_crawler", "--help"], capture_output=True, check=True, text=True
    ).stdout
    groups = ["what to crawl:", "limits:", "manners:", "output:", "examples:"]
    positions = [help_text.index(group) for group in groups]
    assert positions == sorted(positions)
    for option, default in [
        ("--max-size", "(default 10485760)"),
        ("--grace", "(default 5)"),
        ("--timeout", "(default 10)"),
        ("--max-tasks", "(default 100)"),
        ("--user-agent", "(default trio-crawler/"),
    ]:
        assert option in help_text
        assert default in help_text
    for option in ("--ignore-robots", "--max-per-host", "--delay", "--warc", "--no-progress"):
        assert option in help_text
    examples = help_text[help_text.index("examples:") :]
    assert examples.count("trio-crawler ") >= 3


def test_version_names_the_http_library() -> None:
    version = subprocess.run(
        [sys.executable, "-m", "trio_crawler", "--version"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert version.startswith("trio-crawler ")
    assert "httpx" in version


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

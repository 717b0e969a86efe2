"""``--handler`` and ``--items`` on the command line, run as a user runs them.

What docs/handler.md promises of the command: a handler is named ``PATH.py:NAME`` or
``package.module:NAME`` and loaded before anything runs (a spec that cannot be loaded is
a usage error: exit 2, one line, no file touched); ``--items FILE`` gets the items as JSON
lines (``-`` is stdout, and the report then goes to stderr); Ctrl-C cancels a running
handler as it cancels a fetch, and the page it ran on has neither record nor item.

Real processes and a real SIGINT, against the test's own server; the test waits for what
the child does (a request to the server), never for a time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trio_crawler._cli import ENGINES

from httpserver import Reply, Request, open_test_server
from support import HANG_LIMIT, first_line_then_close, page, read_records, run_cli

HANDLERS = '''
import httpx
import anyio


def items_of(page):
    """One item per link: what the page links to, in page order."""
    return [{"page": page.url, "link": link} for link in page.links]


def takes_two(page, other):
    return None


async def waits_on_slow(page):
    """On /slow, tell the server it started, then wait until cancelled."""
    if page.url.endswith("/slow"):
        async with httpx.AsyncClient() as client:
            await client.get(page.url.replace("/slow", "/handler-started"))
        await anyio.sleep_forever()
    return {"url": page.url}
'''

SITE = {
    "/": page("/a", "/b"),
    "/a": page("/b", "/missing"),
    "/b": page("/"),
}


@pytest.fixture
def handlers(tmp_path: Path) -> Path:
    path = tmp_path / "handlers.py"
    path.write_text(HANDLERS, encoding="utf-8")
    return path


def crawl_command(*args: str) -> list[str]:
    return ["--no-progress", "--ignore-robots", *args]


@pytest.mark.trio
async def test_items_of_a_file_handler_go_to_the_items_file(tmp_path: Path, handlers: Path) -> None:
    items, output = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    async with open_test_server(SITE) as server:
        run = await run_cli(
            *crawl_command("--handler", f"{handlers}:items_of", "--items", str(items)),
            "-o",
            str(output),
            server.url(),
        )
    assert run.returncode == 0, run.stderr
    records = read_records(output)
    pages = [str(r["url"]) for r in records if r["content_type"] == "text/html"]
    lines = [json.loads(line) for line in items.read_text().splitlines()]
    # Each page's links in page order, the pages in the order they finished.
    assert [(item["page"], item["link"]) for item in lines] == [
        (url, link)
        for url in pages
        for link in {
            server.url(): [server.url("/a"), server.url("/b")],
            server.url("/a"): [server.url("/b"), server.url("/missing")],
            server.url("/b"): [server.url()],
        }[url]
    ]
    assert b"Finish reason: finished" in run.stdout


@pytest.mark.trio
async def test_items_to_stdout_send_the_report_to_stderr(tmp_path: Path, handlers: Path) -> None:
    module = tmp_path / "site_handlers.py"
    module.write_text(HANDLERS, encoding="utf-8")
    environment = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    async with open_test_server(SITE) as server:
        run = await run_cli(
            *crawl_command("--handler", "site_handlers:items_of", "--items", "-"),
            server.url(),
            env=environment,
        )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.decode().splitlines()
    assert len(lines) == 5
    assert all(set(json.loads(line)) == {"page", "link"} for line in lines)
    assert b"*** Report ***" in run.stderr
    assert b"Finish reason: finished" in run.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--handler", "nothing"], "--handler must be PATH.py:NAME or package.module:NAME, not "),
        (["--handler", "{dir}/absent.py:f"], "--handler '{dir}/absent.py:f': no such file"),
        (["--handler", "no_such_module_here:f"], "no module named 'no_such_module_here'"),
        (["--handler", "{handlers}:nope"], "handlers.py has no 'nope'"),
        (["--handler", "{dir}/broken.py:f"], "syntax error in {dir}/broken.py, line 2: "),
        (["--handler", "{dir}/raises.py:f"], "importing {dir}/raises.py raised ZeroDivisionError"),
        (["--handler", "{handlers}:takes_two"], "--handler must take one argument, the page, not "),
        (["--handler", "{handlers}:HANDLERS"], "--handler must be a function taking the page"),
        (["--items", "{dir}/i.jsonl"], "--items '{dir}/i.jsonl' writes what --handler returns"),
        (
            ["--handler", "{handlers}:items_of", "--items", "-", "-o", "-"],
            "-o - and --items - cannot both write to stdout",
        ),
        (
            ["--handler", "{handlers}:items_of", "--items", "{dir}/no/such/dir/i.jsonl"],
            "--items '{dir}/no/such/dir/i.jsonl': No such file or directory",
        ),
    ],
    ids=[
        "no-name",
        "no-file",
        "no-module",
        "no-such-name",
        "syntax-error",
        "raises-on-import",
        "two-arguments",
        "not-callable",
        "items-without-handler",
        "both-on-stdout",
        "items-directory-missing",
    ],
)
def test_a_handler_that_cannot_be_loaded_is_a_usage_error_touching_nothing(
    tmp_path: Path, handlers: Path, args: list[str], message: str
) -> None:
    (tmp_path / "broken.py").write_text("def f(page):\n    return {\n", encoding="utf-8")
    (tmp_path / "raises.py").write_text("1 / 0\n", encoding="utf-8")
    handlers.write_text(HANDLERS + "\nHANDLERS = 3\n", encoding="utf-8")
    before = sorted(tmp_path.iterdir())
    output = tmp_path / "out.jsonl"

    def filled(text: str) -> str:
        return text.format(dir=tmp_path, handlers=handlers)

    outputs = [] if "-o" in args else ["-o", str(output)]
    run = subprocess.run(
        [
            *(sys.executable, "-m", "trio_crawler"),
            *[filled(arg) for arg in args],
            *outputs,
            *("--state", str(tmp_path / "s.db"), "http://127.0.0.1:9/"),
        ],
        capture_output=True,
        timeout=HANG_LIMIT,
        check=False,
    )
    lines = run.stderr.decode().splitlines()
    assert run.returncode == 2, run.stderr
    assert len(lines) == 1, lines
    assert lines[0].startswith("trio-crawler: error: "), lines
    assert filled(message) in lines[0]
    assert run.stdout == b""
    assert sorted(tmp_path.iterdir()) == before  # no -o, no state file, no items file


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_ctrl_c_cancels_a_running_handler_like_a_fetch(
    tmp_path: Path, handlers: Path, engine: str
) -> None:
    """SIGINT while a handler waits: after the grace it is cancelled; its page has neither
    record nor item, every other page has both, and the exit is 130."""
    started = trio.Event()

    async def handler_started(request: Request) -> Reply:
        started.set()
        return Reply.html("ok")

    routes = {
        "/": page("/a", "/slow"),
        "/a": page(),
        "/slow": page(),
        "/handler-started": handler_started,
    }
    items, output = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server:
            args = [
                sys.executable, "-m", "trio_crawler", *crawl_command(), "--engine", engine,
                "--handler", f"{handlers}:waits_on_slow", "--items", str(items),
                "-o", str(output), "--grace", "0.2", server.url(),
            ]  # fmt: skip
            process = await trio.lowlevel.open_process(
                args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            streams: dict[str, str] = {}
            try:
                async with trio.open_nursery() as nursery:
                    assert process.stdout is not None
                    assert process.stderr is not None
                    nursery.start_soon(_read_all, process.stdout, streams, "stdout")
                    nursery.start_soon(_read_all, process.stderr, streams, "stderr")
                    await started.wait()
                    process.send_signal(signal.SIGINT)
                    await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
                    with trio.CancelScope(shield=True):
                        await process.wait()
                for stream in (process.stdout, process.stderr):
                    if stream is not None:
                        await stream.aclose()
    stdout, stderr = streams["stdout"], streams["stderr"]
    assert process.returncode == 130, stderr
    assert "Finish reason: interrupted" in stdout
    assert "Traceback" not in stderr
    recorded = {str(record["url"]) for record in read_records(output)}
    assert server.url("/slow") not in recorded
    assert {server.url(), server.url("/a")} <= recorded
    itemised = [json.loads(line)["url"] for line in items.read_text().splitlines()]
    assert sorted(itemised) == sorted(url for url in recorded if not url.endswith("robots.txt"))


async def _read_all(stream: trio.abc.ReceiveStream, into: dict[str, str], name: str) -> None:
    received = bytearray()
    while chunk := await stream.receive_some():
        received += chunk
    into[name] = received.decode()


@pytest.mark.trio
async def test_a_reader_of_the_items_that_goes_away_ends_the_crawl_as_ctrl_c_does(
    tmp_path: Path, handlers: Path
) -> None:
    """``--items - | head -1`` through a real pipe: once the reader has its line and
    closes its end, the next page's items find no reader and the crawl stops as after a
    first Ctrl-C: status 130, the report (on stderr) says so, no traceback."""
    release = trio.Event()
    others = [f"/p{number}" for number in range(50)]

    async def slow(request: Request) -> Reply:
        await release.wait()  # answered once the reader is gone
        return Reply.html("".join(f'<a href="{path}">{path}</a>' for path in others))

    routes = {path: page("/") for path in others}
    routes.update({"/": page("/slow"), "/slow": slow})
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server:
            command = [sys.executable, "-m", "trio_crawler", *crawl_command("--max-tasks", "1")]
            command += ["--handler", f"{handlers}:items_of", "--items", "-", server.url()]
            first, process = await first_line_then_close(command, tmp_path / "stderr", release)
    stderr_text = (tmp_path / "stderr").read_text()
    assert json.loads(first.decode().splitlines()[0]) == {
        "page": server.url(),
        "link": server.url("/slow"),
    }
    assert process.returncode == 130, stderr_text
    assert "the reader of <stdout> went away" in stderr_text
    assert "Finish reason: interrupted" in stderr_text
    assert "Traceback" not in stderr_text
    fetched = [target for target in server.hits if target in others]
    assert len(fetched) < len(others), "the crawl went on after the reader was gone"

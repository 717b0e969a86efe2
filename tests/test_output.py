"""JSON Lines output (``_output.py``) as the command writes it: ``-o FILE`` and ``-o -``.

Each test runs ``python -m trio_crawler`` as a subprocess against a real server on
127.0.0.1 and reads the records back with :func:`support.read_records`, which checks that
each is a whole line with the record's keys in order. An output that cannot be opened is a
usage error (test_cli.py); a file interrupted at any moment is test_signals.py's subject.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from httpserver import Reply, open_test_server
from support import HANG_LIMIT, read_records, run_cli


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

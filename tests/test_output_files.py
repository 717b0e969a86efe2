"""The files a run writes, through the command line, checked byte for byte.

One road takes records to ``-o`` and exchanges to ``--warc`` (trio_crawler/_output.py):
a run that is refused (exit 2) creates, truncates or appends to nothing, whatever refused
it; a crawl in memory writes its files from the start; a shared crawl's process appends to
its files, cutting off a partial last line first. Each test here is a behaviour a user
found broken: a refused ``--frontier`` start emptied ``-o`` and ``--warc``, a restarted
cluster process truncated its ``-o``, and a refused ``--state`` run appended a warcinfo
record to the ``--warc`` file of the crawl that held the state file.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
import trio
from redis_server import RedisServer, free_port

from httpserver import open_test_server
from support import HANG_LIMIT, page, read_records, run_cli

EXISTING_LINES = b'{"url": "http://before/", "note": "a record an earlier run wrote"}\n'
EXISTING_WARC = b"WARC/1.1\r\nWARC-Type: warcinfo\r\n\r\nbytes an earlier run wrote"


def existing_files(tmp_path: Path) -> tuple[Path, Path]:
    output, warc = tmp_path / "out.jsonl", tmp_path / "crawl.warc"
    output.write_bytes(EXISTING_LINES)
    warc.write_bytes(EXISTING_WARC)
    return output, warc


def assert_untouched(output: Path, warc: Path) -> None:
    assert output.read_bytes() == EXISTING_LINES
    assert warc.read_bytes() == EXISTING_WARC


@pytest.mark.trio
async def test_a_frontier_that_cannot_be_reached_changes_no_file(tmp_path: Path) -> None:
    output, warc = existing_files(tmp_path)
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    with trio.fail_after(HANG_LIMIT):
        run = await run_cli(
            "--frontier", nowhere, "-o", str(output), "--warc", str(warc), "http://127.0.0.1:9/"
        )
    assert run.returncode == 2, run.stderr
    assert run.stderr.decode().count("\n") == 1, run.stderr
    assert b"cannot reach" in run.stderr
    assert run.stdout == b""  # no report of a crawl that never started
    assert_untouched(output, warc)


@pytest.mark.trio
async def test_a_frontier_holding_other_roots_changes_no_file(
    tmp_path: Path, redis: RedisServer
) -> None:
    output, warc = existing_files(tmp_path)
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.route("/", page())
            first = await run_cli("--frontier", redis.url(), "--ignore-robots", http.url("/"))
            assert first.returncode == 0, first.stderr
            other = await run_cli(
                "--frontier", redis.url(), "-o", str(output), "--warc", str(warc),
                http.url("/other"),
            )  # fmt: skip
    assert other.returncode == 2, other.stderr
    assert b"other roots" in other.stderr
    assert_untouched(output, warc)


@pytest.mark.trio
async def test_a_refused_state_file_changes_no_output_file(tmp_path: Path) -> None:
    output, warc = existing_files(tmp_path)
    state = tmp_path / "foreign.db"
    state.write_bytes(b"not a state file at all")
    with trio.fail_after(HANG_LIMIT):
        run = await run_cli(
            "--state", str(state), "-o", str(output), "--warc", str(warc), "http://127.0.0.1:9/"
        )
    assert run.returncode == 2, run.stderr
    assert b"not a trio-crawler state file" in run.stderr
    assert_untouched(output, warc)
    assert state.read_bytes() == b"not a state file at all"


@pytest.mark.trio
async def test_a_state_file_in_use_leaves_the_running_crawls_archive_alone(
    tmp_path: Path,
) -> None:
    """The second run of a crawl whose state file another process holds is refused, and
    must not write into that crawl's WARC file (which it names too)."""
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.route("/", page())
            state = tmp_path / "crawl.db"
            done = await run_cli("--state", str(state), "--ignore-robots", http.url("/"))
            assert done.returncode == 0, done.stderr
            output, warc = existing_files(tmp_path)
            holder = os.open(state, os.O_RDWR)
            try:
                fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running crawl does
                run = await run_cli(
                    "--state", str(state), "-o", str(output), "--warc", str(warc), http.url("/")
                )
            finally:
                os.close(holder)
    assert run.returncode == 2, run.stderr
    assert b"in use by a running crawl" in run.stderr
    assert_untouched(output, warc)


@pytest.mark.trio
async def test_a_crawl_in_memory_writes_its_files_from_the_start(tmp_path: Path) -> None:
    output, warc = existing_files(tmp_path)
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.route("/", page("/a"))
            http.route("/a", page())
            run = await run_cli(
                "--ignore-robots", "-o", str(output), "--warc", str(warc), http.url("/")
            )
    assert run.returncode == 0, run.stderr
    assert [record["url"] for record in read_records(output)] == [http.url("/"), http.url("/a")]
    assert warc.read_bytes().startswith(b"WARC/1.1\r\n")
    assert EXISTING_WARC not in warc.read_bytes()


@pytest.mark.trio
async def test_a_shared_crawls_process_appends_and_cuts_a_partial_last_line(
    tmp_path: Path, redis: RedisServer
) -> None:
    """A process restarted with its own command (after a kill left half a line) keeps
    every record it wrote before: the union of outputs never loses one."""
    output = tmp_path / "out.jsonl"
    partial = b'{"url": "http://cut/", "next_u'
    output.write_bytes(EXISTING_LINES + partial)
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.route("/", page("/a"))
            http.route("/a", page())
            run = await run_cli(
                "--frontier", redis.url(), "--ignore-robots", "-o", str(output), http.url("/")
            )
            assert run.returncode == 0, run.stderr
            again = await run_cli("--frontier", redis.url(), "-o", str(output), http.url("/"))
    assert again.returncode == 0, again.stderr
    content = output.read_bytes()
    assert content.startswith(EXISTING_LINES)
    assert partial not in content
    lines = content[len(EXISTING_LINES) :].decode().splitlines()
    assert sorted(line.split('"')[3] for line in lines) == [http.url("/"), http.url("/a")]

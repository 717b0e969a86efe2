"""A shared crawl slows a host down together: three processes on one rate-limited host
through Redis provoke no more pushback than one process does.

Each crawl is real processes (``python -m trio_crawler --frontier``) against
tests/pushback_server.py on the real clock, the server counting every answer.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from redis_server import RedisServer

from pushback_server import Metrics, PushbackOptions, open_pushback_server
from support import read_records

OPTIONS = PushbackOptions(hosts=1, pages=60, rate=20.0, burst=5, cap=4)


async def crawl(processes: int, redis: RedisServer, tmp_path: Path, name: str) -> Metrics:
    """``processes`` processes on one shared crawl of the server's one host."""
    async with open_pushback_server(OPTIONS) as server:
        outputs = [tmp_path / f"{name}-{index}.jsonl" for index in range(processes)]
        runs: list[subprocess.CompletedProcess[bytes]] = []

        async def one(output: Path) -> None:
            args = [sys.executable, "-m", "trio_crawler", "--frontier", redis.url()]
            args += ["--crawl-id", name, "--no-progress", "-q", "-o", str(output)]
            run = functools.partial(
                trio.run_process,
                [*args, *server.roots],
                check=False,
                capture_stdout=True,
                capture_stderr=True,
            )
            runs.append(await run())

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for output in outputs:
                    nursery.start_soon(one, output)
        context = "\n".join(run.stderr.decode() for run in runs)
        assert all(run.returncode == 0 for run in runs), context
        urls = [record["url"] for output in outputs for record in read_records(output, context)]
        assert len(urls) == len(set(urls)) == OPTIONS.pages, context
        return server.metrics()


@pytest.mark.trio
async def test_three_processes_provoke_no_more_pushback_than_one(
    tmp_path: Path, redis: RedisServer
) -> None:
    one = await crawl(1, redis, tmp_path, "one")
    three = await crawl(3, redis, tmp_path, "three")
    assert one.all_pages_ok
    assert three.all_pages_ok
    # The server holds one window and one gap for the host, however many processes lease
    # from it (measured: 3 pushback answers of 64 requests, one process or three, none
    # inside a Retry-After); a request in flight when the first cut comes is the slack.
    assert three.pushback <= one.pushback + 2, (one, three)
    assert three.inside_retry_after <= one.inside_retry_after + 1, (one, three)
    assert three.pushback_share <= 0.15, three

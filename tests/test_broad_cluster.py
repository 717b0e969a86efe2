"""A broad crawl shared by three processes that start at once: many hosts, each kept to its
delay as its own server sees it, every page and every robots.txt fetched once.

``tests/test_broad.py`` runs the broad crawl in one process on every store. Here the store
is a real Redis server shared by three real processes, which start in a random order a
fraction of a second apart, so that processes with no ROOT sometimes ask for the crawl
before the one with the ROOTs has made it, and sometimes after: whoever comes first, the
hosts' servers must see one robots.txt and one request per page, a delay apart. Each host
is a test server on its own loopback address; the times checked are the servers' own.

A soak: ``BROAD_CLUSTER_ROUNDS`` rounds (2 by default, a few seconds each), each with its
own engines, start order and offsets drawn from ``BROAD_CLUSTER_SEED`` and its number. Set
the count in the thousands, and a new seed, to soak.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path

import pytest
import trio
from redis_server import running_redis
from sites import Run, run_child

from trio_crawler._cli import ENGINES

from httpserver import Reply, Request, open_test_server
from support import HANG_LIMIT, page, read_records

SEED = int(os.environ.get("BROAD_CLUSTER_SEED", "20261128"))
ROUNDS = int(os.environ.get("BROAD_CLUSTER_ROUNDS", "2"))
HOSTS = 8
PAGES = 4  # a host's root and its pages /p1, /p2, /p3, in a chain
DELAY = 0.2
# The most a start may be put off, so that a joiner may ask before the crawl exists or
# after it is under way.
STAGGER = 0.4
# As in test_cluster: the test servers' loop timestamps each request late or early by its
# own scheduling, which the crawler cannot see.
SLACK = 0.01
ROBOTS = b"User-agent: *\nDisallow: /private\n"


async def serve_hosts(
    stack: contextlib.AsyncExitStack, rng: random.Random
) -> tuple[list[str], dict[str, list[tuple[float, str]]]]:
    """HOSTS servers, each with a robots.txt that disallows /private, a root that links to
    it, a chain of pages and a link to another host's root; their roots, and each server's
    arrivals (time, target) as it saw them."""
    arrivals: dict[str, list[tuple[float, str]]] = defaultdict(list)
    servers = [
        await stack.enter_async_context(open_test_server(host=f"127.0.0.{index + 2}"))
        for index in range(HOSTS)
    ]
    roots = [server.url() for server in servers]
    for server in servers:
        elsewhere = rng.choice(roots)

        async def handle(
            request: Request, host: str = server.url(), other: str = elsewhere
        ) -> Reply:
            arrivals[host].append((trio.current_time(), request.target))
            if request.target == "/robots.txt":
                return Reply(status=200, headers=(("content-type", "text/plain"),), body=ROBOTS)
            if request.target == "/":
                return page("/p1", "/private", other)
            number = int(request.target.removeprefix("/p"))
            return page(f"/p{number + 1}") if number + 1 < PAGES else page("/", other)

        server.fallback(handle)
    return roots, arrivals


def command(engine: str, frontier: str, crawl_id: str, output: Path, roots: list[str]) -> list[str]:
    return [
        sys.executable,
        *("-m", "trio_crawler", "--engine", engine, "--frontier", frontier),
        *("--crawl-id", crawl_id, "--no-progress", "-v", "--max-tasks", "4"),
        *("--delay", str(DELAY), "--max-per-host", "1", "-o", str(output), *roots),
    ]


@pytest.mark.parametrize("number", range(ROUNDS))
@pytest.mark.trio
async def test_three_processes_started_at_once_share_a_broad_crawl(
    tmp_path: Path, number: int
) -> None:
    """Three processes, on engines and at offsets drawn from the round's seed: each host's
    server sees its robots.txt first and once, each page once, a delay apart; every
    process finishes the crawl, and their outputs hold one record per page."""
    rng = random.Random(f"{SEED}-{number}")
    engines = rng.choices(list(ENGINES), k=3)
    holder = rng.randrange(3)  # the process given the ROOTs; the others join
    offsets = [rng.uniform(0, STAGGER) for _ in engines]
    outputs = [tmp_path / f"out-{index}.jsonl" for index in range(3)]
    runs: list[Run | None] = [None] * 3
    with trio.fail_after(HANG_LIMIT), running_redis(tmp_path / "redis") as redis:
        async with contextlib.AsyncExitStack() as stack:
            roots, arrivals = await serve_hosts(stack, rng)

            async def one(index: int) -> None:
                await trio.sleep(offsets[index])  # the start order under test, not a wait
                given = roots if index == holder else []
                args = command(engines[index], redis.url(), "broad", outputs[index], given)
                runs[index] = await run_child(args, tmp_path, name=f"p{index}")

            async with trio.open_nursery() as nursery:
                for index in range(3):
                    nursery.start_soon(one, index)
    done = [run for run in runs if run is not None]
    starts = [round(offset, 3) for offset in offsets]
    lines = [f"p{index} ({engines[index]}): {run}" for index, run in enumerate(runs)]
    context = "\n".join(
        [f"seed {SEED} round {number}: ROOTs to p{holder}, starts {starts} s", *lines]
    )
    assert len(done) == 3, context
    for run in done:
        assert run.returncode == 0, context
        assert "Finish reason: finished" in run.stdout, context
    expected = {"/robots.txt", "/", *(f"/p{page_number}" for page_number in range(1, PAGES))}
    assert sorted(arrivals) == sorted(roots), context
    for host, seen in arrivals.items():
        counts = Counter(target for _, target in seen)
        assert counts == Counter(expected), f"{host} served {dict(counts)}: {context}"
        assert seen[0][1] == "/robots.txt", f"{host} first served {seen[0][1]}: {context}"
        gaps = [later - earlier for (earlier, _), (later, _) in pairwise(seen)]
        assert min(gaps) >= DELAY - SLACK, f"{host}: requests {min(gaps):.3f} s apart: {context}"
    urls: list[str] = []
    for output in outputs:
        if output.exists():
            urls += [str(record["url"]) for record in read_records(output, context)]
    pages = {root + target.removeprefix("/") for root in roots for target in expected}
    assert Counter(urls) == Counter(pages - {root + "robots.txt" for root in roots}), context

"""A broad crawl shared by three processes that start at once: many hosts, each kept to its
delay as its own server sees it, every page and every robots.txt fetched once.

``tests/test_broad.py`` runs the broad crawl in one process on every store. Here the store
is a real Redis server shared by three real processes, which start in a random order a
fraction of a second apart, so that processes with no ROOT sometimes ask for the crawl
before the one with the ROOTs has made it, and sometimes after: whoever comes first, the
hosts' servers must see one robots.txt and one request per page, a delay apart. Each host
is a test server on its own loopback address; the times checked are the servers' own.

A second test kills one of the three with SIGKILL after a drawn number of requests: the
others finish once its leases run out, with duplicates only for what it held and still no
two requests to a host closer than the delay.

A soak: ``BROAD_CLUSTER_ROUNDS`` rounds (2 by default, a few seconds each) and
``BROAD_CLUSTER_KILLS`` rounds with a kill (1 by default), each with its own engines, start
order and offsets drawn from ``BROAD_CLUSTER_SEED`` and its number. Set the counts in the
hundreds or thousands, and a new seed, to soak.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import pytest
import trio
from redis_server import running_redis
from sites import Run, run_child
from test_cluster import command as cluster_command

from trio_crawler._cli import ENGINES

from httpserver import Reply, Request, open_hosts
from support import HANG_LIMIT, page, read_records

SEED = int(os.environ.get("BROAD_CLUSTER_SEED", "20261128"))
ROUNDS = int(os.environ.get("BROAD_CLUSTER_ROUNDS", "2"))
KILL_ROUNDS = int(os.environ.get("BROAD_CLUSTER_KILLS", "1"))
HOSTS = 8
PAGES = 4  # a host's root and its pages /p1, /p2, /p3, in a chain
DELAY = 0.2
MAX_TASKS = 4  # what test_cluster's command gives each process
# What each host serves: robots.txt, its root and its pages.
TARGETS = ["/robots.txt", "/", *(f"/p{number}" for number in range(1, PAGES))]
# The most a start may be put off, so that a joiner may ask before the crawl exists or
# after it is under way.
STAGGER = 0.4
# As in test_cluster: the test servers' loop timestamps each request late or early by its
# own scheduling, which the crawler cannot see.
SLACK = 0.01
ROBOTS = b"User-agent: *\nDisallow: /private\n"


async def serve_hosts(
    stack: contextlib.AsyncExitStack,
    rng: random.Random,
    *,
    count: tuple[int, trio.Event] | None = None,
) -> tuple[list[str], dict[str, list[tuple[float, str]]]]:
    """HOSTS servers, each with a robots.txt that disallows /private, a root that links to
    it, a chain of pages and a link to another host's root; their roots, and each server's
    arrivals (time, target) as it saw them. With ``count`` = (n, event), the event is set
    once the servers together have seen n requests."""
    arrivals: dict[str, list[tuple[float, str]]] = defaultdict(list)
    seen = 0
    servers = await open_hosts(stack, HOSTS)
    roots = [server.url() for server in servers]
    for server in servers:
        elsewhere = rng.choice(roots)

        async def handle(
            request: Request, host: str = server.url(), other: str = elsewhere
        ) -> Reply:
            nonlocal seen
            arrivals[host].append((trio.current_time(), request.target))
            seen += 1
            if count is not None and seen >= count[0]:
                count[1].set()
            if request.target == "/robots.txt":
                return Reply(status=200, headers=(("content-type", "text/plain"),), body=ROBOTS)
            if request.target == "/":
                return page("/p1", "/private", other)
            number = int(request.target.removeprefix("/p"))
            return page(f"/p{number + 1}") if number + 1 < PAGES else page("/", other)

        server.fallback(handle)
    return roots, arrivals


def command(engine: str, frontier: str, output: Path, roots: list[str], *extra: str) -> list[str]:
    """test_cluster's command for one process of the shared crawl, paced by the delay."""
    paced = ("--delay", str(DELAY), "--max-per-host", "1")
    return cluster_command(
        engine, frontier, output, "--crawl-id", "broad", "-v", *paced, *extra, *roots
    )


@dataclass
class Round:
    """One round's draw from the seed, and what its processes and servers did."""

    number: int
    engines: list[str]
    holder: int  # the process given the ROOTs; the others join
    offsets: list[float]
    runs: list[Run | None] = field(default_factory=lambda: [None, None, None])
    roots: list[str] = field(default_factory=list)
    arrivals: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    records: list[str] = field(default_factory=list)  # the URLs of every output's records

    @property
    def context(self) -> str:
        starts = [round(offset, 3) for offset in self.offsets]
        lines = [f"p{index} ({self.engines[index]}): {run}" for index, run in enumerate(self.runs)]
        return "\n".join(
            [f"seed {SEED} round {self.number}: ROOTs to p{self.holder}, starts {starts} s", *lines]
        )

    def pages(self) -> set[str]:
        return {root + target.removeprefix("/") for root in self.roots for target in TARGETS[1:]}


async def run_round(
    tmp_path: Path, number: int, *, kill: tuple[int, int] | None = None, extra: tuple[str, ...] = ()
) -> Round:
    """Run one round: three processes started at the drawn offsets; with ``kill`` = (index,
    request count), SIGKILL that process once the servers together have seen that many
    requests."""
    rng = random.Random(f"{SEED}-{number}")
    engines = rng.choices(list(ENGINES), k=3)
    this = Round(number, engines, rng.randrange(3), [rng.uniform(0, STAGGER) for _ in engines])
    outputs = [tmp_path / f"out-{index}.jsonl" for index in range(3)]
    counted = trio.Event()
    with trio.fail_after(HANG_LIMIT), running_redis(tmp_path / "redis") as redis:
        async with contextlib.AsyncExitStack() as stack:
            this.roots, this.arrivals = await serve_hosts(
                stack, rng, count=None if kill is None else (kill[1], counted)
            )

            async def one(index: int) -> None:
                await trio.sleep(this.offsets[index])  # the start order under test, not a wait
                given = this.roots if index == this.holder else []
                args = command(engines[index], redis.url(), outputs[index], given, *extra)
                killed = kill is not None and kill[0] == index
                this.runs[index] = await run_child(
                    args,
                    tmp_path,
                    name=f"p{index}",
                    send=signal.SIGKILL if killed else None,
                    when=counted,
                )

            async with trio.open_nursery() as nursery:
                for index in range(3):
                    nursery.start_soon(one, index)
    for output in outputs:
        if output.exists():
            this.records += [str(record["url"]) for record in read_records(output, this.context)]
    return this


@pytest.mark.parametrize("number", range(ROUNDS))
@pytest.mark.trio
async def test_three_processes_started_at_once_share_a_broad_crawl(
    tmp_path: Path, number: int
) -> None:
    """Three processes, on engines and at offsets drawn from the round's seed: each host's
    server sees its robots.txt first and once, each page once, a delay apart; every
    process finishes the crawl, and their outputs hold one record per page."""
    this = await run_round(tmp_path, number)
    context = this.context
    for run in this.runs:
        assert run is not None, context
        assert run.returncode == 0, context
        assert "Finish reason: finished" in run.stdout, context
    assert sorted(this.arrivals) == sorted(this.roots), context
    for host, seen in this.arrivals.items():
        counts = Counter(target for _, target in seen)
        assert counts == Counter(TARGETS), f"{host} served {dict(counts)}: {context}"
        assert seen[0][1] == "/robots.txt", f"{host} first served {seen[0][1]}: {context}"
        assert_spaced(host, seen, context)
    assert Counter(this.records) == Counter(this.pages()), context


@pytest.mark.parametrize("number", range(KILL_ROUNDS))
@pytest.mark.trio
async def test_a_process_killed_in_a_broad_crawl_costs_only_what_it_held(
    tmp_path: Path, number: int
) -> None:
    """One of the three, drawn from the seed, is killed with SIGKILL after a drawn number
    of requests. The others finish the crawl once its leases run out (2 s here). Every
    page is fetched and has a record. A page is fetched twice only if the killed process
    had it in flight or waiting for its call, at most --max-tasks of them. No host sees
    two requests closer than the delay: a lease that ran out holds its host a delay."""
    rng = random.Random(f"{SEED}-kill-{number}")
    victim, after = rng.randrange(3), rng.randint(3, HOSTS * len(TARGETS) - 6)
    this = await run_round(tmp_path, 1000 + number, kill=(victim, after), extra=("--lease", "2"))
    context = f"killed p{victim} after {after} requests\n{this.context}"
    for index, run in enumerate(this.runs):
        assert run is not None, context
        if index == victim:
            assert run.returncode == -signal.SIGKILL, context
        else:
            assert run.returncode == 0, context
            assert "Finish reason: finished" in run.stdout, context
    fetched_twice = 0
    for host, seen in this.arrivals.items():
        counts = Counter(target for _, target in seen)
        assert set(counts) == set(TARGETS), f"{host} served {dict(counts)}: {context}"
        fetched_twice += sum(count - 1 for count in counts.values())
        assert_spaced(host, seen, context)
    assert fetched_twice <= MAX_TASKS, f"{fetched_twice} fetched twice: {context}"
    assert set(this.records) == this.pages(), context
    assert len(this.records) - len(this.pages()) <= MAX_TASKS, context


def assert_spaced(host: str, seen: list[tuple[float, str]], context: str) -> None:
    gaps = [later - earlier for (earlier, _), (later, _) in pairwise(seen)]
    assert min(gaps) >= DELAY - SLACK, f"{host}: requests {min(gaps):.3f} s apart: {context}"

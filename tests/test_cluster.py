"""``--frontier``: one crawl shared by several processes through a real Redis server.

What docs/long-crawls.md promises ("Crawling with many machines"): the union of the processes'
outputs has one record per URL, each URL fetched once; every process exits 0 soon after
the last record, by the server's word and not an idle timer; a process killed with SIGKILL
costs duplicates only for what it held, one stopped with SIGINT gives its URLs back at once;
``--delay`` and robots.txt hold for all processes together; a lost server ends the crawl
with ``frontier-lost`` and keeps the records; a password is never shown.

Real processes and signals, a real ``redis-server`` per test (tests/redis_server.py), the
test's own HTTP server in its task group. Kills happen at a request count, not a time.
``trio.fail_after`` is the hang detector.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trustme
from redis_server import MISSING, RedisServer, create_args, free_port, running_redis
from sites import Run, Site, run_child

from httpserver import Reply, Request, open_test_server
from support import HANG_LIMIT, read_records

SEED = int(os.environ.get("CLUSTER_TEST_SEED", "20261124"))
# The contract: every process learns the end within 2 s. Measured from the last page the
# site served to each process's exit, which includes writing its report.
END_WITHIN = 2.0


def test_without_redis_server_a_test_fails_with_one_line_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "")
    with pytest.raises(pytest.fail.Exception) as failed, running_redis(tmp_path / "redis"):
        raise AssertionError("a server started without redis-server on PATH")
    assert str(failed.value) == MISSING
    assert "\n" not in MISSING
    assert "apt-get install redis-server" in MISSING
    assert failed.value.pytrace is False  # pytest shows the line, not a traceback


def command(engine: str, frontier: str, output: Path | None, *extra: str) -> list[str]:
    args = [
        sys.executable,
        "-m",
        "trio_crawler",
        "--engine",
        engine,
        "--frontier",
        frontier,
        "--no-progress",
        "--max-tasks",
        "4",
        *extra,
    ]
    if output is not None:
        args += ["-o", str(output)]
    return args


def union(outputs: list[Path], context: str) -> list[str]:
    urls: list[str] = []
    for output in outputs:
        if output.exists():
            urls += [str(record["url"]) for record in read_records(output, context)]
    return urls


async def crawl_together(
    engines: list[str],
    server: RedisServer,
    site: Site,
    root: str,
    tmp_path: Path,
    *extra: str,
    kill: tuple[int, int] | None = None,
) -> tuple[list[Run], list[Path], list[float]]:
    """Start one process per engine on one crawl (the first with the root, the others
    joining without it); with ``kill`` = (index, signal), signal that process once the
    site's armed event fires. Returns the runs, their outputs and their exit times."""
    runs: list[Run | None] = [None] * len(engines)
    outputs = [tmp_path / f"out-{index}.jsonl" for index in range(len(engines))]
    ended: list[float] = []

    async def one(index: int) -> None:
        roots = [root] if index == 0 else []
        args = command(engines[index], server.url(), outputs[index], *extra, *roots)
        send = kill[1] if kill is not None and kill[0] == index else None
        runs[index] = await run_child(
            args, tmp_path, site=site, send=send, name=f"p{index}", ended=ended
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, 0)
        # The others join once the first has created the crawl (its root is asked for).
        await site.begun.wait()
        for index in range(1, len(engines)):
            nursery.start_soon(one, index)
    assert all(run is not None for run in runs)
    return [run for run in runs if run is not None], outputs, ended


@pytest.mark.parametrize(
    "engines", [("trio", "asyncio", "anyio-trio"), ("anyio-asyncio", "trio", "asyncio")]
)
@pytest.mark.trio
async def test_three_processes_share_one_crawl(
    tmp_path: Path, redis: RedisServer, engines: tuple[str, ...]
) -> None:
    """One record per URL in the union, each URL fetched once, every process ends soon
    after the last record with exit 0, and each made some of the records."""
    site = Site(900, random.Random(f"{SEED}-{engines}"), pause=0.01)
    with trio.fail_after(HANG_LIMIT * 2):
        async with open_test_server() as http:
            http.fallback(site.handle)
            runs, outputs, ended = await crawl_together(
                list(engines), redis, site, http.url("/p/0.html"), tmp_path, "--ignore-robots"
            )
    context = "\n".join(f"{engine}: {run}" for engine, run in zip(engines, runs, strict=True))
    totals = f"Shared crawl crawl: {len(site.paths())} done, 0 failed, 0 queued, 0 leased, finished"
    for run in runs:
        assert run.returncode == 0, context
        assert "Finish reason: finished" in run.stdout, context
        assert "Todo: 0" in run.stdout, context
        assert totals in run.stdout.splitlines(), context
    urls = union(outputs, context)
    assert len(urls) == len(set(urls)), f"a URL has two records: {context}"
    assert set(urls) == {http.url(path) for path in site.paths()}, context
    assert set(site.fetched.values()) == {1}, f"a page was fetched twice: {context}"
    for output in outputs:
        assert read_records(output, context), f"a process made no record: {context}"
    late = [round(when - site.last_served, 2) for when in ended]
    assert max(late) <= END_WITHIN, f"exits {late} s after the last page: {context}"


@pytest.mark.trio
async def test_max_pages_counts_the_urls_the_whole_crawl_starts(
    tmp_path: Path, redis: RedisServer
) -> None:
    """--max-pages 40 with three processes: the union holds exactly 40 records, each URL
    fetched once, and every process stops with the core's reason (max-pages), exit 0."""
    site = Site(300, random.Random(f"{SEED}-budget"), pause=0.2)
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            runs, outputs, _ = await crawl_together(
                ["trio", "asyncio", "anyio-trio"],
                redis,
                site,
                http.url("/p/0.html"),
                tmp_path,
                "--max-pages",
                "40",
            )
    context = "\n".join(str(run) for run in runs)
    for run in runs:
        assert run.returncode == 0, context
        assert "Finish reason: max-pages" in run.stdout, context
    urls = union(outputs, context)
    assert len(urls) == 40, context
    assert len(set(urls)) == 40, f"a URL has two records: {context}"
    assert sum(site.fetched.values()) == 40, context
    counts = [len(read_records(output, context)) for output in outputs]
    assert sum(1 for count in counts if count) >= 2, f"no sharing: {counts}"


@pytest.mark.trio
async def test_max_pages_survivors_fetch_what_a_killed_process_started(
    tmp_path: Path, redis: RedisServer
) -> None:
    """SIGKILL one of three once the budget may be spent: its URLs count in it, so the
    survivors wait for their leases to run out (--lease 2) and fetch them; the union
    still holds the 40 URLs the crawl started, no more."""
    rng = random.Random(f"{SEED}-budget-kill")
    site = Site(300, rng, pause=0.2)
    site.arm(20)
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            runs, outputs, _ = await crawl_together(
                ["trio", "asyncio", "anyio-asyncio"],
                redis,
                site,
                http.url("/p/0.html"),
                tmp_path,
                "--max-pages",
                "40",
                "--lease",
                "2",
                kill=(1, signal.SIGKILL),
            )
    context = "\n".join(str(run) for run in runs)
    assert runs[1].returncode == -signal.SIGKILL, context
    for run in (runs[0], runs[2]):
        assert run.returncode == 0, context
        assert "Finish reason: max-pages" in run.stdout, context
    urls = union(outputs, context)
    assert len(set(urls)) == 40, context
    assert set(urls) <= {http.url(path) for path in site.fetched}, context


STRANDED = re.compile(r"^leased by no live process: (\d+) \(back by (\d\d):(\d\d):(\d\d)\)$")


@pytest.mark.trio
async def test_status_and_a_survivor_say_what_a_killed_process_holds_and_until_when(
    tmp_path: Path, redis: RedisServer
) -> None:
    """Issue #22: after a SIGKILL the survivors wait for the dead process's leases with
    nothing saying why. --status (after the contract's five lines, unchanged) counts the
    leases held by no live process, with the time they come back; the survivor says so
    once, in one line. A process renews every third of its lease, so one that made no
    call for half a lease has stopped: with --lease 8, from 4 s to 8 s after its last
    renewal."""
    import datetime

    site = Site(12, random.Random(f"{SEED}-stranded"), pause=0.5)
    site.arm(2)
    lease = ["--lease", "8", "--ignore-robots"]
    outputs = [tmp_path / "dead.jsonl", tmp_path / "survivor.jsonl"]
    found: list[str] = []
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            root = http.url("/p/0.html")
            dead = await run_child(
                command("trio", redis.url(), outputs[0], *lease, root),
                tmp_path,
                site=site,
                send=signal.SIGKILL,
                name="dead",
            )
            async with trio.open_nursery() as nursery:
                survivor: list[Run] = []

                async def survive() -> None:
                    args = command("asyncio", redis.url(), outputs[1], *lease)
                    survivor.append(await run_child(args, tmp_path, name="survivor"))

                nursery.start_soon(survive)
                # Asked until the dead process's leases show (a bounded wait: they do
                # within 8 s, and come back at the latest 8 s after its last renewal).
                while not survivor:
                    status = await run_child(
                        command("trio", redis.url(), None, "--status"), tmp_path, name="status"
                    )
                    assert status.returncode == 0, status
                    lines = status.stdout.splitlines()
                    match = STRANDED.match(lines[5])
                    if match and int(match[1]) > 0:
                        found.append(status.stdout)
                        asked_at = datetime.datetime.now()
                        break
    context = f"dead: {dead}\nsurvivor: {survivor}\nstatus: {found}"
    assert dead.returncode == -signal.SIGKILL, context
    assert found, f"--status never showed the dead process's leases: {context}"
    lines = found[0].splitlines()
    assert [line.split(":")[0] for line in lines[:5]] == [
        "queued", "leased", "done", "failed", "finished",
    ], context  # fmt: skip
    match = STRANDED.match(lines[5])
    assert match is not None, context
    assert 1 <= int(match[1]) <= int(lines[1].removeprefix("leased: ")), context
    hours, minutes, seconds = (int(part) for part in match.groups()[1:])
    back = asked_at.replace(hour=hours, minute=minutes, second=seconds, microsecond=0)
    ahead = (back - asked_at).total_seconds() % 86400
    assert ahead <= 8 or ahead >= 86400 - 1, context
    run = survivor[0]
    assert run.returncode == 0, context
    assert "Finish reason: finished" in run.stdout, context
    said = [line for line in run.stderr.splitlines() if "stopped renewing" in line]
    assert len(said) == 1, context
    assert re.search(r"\d+ URLs are leased by processes that stopped renewing them", said[0])
    assert re.search(r"they come back by \d\d:\d\d:\d\d$", said[0]), context
    urls = union(outputs, context)
    assert set(urls) == {http.url(path) for path in site.paths()}, context


@pytest.mark.trio
async def test_a_killed_process_leaves_its_urls_to_the_others(
    tmp_path: Path, redis: RedisServer
) -> None:
    """SIGKILL one of three mid-crawl, with a short lease: the crawl still finishes, every
    URL has a record, and only URLs the killed process held have two."""
    rng = random.Random(f"{SEED}-kill")
    site = Site(600, rng, pause=0.01)
    site.arm(rng.randint(50, 200))
    with trio.fail_after(HANG_LIMIT * 2):
        async with open_test_server() as http:
            http.fallback(site.handle)
            runs, outputs, _ = await crawl_together(
                ["trio", "asyncio", "anyio-trio"],
                redis,
                site,
                http.url("/p/0.html"),
                tmp_path,
                "--ignore-robots",
                "--lease",
                "2",
                kill=(1, signal.SIGKILL),
            )
    context = "\n".join(str(run) for run in runs)
    assert runs[1].returncode == -signal.SIGKILL, context
    for run in (runs[0], runs[2]):
        assert run.returncode == 0, context
        assert "Finish reason: finished" in run.stdout, context
    urls = union(outputs, context)
    assert set(urls) == {http.url(path) for path in site.paths()}, context
    twice = len(urls) - len(set(urls))
    # The killed process held at most --max-tasks URLs (4): in flight, or leased and waiting.
    assert twice <= 4, f"{twice} duplicates: {context}"
    assert max(site.fetched.values()) <= 2, context


@pytest.mark.trio
async def test_sigint_gives_leases_back_at_once(tmp_path: Path, redis: RedisServer) -> None:
    """SIGINT one of three: it exits 130 having given its URLs back, and the others finish
    long before its leases (60 s) could have run out; one record per URL in the union."""
    rng = random.Random(f"{SEED}-sigint")
    site = Site(600, rng, pause=0.01)
    site.arm(rng.randint(50, 200))
    with trio.fail_after(40):  # well inside the 60 s lease: nothing waited for it
        async with open_test_server() as http:
            http.fallback(site.handle)
            runs, outputs, _ = await crawl_together(
                ["trio", "anyio-asyncio", "asyncio"],
                redis,
                site,
                http.url("/p/0.html"),
                tmp_path,
                "--ignore-robots",
                "--lease",
                "60",
                "--grace",
                "0",
                kill=(0, signal.SIGINT),
            )
    context = "\n".join(str(run) for run in runs)
    assert runs[0].returncode == 130, context
    assert "Finish reason: interrupted" in runs[0].stdout, context
    for run in runs[1:]:
        assert run.returncode == 0, context
        assert "Finish reason: finished" in run.stdout, context
    urls = union(outputs, context)
    assert len(urls) == len(set(urls)), f"a URL has two records: {context}"
    assert set(urls) == {http.url(path) for path in site.paths()}, context
    # Each process said it left, the interrupted one too: none is still counted as
    # waiting for work, or timed as live.
    import coredis

    from trio_crawler._cluster import prefix_of

    async with coredis.Redis(port=redis.port, decode_responses=True) as client:
        assert await client.smembers(prefix_of("crawl") + "idle") == set(), context
        assert await client.hgetall(prefix_of("crawl") + "owners") == {}, context


# The least gap the test server may see between two page requests at --delay 0.2, with
# any --max-per-host. With one at a time each request waits a delay from the previous one's
# answer, which the server gave after it received that request: 10 ms below 0.2 s only for
# the processes' clocks, each on the Redis server's scale to some milliseconds (measured
# under load: 0.2024 s at the least in 8 crawls). With more at a time a start is the Redis
# server's time at a call made once the request has been written (docs/manners.md, "When
# the delay's clock starts"), so only the request's way to the server against the next
# one's can come out of the gap: two busy loops beside the test, 0.198 s at the least in 6
# crawls. (Made before the connection, as the call was, it let 0.182 s through.)
LEAST_GAP = 0.19


@pytest.mark.trio
@pytest.mark.parametrize("max_per_host", ["1", "none"])
async def test_delay_and_robots_hold_across_processes(
    tmp_path: Path, redis: RedisServer, max_per_host: str
) -> None:
    """--delay 0.2 with three processes on one host: the server sees page requests 0.2 s
    apart (exactly with --max-per-host 1, less a request's way to it without), and
    robots.txt is fetched once for the whole crawl."""
    site = Site(20, random.Random(f"{SEED}-delay"))
    robots_fetched = 0

    async def robots(request: Request) -> Reply:
        nonlocal robots_fetched
        robots_fetched += 1
        return Reply(
            status=200,
            headers=(("content-type", "text/plain"),),
            body=b"User-agent: *\nDisallow: /private/\n",
        )

    limit = () if max_per_host == "none" else ("--max-per-host", max_per_host)
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            http.route("/robots.txt", robots)
            runs, outputs, _ = await crawl_together(
                ["trio", "asyncio", "anyio-trio"],
                redis,
                site,
                http.url("/p/0.html"),
                tmp_path,
                "--delay",
                "0.2",
                *limit,
            )
    context = "\n".join(str(run) for run in runs)
    for run in runs:
        assert run.returncode == 0, context
    assert robots_fetched == 1, context
    urls = union(outputs, context)
    assert sorted(urls) == sorted({http.url(path) for path in site.paths()}), context
    gaps = [later - earlier for earlier, later in zip(site.starts, site.starts[1:], strict=False)]
    assert min(gaps) >= LEAST_GAP, f"requests {min(gaps):.3f} s apart: {context}"
    counts = [len(read_records(output, context)) for output in outputs]
    assert sum(1 for count in counts if count) >= 2, f"no sharing: {counts}"


@pytest.mark.trio
async def test_max_per_host_holds_across_processes(tmp_path: Path, redis: RedisServer) -> None:
    """--max-per-host 2 with three processes of 4 workers each: the host never sees more
    than 2 requests at once."""
    site = Site(150, random.Random(f"{SEED}-per-host"), pause=0.02)
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            runs, outputs, _ = await crawl_together(
                ["trio", "asyncio", "anyio-asyncio"],
                redis,
                site,
                http.url("/p/0.html"),
                tmp_path,
                "--ignore-robots",
                "--max-per-host",
                "2",
            )
    context = "\n".join(str(run) for run in runs)
    for run in runs:
        assert run.returncode == 0, context
    assert len(union(outputs, context)) == 150, context
    assert site.peak == 2, f"{site.peak} requests at once: {context}"


@pytest.mark.trio
async def test_damaged_entries_are_skipped_not_fatal(tmp_path: Path, redis: RedisServer) -> None:
    """A queued entry that is not one (written by hand, or by another program) is logged
    and dropped; the crawl goes on and finishes."""
    import coredis

    from trio_crawler._cluster import prefix_of
    from trio_crawler._cluster_scripts import CREATE

    site = Site(20, random.Random(SEED))
    prefix = prefix_of("crawl")
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            root = http.url("/p/0.html")
            key = root[: root.index("/", 8)]
            async with coredis.Redis(port=redis.port, decode_responses=True) as client:
                # The crawl as its first process creates it (robots.txt not obeyed).
                create = client.register_script(CREATE)
                args = create_args(prefix, "", [root], "{}", obey="0", delay="0", per_host="")
                assert (await create(keys=[prefix + "meta"], args=args))[0] == "created"
                for entry in ("1 0 10 0 ftp://not-http/", "x y z", "1 0 10 0 " + key + "/p/1.html"):
                    url = entry.split(" ", 4)[-1]
                    await client.hset(prefix + "urls", {url: "q"})
                    await client.lpush(prefix + "q:" + key, [entry])
                    await client.hincrby(prefix + "o:" + key, "qn", 1)
                    await client.hincrby(prefix + "meta", "queued", 1)
            output = tmp_path / "out.jsonl"
            second = await run_child(command("asyncio", redis.url(), output), tmp_path)
    assert second.returncode == 0, second
    assert "Finish reason: finished" in second.stdout, second
    assert "entry is damaged" in second.stderr, second
    urls = {record["url"] for record in read_records(output, second)}
    assert urls == {http.url(path) for path in site.paths()}, second


async def run_child_then(
    args: list[str], tmp_path: Path, site: Site, act: Callable[[], Awaitable[None] | None]
) -> Run:
    """Run the crawl ``args``; once ``site`` has served its armed page, ``act`` on the
    server (kill it, fill it) while the crawl goes on."""
    async with trio.open_nursery() as nursery:

        async def when_triggered() -> None:
            await site.triggered.wait()
            done = act()
            if done is not None:
                await done

        nursery.start_soon(when_triggered)
        return await run_child(args, tmp_path)


@pytest.mark.trio
async def test_a_lost_server_ends_the_crawl_with_records_kept(tmp_path: Path) -> None:
    """Redis killed mid-crawl: the process retries for --lease seconds, then stops with
    frontier-lost, exit 1, every record it wrote intact."""
    site = Site(2000, random.Random(f"{SEED}-lost"), pause=0.01)
    site.arm(100)
    output = tmp_path / "out.jsonl"
    with running_redis(tmp_path / "redis") as server, trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            args = command(
                "trio", server.url(), output, "--ignore-robots", "--lease", "2",
                http.url("/p/0.html"),
            )  # fmt: skip
            run = await run_child_then(args, tmp_path, site, server.kill)
    assert run.returncode == 1, run
    assert "Finish reason: frontier-lost" in run.stdout, run
    # One warning as the server goes, saying until when; one error as the crawl gives up.
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, run
    assert re.fullmatch(
        r"WARNING trio_crawler: shared frontier redis://127\.0\.0\.1:\d+/0: lost the server "
        r"\(.+\); trying again until \d\d:\d\d:\d\d \(--lease 2 s\), then stopping",
        warnings[0],
    ), run
    errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, run
    assert "lost the shared frontier" in errors[0], run
    # The shared totals are the last the server gave, and say so.
    assert re.search(r"^Shared crawl crawl: .+ leased \(last known\)$", run.stdout, re.M), run
    records = read_records(output, run)
    urls = [record["url"] for record in records]
    assert len(urls) == len(set(urls)), run
    # Every page has its record but those whose links the lost server never took: at most
    # what the process held (--max-tasks 4).
    assert len(urls) >= site.served - 4, f"{len(urls)} records, {site.served} pages: {run}"


@pytest.mark.trio
async def test_a_server_that_refuses_writes_is_one_line(tmp_path: Path) -> None:
    """Redis out of memory (``maxmemory`` reached, no eviction): refused as the crawl is
    joined, one line and exit 2; refused in the middle of a crawl, the process stops with
    frontier-lost, exit 1, one line saying what the server said, every record kept."""
    import coredis

    site = Site(2000, random.Random(f"{SEED}-oom"), pause=0.01)
    site.arm(100)
    output = tmp_path / "out.jsonl"
    full = ("--maxmemory", "1", "--maxmemory-policy", "noeviction")
    with running_redis(tmp_path / "full", *full) as server, trio.fail_after(HANG_LIMIT):
        line = await one_line_error(
            command("trio", server.url(), None, "http://127.0.0.1:9/"), tmp_path
        )
        assert line.startswith(
            f"trio-crawler: error: --frontier {server.url()} refused the crawl: OOM command "
            "not allowed when used memory > 'maxmemory'."
        ), line
    with running_redis(tmp_path / "redis") as server, trio.fail_after(HANG_LIMIT):
        async with (
            open_test_server() as http,
            coredis.Redis(port=server.port, decode_responses=True) as other,
        ):
            http.fallback(site.handle)
            args = command("trio", server.url(), output, "--ignore-robots", http.url("/p/0.html"))

            async def fill_server() -> None:
                await other.config_set({"maxmemory-policy": "noeviction", "maxmemory": 1})

            run = await run_child_then(args, tmp_path, site, fill_server)
    assert run.returncode == 1, run
    assert "Finish reason: frontier-lost" in run.stdout, run
    errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, run
    assert "refused a call: OOM command not allowed" in errors[0], run
    assert "Traceback" not in run.stderr, run
    urls = [record["url"] for record in read_records(output, run)]
    assert len(urls) == len(set(urls)), run
    assert len(urls) >= site.served - 4, f"{len(urls)} records, {site.served} pages: {run}"


@pytest.mark.trio
async def test_a_server_back_within_the_lease_is_one_line_each_way(tmp_path: Path) -> None:
    """Redis stopped mid-crawl (saving its data) and started again on its port within the
    lease: one warning as it goes, one as it comes back, and the crawl finishes with one
    record per URL, its totals read at the end (not marked stale)."""
    site = Site(300, random.Random(f"{SEED}-back"), pause=0.01)
    site.arm(50)
    output = tmp_path / "out.jsonl"
    directory = tmp_path / "redis"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http, trio.open_nursery() as nursery:
            http.fallback(site.handle)
            with running_redis(directory) as first:
                args = command(
                    "trio", first.url(), output, "--ignore-robots", "--lease", "30",
                    http.url("/p/0.html"),
                )  # fmt: skip
                crawl, watch = await start_watched(nursery, args, tmp_path, "crawl")
                await site.triggered.wait()
                # Stopped with its data saved, for the server started again to load.
                async with await trio.open_tcp_stream("127.0.0.1", first.port) as server:
                    await server.send_all(b"SHUTDOWN SAVE\r\n")
                    assert await server.receive_some() == b""  # closed as it exits
                await trio.to_thread.run_sync(first.process.wait)
                await watch.wait_for(b"lost the server")
            with running_redis(directory, port=first.port):
                await crawl.wait()
    stdout = (tmp_path / "crawl.out").read_text()
    stderr = watch.text.decode()
    context = f"exit {crawl.returncode}\n{stdout[-1500:]}\n{stderr}"
    assert crawl.returncode == 0, context
    warnings = [line for line in stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 2, context
    assert "lost the server" in warnings[0], context
    assert re.fullmatch(
        r"WARNING trio_crawler: shared frontier \S+: the server is back after [\d.]+ s",
        warnings[1],
    ), context
    assert "Finish reason: finished" in stdout, context
    assert "(last known)" not in stdout, context
    urls = [record["url"] for record in read_records(output, context)]
    assert sorted(urls) == sorted(http.url(path) for path in site.paths()), context


@pytest.mark.trio
async def test_joining_a_finished_crawl_makes_no_request(
    tmp_path: Path, redis: RedisServer
) -> None:
    site = Site(30, random.Random(SEED))
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            root = http.url("/p/0.html")
            first = await run_child(
                command("trio", redis.url(), None, "--ignore-robots", root), tmp_path
            )
            served = site.served
            again = await run_child(command("asyncio", redis.url(), None), tmp_path)
            status = await run_child(command("trio", redis.url(), None, "--status"), tmp_path)
    assert first.returncode == 0, first
    assert again.returncode == 0, again
    assert site.served == served, "a finished crawl made requests"
    assert "Done: 0" in again.stdout, again
    assert "Finish reason: finished" in again.stdout, again
    assert status.returncode == 0, status
    assert status.stdout == (
        "queued: 0\nleased: 0\ndone: 30\nfailed: 0\nfinished: yes\nleased by no live process: 0\n"
    ), status


class StderrWatch:
    """A child's stderr, read as it comes, so that a test can wait for a line of it."""

    def __init__(self) -> None:
        self.text = b""
        self.ended = False
        self._changed = trio.Event()

    async def read(self, stream: trio.abc.ReceiveStream) -> None:
        async for chunk in stream:
            self.text += chunk
            self._changed.set()
            self._changed = trio.Event()
        self.ended = True
        self._changed.set()

    async def wait_for(self, text: bytes) -> None:
        while text not in self.text:
            assert not self.ended, f"the process ended without saying {text!r}: {self.text!r}"
            await self._changed.wait()


async def start_watched(
    nursery: trio.Nursery, args: list[str], tmp_path: Path, name: str
) -> tuple[trio.Process, StderrWatch]:
    """Start ``args``, its stdout to ``tmp_path/name.out`` and its stderr watched."""
    with (tmp_path / f"{name}.out").open("wb") as stdout:
        process = await trio.lowlevel.open_process(args, stdout=stdout, stderr=subprocess.PIPE)
    assert process.stderr is not None
    watch = StderrWatch()
    nursery.start_soon(watch.read, process.stderr)
    return process, watch


@pytest.mark.trio
async def test_a_joiner_started_first_waits_for_the_crawl(
    tmp_path: Path, redis: RedisServer
) -> None:
    """Two processes given no ROOTs start before the one with them: each waits (and says
    so with -v); one stopped by SIGINT meanwhile exits 130 at once, with no report; the
    other joins once the crawl is created, and the crawl finishes with one record per URL."""
    site = Site(60, random.Random(f"{SEED}-join"), pause=0.01)
    outputs = [tmp_path / "creator.jsonl", tmp_path / "joiner.jsonl"]
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http, trio.open_nursery() as nursery:
            http.fallback(site.handle)
            joining = command("asyncio", redis.url(), outputs[1], "-v")
            joiner, joiner_err = await start_watched(nursery, joining, tmp_path, "joiner")
            interrupting = command("trio", redis.url(), None, "-v")
            interrupted, interrupted_err = await start_watched(
                nursery, interrupting, tmp_path, "interrupted"
            )
            for watch in (joiner_err, interrupted_err):
                await watch.wait_for(b"yet: waiting up to 30 s")
            interrupted.send_signal(signal.SIGINT)
            with trio.fail_after(10):  # well inside the 30 s wait: the signal ended it
                await interrupted.wait()
            creating = command("trio", redis.url(), outputs[0], "--ignore-robots")
            creator = await run_child([*creating, http.url("/p/0.html")], tmp_path, name="c")
            await joiner.wait()
    joined = (tmp_path / "joiner.out").read_text()
    context = f"{creator}\njoiner: {joiner.returncode} {joined} {joiner_err.text!r}"
    assert interrupted.returncode == 130, interrupted_err.text
    assert (tmp_path / "interrupted.out").read_text() == ""
    assert creator.returncode == 0, context
    assert joiner.returncode == 0, context
    assert "Finish reason: finished" in joined, context
    assert b"joined crawl 'crawl'" in joiner_err.text, context
    urls = union(outputs, context)
    assert sorted(urls) == sorted(http.url(path) for path in site.paths()), context


@pytest.mark.trio
async def test_a_joiner_gives_up_when_no_crawl_comes(redis: RedisServer) -> None:
    """After its wait (30 s on the command line, shortened here), one error naming the
    crawl; the server was asked a few times with growing pauses, not in a busy loop."""
    import coredis

    from trio_crawler._cluster import ClusterError, shared_crawl

    with trio.fail_after(HANG_LIMIT):
        started = trio.current_time()
        with pytest.raises(
            ClusterError,
            match=r"^frontier redis://127\.0\.0\.1:\d+/0 holds no crawl named 'docs' "
            r"\(waited 1\.5 s for one\); give ROOTs to start one$",
        ):
            await shared_crawl(redis.url(), "docs", wait=1.5)
        waited = trio.current_time() - started
        async with coredis.Redis.from_url(redis.url(), decode_responses=True) as client:
            stats = await client.info("commandstats")
    assert 1.5 <= waited < 1.5 + 5, waited
    looks = stats["cmdstat_hmget"]["calls"]
    assert 3 <= looks <= 8, stats["cmdstat_hmget"]


async def one_line_error(args: list[str], tmp_path: Path, **kwargs: object) -> str:
    run = await run_child(args, tmp_path, **kwargs)  # type: ignore[arg-type]
    assert run.returncode == 2, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run
    assert lines[0].startswith("trio-crawler: error: "), run
    return lines[0]


@pytest.mark.trio
async def test_usage_errors_are_one_line(tmp_path: Path, redis: RedisServer) -> None:
    with trio.fail_after(HANG_LIMIT):
        nobody = f"redis://127.0.0.1:{free_port()}/0"
        line = await one_line_error(command("trio", nobody, None, "http://a.test/"), tmp_path)
        assert "cannot reach" in line
        line = await one_line_error(command("trio", nobody, None, "--status"), tmp_path)
        assert "cannot reach" in line
        line = await one_line_error(command("trio", redis.url(), None, "--status"), tmp_path)
        assert "no crawl named 'crawl'" in line
        # A joiner given no ROOTs waits for the crawl to be created: see
        # test_a_joiner_gives_up_when_no_crawl_comes for the line it ends with.
        line = await one_line_error(
            command("trio", redis.url(), None, "--state", str(tmp_path / "s.db"), "http://a.test/"),
            tmp_path,
        )
        assert "--frontier" in line
        line = await one_line_error(command("trio", "http://x/", None, "http://a.test/"), tmp_path)
        assert "redis://" in line
        line = await one_line_error(
            command("trio", redis.url(), None, "--crawl-id", "a b", "http://a.test/"), tmp_path
        )
        assert "--crawl-id" in line
        # Another crawl's roots under the same name.
        async with open_test_server() as http:
            http.fallback(Site(10, random.Random(SEED)).handle)
            done = await run_child(
                command("trio", redis.url(), None, "--ignore-robots", http.url("/p/0.html")),
                tmp_path,
            )
            assert done.returncode == 0, done
            line = await one_line_error(
                command("trio", redis.url(), None, http.url("/p/1.html")), tmp_path
            )
            assert "other roots" in line


@pytest.mark.trio
async def test_a_database_that_is_not_there_is_a_usage_error(
    tmp_path: Path, redis: RedisServer
) -> None:
    """A /DB that is no number is refused with the options; one the server does not have
    (it has 16) when connecting: either way one line naming the URL, exit 2, no report and
    no request, whether the process creates the crawl, joins it or asks for --status."""
    base = f"redis://127.0.0.1:{redis.port}"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": Reply.html("hi")}) as http:
            for database, expected in [
                ("99", f"--frontier {base}/99 has no database 99: DB index is out of range"),
                ("abc", f"--frontier must name its database by number (redis://HOST[:PORT]"
                 f"[/DB], DB from 0), not '{base}/abc'"),
                ("-1", f"--frontier must name its database by number (redis://HOST[:PORT]"
                 f"[/DB], DB from 0), not '{base}/-1'"),
            ]:  # fmt: skip
                for extra in ([http.url()], [], ["--status"]):
                    args = command("trio", f"{base}/{database}", None, *extra)
                    run = await run_child(args, tmp_path)
                    assert run.returncode == 2, run
                    assert run.stdout == "", run  # no report
                    assert run.stderr == f"trio-crawler: error: {expected}\n", run
    assert http.requests == []


@pytest.mark.trio
async def test_very_verbose_shows_requests_not_the_clients_routine(
    tmp_path: Path, redis: RedisServer
) -> None:
    """-vv on a shared crawl: a line per request, and none of coredis's routine (its INFO
    "Retry attempt 1 due to error: No matching script" as each script is first run on a
    connection, which is how the script cache works, and reads like a failure)."""
    site = Site(20, random.Random(SEED))
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            args = command("trio", redis.url(), None, "-vv", "--ignore-robots")
            run = await run_child([*args, http.url("/p/0.html")], tmp_path)
    assert run.returncode == 0, run
    assert "coredis" not in run.stderr, run
    requests = [line for line in run.stderr.splitlines() if " GET " in line]
    assert len(requests) == 20, run


@pytest.mark.trio
async def test_a_password_is_never_shown(tmp_path: Path) -> None:
    """In the URL or in the environment, the password works and never appears in what
    the crawler writes: logs, errors, the report, --status, records."""
    secret = "s3cret-" + "x" * 12
    site = Site(20, random.Random(SEED))
    with running_redis(tmp_path / "redis", password=secret) as server, trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            output, root = tmp_path / "out.jsonl", http.url("/p/0.html")
            crawl = await run_child(
                command("trio", server.url(), output, "-vv", "--ignore-robots", root),
                tmp_path,
            )
            status = await run_child(command("trio", server.url(), None, "--status"), tmp_path)
            environment = {**os.environ, "TRIO_CRAWLER_REDIS_PASSWORD": secret}
            status_env = await run_child(
                command("trio", server.url(password=""), None, "--status"),
                tmp_path,
                env=environment,
            )
            wrong = await run_child(
                command("trio", server.url(password="wrong-" + secret), None, "--status"),
                tmp_path,
            )
    assert crawl.returncode == 0, crawl
    for run in (status, status_env):
        assert run.returncode == 0, run
        assert "finished: yes" in run.stdout, run
    assert wrong.returncode == 2, wrong
    for run in (crawl, status, status_env, wrong):
        assert secret not in run.stdout + run.stderr, run
    assert secret not in output.read_text()
    assert "***" in wrong.stderr, wrong


@pytest.mark.trio
async def test_a_missing_password_says_how_to_give_one(tmp_path: Path) -> None:
    """A server started with --requirepass, no password given: one line saying so and
    where a password goes, not Redis's words about HELLO; creating, joining or --status."""
    environment = {k: v for k, v in os.environ.items() if k != "TRIO_CRAWLER_REDIS_PASSWORD"}
    with (
        running_redis(tmp_path / "redis", password="s3cret") as server,
        trio.fail_after(HANG_LIMIT),
    ):
        frontier = server.url(password="")
        for extra in (["http://127.0.0.1:9/"], [], ["--status"]):
            run = await run_child(
                command("trio", frontier, None, *extra), tmp_path, env=environment
            )
            assert run.returncode == 2, run
            assert run.stdout == "", run
            assert run.stderr == (
                f"trio-crawler: error: --frontier {frontier}: this server needs a password "
                "(give it in the URL or TRIO_CRAWLER_REDIS_PASSWORD)\n"
            ), run


@pytest.mark.parametrize("named", ["127.0.0.1", "other.example"])
@pytest.mark.trio
async def test_tls_to_the_server(tmp_path: Path, named: str) -> None:
    """rediss:// with the server's CA: the crawl runs over TLS, and only to a server whose
    certificate names the host connected to (one for another name is refused, one line)."""
    ca = trustme.CA()
    cert = ca.issue_cert(named)
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    tls = (
        "--tls-port", "--tls-cert-file", str(cert_file), "--tls-key-file", str(key_file),
        "--tls-ca-cert-file", str(ca_file), "--tls-auth-clients", "no",
    )  # fmt: skip
    site = Site(20, random.Random(SEED))
    with running_redis(tmp_path / "redis", *tls) as server, trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            frontier = server.url(query=f"?ssl_ca_certs={ca_file}")
            output = tmp_path / "out.jsonl"
            if named != "127.0.0.1":
                line = await one_line_error(command("trio", frontier, None, "--status"), tmp_path)
                assert "cannot reach" in line, line
                assert "certificate" in line.lower(), line
                return
            run = await run_child(
                command("trio", frontier, output, "--ignore-robots", http.url("/p/0.html")),
                tmp_path,
            )
            status = await run_child(command("trio", frontier, None, "--status"), tmp_path)
    assert frontier.startswith("rediss://")
    assert run.returncode == 0, run
    assert len(read_records(output, run)) == 20, run
    assert "done: 20" in status.stdout, status


def test_a_config_never_shows_the_frontier_password() -> None:
    """A config's repr (in tracebacks, in logs of a caller's own) leaves the frontier's URL
    out: it may hold a password."""
    from trio_crawler._config import CrawlConfig

    config = CrawlConfig.create(["http://a.test/"], frontier="redis://:pw-123@127.0.0.1:1/0")
    assert "pw-123" not in repr(config)
    assert config.frontier == "redis://:pw-123@127.0.0.1:1/0"

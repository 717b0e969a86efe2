"""``--frontier``: options between the processes of a shared crawl.

What the contract says ("Crawls that outlive one process", ``--frontier``): the options that
say *what* to crawl are the creating process's, and so are ``--delay`` and
``--max-per-host``, which hold for all processes together. A joiner that leaves them out runs
with the crawl's values; one given other values is refused: exit 2, one line naming the
option (spelt as for ``--state``), no request made and no file written.

The crawl is created here as its first process creates it (``create.lua``, with the options
a ``CrawlConfig`` stores), so that a joiner meets a crawl that exists and is not finished;
joiners are real processes, or a ``Crawler`` in this process for the check made as it joins.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import coredis
import pytest
import trio
from redis_server import RedisServer, create_args
from sites import Site, run_child
from test_cluster import command, one_line_error

from trio_crawler import engine_trio
from trio_crawler._between_runs import OptionChanged
from trio_crawler._cluster import prefix_of
from trio_crawler._cluster_scripts import CREATE
from trio_crawler._config import CrawlConfig
from trio_crawler._options import ConfigError

from httpserver import open_test_server
from support import HANG_LIMIT, read_records

SEED = 20261125


async def create_crawl(
    server: RedisServer, root: str, crawl_id: str = "crawl", **options: Any
) -> None:
    """Create the crawl of ``root`` as a process with ``options`` creates it."""
    config = CrawlConfig.create([root], frontier=server.url(), crawl_id=crawl_id, **options)
    stored = {
        name: value
        for name, value in config.keywords().items()
        if name not in ("frontier", "crawl_id", "lease", "state", "recrawl")
    }
    prefix = prefix_of(crawl_id)
    args = create_args(
        prefix,
        "",
        [root],
        json.dumps(stored, sort_keys=True),
        obey="1" if config.obey_robots else "0",
        delay=repr(float(config.delay)),
        per_host="" if config.max_per_host is None else str(config.max_per_host),
        redirects=str(config.max_redirect),
    )
    async with coredis.Redis(port=server.port, decode_responses=True) as client:
        answer = await client.register_script(CREATE)(keys=[prefix + "meta"], args=args)
    assert answer[0] == "created", answer


# The crawl's options, what a joiner gives instead, and the flag its error must name.
CREATED = {
    "max_depth": 2,
    "max_pages": 10,
    "exclude": "/private/",
    "delay": 0.2,
    "max_per_host": 2,
    "sitemaps": False,
}
CHANGES = [
    (["--max-depth", "3"], "--max-depth 3: the crawl in redis://", "--max-depth 2"),
    (["--max-pages", "11"], "--max-pages 11: ", "--max-pages 10"),
    (["--exclude", "/other/"], "--exclude '/other/': ", "--exclude '/private/'"),
    (["--lenient"], "--lenient: ", "--strict"),
    (["--ignore-robots"], "--ignore-robots: ", "no --ignore-robots"),
    (["--sitemaps"], "--sitemaps: ", "no --sitemaps"),
    (["--delay", "0.5"], "--delay 0.5: ", "--delay 0.2"),
    (["--max-per-host", "3"], "--max-per-host 3: ", "--max-per-host 2"),
]


@pytest.mark.parametrize(("given", "starts", "stored"), CHANGES)
@pytest.mark.trio
async def test_a_joiner_given_other_values_is_refused_in_one_line(
    tmp_path: Path, redis: RedisServer, given: list[str], starts: str, stored: str
) -> None:
    site = Site(5, random.Random(SEED))
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            root = http.url("/p/0.html")
            await create_crawl(redis, root, **CREATED)
            output = tmp_path / "joiner.jsonl"
            # Without ROOTs, and with them: the same refusal.
            for roots in ([], [root]):
                args = command("trio", redis.url(), output, *given, *roots)
                line = await one_line_error(args, tmp_path)
                assert line.startswith(f"trio-crawler: error: {starts}"), line
                assert "(--crawl-id crawl) was made with " + stored + "," in line, line
                assert not output.exists(), line
    assert site.served == 0


@pytest.mark.trio
async def test_a_joiner_given_the_same_values_joins(tmp_path: Path, redis: RedisServer) -> None:
    """The same values, given explicitly (in other spellings), are no change."""
    site = Site(5, random.Random(SEED))
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            root = http.url("/p/0.html")
            await create_crawl(redis, root, **CREATED)
            output = tmp_path / "joiner.jsonl"
            given = [
                "--max-depth", "2", "--max-pages", "10", "--exclude", "/private/",
                "--delay", "0.20", "--max-per-host", "2", "--strict",
            ]  # fmt: skip
            run = await run_child(command("trio", redis.url(), output, *given), tmp_path)
    assert run.returncode == 0, run
    assert "Finish reason: finished" in run.stdout, run
    assert len(read_records(output, run)) == 5, run


@pytest.mark.trio
async def test_a_joiner_that_leaves_them_out_crawls_with_the_crawl_s_values(
    tmp_path: Path, redis: RedisServer
) -> None:
    """A joiner given only the frontier runs with the crawl's --max-depth and --exclude:
    with --max-depth 0 it fetches the root alone, where by its own defaults it would
    crawl the whole site."""
    site = Site(30, random.Random(SEED))
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            root = http.url("/p/0.html")
            await create_crawl(redis, root, max_depth=0, obey_robots=False)
            output = tmp_path / "joiner.jsonl"
            run = await run_child(command("trio", redis.url(), output), tmp_path)
            await create_crawl(redis, root, "excluding", exclude=r"/p/[1-9]", obey_robots=False)
            excluding = tmp_path / "excluding.jsonl"
            other = await run_child(
                command("asyncio", redis.url(), excluding, "--crawl-id", "excluding"), tmp_path
            )
    assert run.returncode == 0, run
    assert [record["url"] for record in read_records(output, run)] == [root], run
    assert "beyond_max_depth" in run.stdout, run
    assert other.returncode == 0, other
    assert [record["url"] for record in read_records(excluding, other)] == [root], other


@pytest.mark.trio
async def test_a_crawler_joining_with_other_values_is_refused_before_its_first_request(
    redis: RedisServer,
) -> None:
    """The check made as the crawl is joined: for a ``Crawler`` (which reads no stored
    options before it is made), and for a process that raced the creator."""
    site = Site(5, random.Random(SEED))
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as http:
            http.fallback(site.handle)
            root = http.url("/p/0.html")
            await create_crawl(redis, root, **CREATED)
            crawler = engine_trio.Crawler(
                [root], frontier=redis.url(), **{**CREATED, "max_depth": 3}
            )
            with pytest.raises(OptionChanged, match=r"^max_depth is 3, but the crawl in redis://"):
                await crawler.crawl()
            same = engine_trio.Crawler([root], frontier=redis.url(), **CREATED)
            await same.crawl()
    assert same.finish_reason == "finished"
    assert site.served == 5


@pytest.mark.trio
async def test_a_crawl_an_earlier_version_made_is_refused_and_left_alone(
    redis: RedisServer, tmp_path: Path
) -> None:
    """A crawl of layout 1 (whose queued entries carry no referrer) is neither joined nor
    rewritten: a process given its roots, one given none, ``--status`` and a ``Crawler``
    are each told in one line which version can finish it; its keys are as they were."""
    root = "http://127.0.0.1:9/"
    meta = prefix_of("old") + "meta"
    async with coredis.Redis(port=redis.port, decode_responses=True) as client:
        await client.hset(meta, {"v": "1", "roots": json.dumps([root]), "options": "{}"})
        before = await client.hgetall(meta)
    expected = (
        f"trio-crawler: error: --frontier crawl 'old' on {redis.url()} was made by an earlier "
        "trio-crawler (layout 1; this version reads layout 2): finish it with the version "
        "that made it, or use another --crawl-id"
    )
    with trio.fail_after(HANG_LIMIT):
        output = tmp_path / "out.jsonl"
        for roots in ([root], []):
            args = command("trio", redis.url(), output, "--crawl-id", "old", *roots)
            assert await one_line_error(args, tmp_path) == expected
        status = command("trio", redis.url(), None, "--crawl-id", "old", "--status")
        assert await one_line_error(status, tmp_path) == expected
        crawler = engine_trio.Crawler([root], frontier=redis.url(), crawl_id="old")
        with pytest.raises(ConfigError) as refused:
            await crawler.crawl()
    assert expected.endswith(str(refused.value).removeprefix("frontier "))
    assert not output.exists()
    async with coredis.Redis(port=redis.port, decode_responses=True) as client:
        assert await client.hgetall(meta) == before
        assert set(await client.keys("*")) == {meta}

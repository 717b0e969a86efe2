"""Items that outlive a process: ``--items`` with ``--state`` and with ``--frontier``.

What docs/handler.md promises ("Exactly once"): with ``--state``, a page's items are
committed with its record, so however many times the crawl is killed (SIGKILL) and resumed,
the items file ends with exactly the items of each finished page once, every line whole;
with ``--frontier``, each process writes its own items file before the URL is marked
done, and with nobody killed the union holds each page's items once.

Real processes, real SIGKILLs at seeded request counts (as tests/test_resume.py), a real
``redis-server``, the test's own HTTP server. ``HANDLER_TEST_SEED`` and
``HANDLER_TEST_KILLS`` (kills per engine, default 2) choose other and more runs; a
failure's seed is in its message.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest
import trio
from redis_server import RedisServer
from sites import Site, run_child

from trio_crawler._cli import ENGINES

from httpserver import open_test_server
from support import HANG_LIMIT, read_records

SEED = int(os.environ.get("HANDLER_TEST_SEED", "20261125"))
KILLS = int(os.environ.get("HANDLER_TEST_KILLS", "2"))
PAGES = 600
MAX_TASKS = 10

# Pages make 0 to 3 items each, by their number, with some bulk so that a kill can land
# in the middle of a page's lines.
HANDLER = """
import anyio


async def hangs_on_7(page):
    # As items_of, but the handler of /p/7.html never returns: the deadline cancels it.
    if page.url.endswith("/p/7.html"):
        await anyio.sleep_forever()
    return list(items_of(page))


def items_of(page):
    number = int(page.url.rsplit("/", 1)[1].removesuffix(".html"))
    for k in range(number % 4):
        yield {"url": page.url, "k": k, "links": page.links, "pad": "x" * 200}
"""


def expected_items(server_url: str, paths: set[str]) -> Counter[tuple[str, int]]:
    expected: Counter[tuple[str, int]] = Counter()
    for path in paths:
        number = int(path.removeprefix("/p/").removesuffix(".html"))
        for k in range(number % 4):
            expected[(server_url + path, k)] += 1
    return expected


def read_items(paths: list[Path], context: str) -> Counter[tuple[str, int]]:
    """Every item of the files as (url, k), each line checked whole and valid JSON."""
    found: Counter[tuple[str, int]] = Counter()
    for path in paths:
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        assert text == "" or text.endswith("\n"), f"last line cut short in {path}: {context}"
        for number, line in enumerate(text.splitlines(), 1):
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise AssertionError(f"{path} line {number} ({exc}): {context}") from None
            assert set(item) == {"url", "k", "links", "pad"}, f"{path} {number}: {context}"
            found[(item["url"], item["k"])] += 1
    return found


@pytest.fixture
def handler(tmp_path: Path) -> str:
    path = tmp_path / "handler.py"
    path.write_text(HANDLER, encoding="utf-8")
    return f"{path}:items_of"


def command(engine: str, handler: str, items: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trio_crawler",
        "--engine",
        engine,
        "--handler",
        handler,
        "--items",
        str(items),
        "--ignore-robots",
        "--no-progress",
        "--max-tasks",
        str(MAX_TASKS),
        *extra,
    ]


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_items_are_written_once_through_kills_and_resumes(
    tmp_path: Path, engine: str, handler: str
) -> None:
    """SIGKILL at seeded moments, the same command again, until the crawl finishes: the
    items file holds each page's items exactly once, like -o its records."""
    seed = f"{SEED}-{engine}"
    rng = random.Random(seed)
    site = Site(PAGES, rng)
    state, output, items = tmp_path / "crawl.db", tmp_path / "out.jsonl", tmp_path / "items.jsonl"
    kills = 0
    runs: list[str] = []
    with trio.fail_after(HANG_LIMIT * 2):
        async with open_test_server() as server:
            server.fallback(site.handle)
            args = command(
                engine, handler, items, "--state", str(state), "-o", str(output),
                server.url("/p/0.html"),
            )  # fmt: skip
            for _ in range(KILLS):
                site.arm(rng.randint(1, PAGES // (KILLS + 1)))
                run = await run_child(args, tmp_path, site=site, send=signal.SIGKILL)
                runs.append(f"run {len(runs) + 1}: {run.returncode} at page {site.served}")
                if run.returncode == -signal.SIGKILL:
                    kills += 1
                else:
                    assert run.returncode == 0, run
                    break
            final = await run_child(args, tmp_path)
    context = f"seed {seed!r} (HANDLER_TEST_SEED={SEED}), {kills} kills: {runs}\n{final}"
    assert final.returncode == 0, context
    assert "Finish reason: finished" in final.stdout, context
    assert kills >= 1, f"no kill landed mid-crawl: {context}"
    records = read_records(output, context)
    assert len(records) == PAGES, context
    assert all(record["handler_error"] is None for record in records), context
    found = read_items([items], context)
    expected = expected_items(server.url(""), site.paths())
    assert found == expected, f"{sum((found - expected).values())} extra: {context}"
    again = sum(count - 1 for count in site.fetched.values())
    assert 0 < again <= kills * MAX_TASKS or kills == 0, context


@pytest.mark.trio
async def test_three_processes_write_each_pages_items_once_between_them(
    tmp_path: Path, redis: RedisServer, handler: str
) -> None:
    engines = ["trio", "asyncio", "anyio-asyncio"]
    # As tests/test_cluster.py's crawl: slow enough (900 pages of 10 ms, 4 at a time per
    # process) that the joiners, started once the crawl exists, get a share of it.
    site = Site(900, random.Random(f"{SEED}-shared"), pause=0.01)
    items = [tmp_path / f"items-{index}.jsonl" for index in range(len(engines))]
    runs: list[str] = []
    with trio.fail_after(HANG_LIMIT * 2):
        async with open_test_server() as server:
            server.fallback(site.handle)

            async def one(index: int) -> None:
                roots = [server.url("/p/0.html")] if index == 0 else []
                args = command(
                    engines[index],
                    handler,
                    items[index],
                    *("--frontier", redis.url(), "--max-tasks", "4"),
                    *roots,
                )
                run = await run_child(args, tmp_path, name=f"p{index}")
                runs.append(f"{engines[index]}: {run}")
                assert run.returncode == 0, run

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one, 0)
                await site.begun.wait()  # the crawl exists: the others join it
                for index in range(1, len(engines)):
                    nursery.start_soon(one, index)
    context = "\n".join(runs)
    found = read_items(items, context)
    assert found == expected_items(server.url(""), site.paths()), context
    assert sum(bool(read_items([path], context)) for path in items) >= 2, context


@pytest.mark.trio
async def test_a_recrawl_refuses_the_items_file_of_an_earlier_pass(
    tmp_path: Path, handler: str
) -> None:
    site = Site(20, random.Random(SEED))
    state, items = tmp_path / "crawl.db", tmp_path / "items.jsonl"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.fallback(site.handle)
            args = command("trio", handler, items, "--state", str(state))
            first = await run_child([*args, server.url("/p/0.html")], tmp_path)
            assert first.returncode == 0, first
            before = items.read_bytes()
            again = await run_child([*args, "--recrawl"], tmp_path)
    assert again.returncode == 2, again
    assert again.stderr.splitlines() == [
        f"trio-crawler: error: --items {items} holds the items of pass 1; give a new file "
        "for this pass"
    ]
    assert items.read_bytes() == before
    assert sum(read_items([items], str(first)).values()) == sum(
        expected_items(server.url(""), site.paths()).values()
    )


@pytest.mark.trio
async def test_a_page_whose_handler_was_cancelled_is_handled_again_on_resume(
    tmp_path: Path, handler: str
) -> None:
    """--max-time cancels the handler of /p/7.html: that page has no record and no item;
    the next run, with a handler that returns, fetches and handles it, once."""
    site = Site(40, random.Random(SEED))
    state, output, items = tmp_path / "crawl.db", tmp_path / "out.jsonl", tmp_path / "items.jsonl"
    hangs = handler.replace(":items_of", ":hangs_on_7")
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.fallback(site.handle)
            root = server.url("/p/0.html")
            extra = ("--state", str(state), "-o", str(output))
            first = await run_child(
                command("asyncio", hangs, items, *extra, "--max-time", "2", root), tmp_path
            )
            assert first.returncode == 0, first
            assert "Finish reason: deadline" in first.stdout, first
            cut = {str(record["url"]) for record in read_records(output, str(first))}
            assert server.url("/p/7.html") not in cut
            assert site.fetched["/p/7.html"] == 1
            again = await run_child(command("trio", handler, items, *extra), tmp_path)
    context = f"{first}\n{again}"
    assert again.returncode == 0, context
    assert "Finish reason: finished" in again.stdout, context
    assert site.fetched["/p/7.html"] == 2, context
    assert len(read_records(output, context)) == len(site.paths()), context
    assert read_items([items], context) == expected_items(server.url(""), site.paths())

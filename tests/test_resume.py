"""``--state FILE``: a crawl killed, interrupted or out of time, resumed by the same command.

What docs/long-crawls.md promises ("Long crawls: resume and recrawl"): however many times the crawl
was killed (SIGKILL), interrupted (SIGINT) or stopped by ``--max-time`` and run again, the
``-o`` file ends with exactly one whole JSON line per URL of the site; only URLs in flight
at a kill are fetched again; ``--recrawl`` sends conditional requests and follows a 304
page's stored links.

Real processes, real signals, a real server in the test's own task group. The moment of a
kill is a request count, not a time: the site's handler sets an event when it has served
its k-th page (k seeded), and the test kills the child then, so no amount of machine load
changes what is tested. ``trio.fail_after`` is the hang detector.

Soaks: ``RESUME_TEST_SEED`` and ``RESUME_TEST_KILLS`` (kills per engine, default 3) choose
other and more runs; a failure's seed is in its message.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from pathlib import Path

import pytest
import trio
from sites import Site, run_child

from trio_crawler._cli import ENGINES

from httpserver import open_test_server
from support import HANG_LIMIT, read_records

SEED = int(os.environ.get("RESUME_TEST_SEED", "20261123"))
KILLS = int(os.environ.get("RESUME_TEST_KILLS", "3"))
PAGES = 1500
MAX_TASKS = 10


def command(engine: str, state: Path, output: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trio_crawler",
        "--engine",
        engine,
        "--state",
        str(state),
        "-o",
        str(output),
        "--ignore-robots",
        "--no-progress",
        "--max-tasks",
        str(MAX_TASKS),
        *extra,
    ]


def check_output(
    output: Path, site: Site, server_url: str, context: str
) -> list[dict[str, object]]:
    records = read_records(output, context)
    urls = [str(record["url"]) for record in records]
    assert len(urls) == len(set(urls)), f"a URL has two lines: {context}"
    assert set(urls) == {server_url + path for path in site.paths()}, context
    return records


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_killed_and_resumed_until_done(tmp_path: Path, engine: str) -> None:
    """SIGKILL at seeded moments, the same command again, until the crawl finishes."""
    seed = f"{SEED}-{engine}"
    rng = random.Random(seed)
    site = Site(PAGES, rng)
    state, output = tmp_path / "crawl.db", tmp_path / "out.jsonl"
    kills = 0
    runs: list[str] = []
    with trio.fail_after(HANG_LIMIT * 2):
        async with open_test_server() as server:
            server.fallback(site.handle)
            warc = tmp_path / "crawl.warc.gz"
            args = command(engine, state, output, "--warc", str(warc), server.url("/p/0.html"))
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
    context = f"seed {seed!r} (RESUME_TEST_SEED={SEED}), {kills} kills: {runs}\n{final}"
    assert final.returncode == 0, context
    assert "Finish reason: finished" in final.stdout, context
    assert f"Done: {PAGES}" in final.stdout, context
    assert kills >= 1, f"no kill landed mid-crawl: {context}"
    check_output(output, site, server.url(""), context)
    assert max(site.fetched.values()) <= 1 + kills, context
    # A worker holds its URL until its record is committed: a kill costs what they held.
    again = sum(count - 1 for count in site.fetched.values())
    assert again <= kills * MAX_TASKS, f"{again} pages fetched again: {context}"
    warcio = str(Path(sys.executable).parent / "warcio")
    check = await trio.run_process([warcio, "check", str(warc)], capture_stdout=True, check=False)
    assert check.returncode == 0, f"warcio check: {check.stdout!r}\n{context}"


@pytest.mark.parametrize(
    ("engine", "stop"),
    [
        ("trio", "sigint"),
        ("asyncio", "sigint"),
        ("anyio-trio", "max-time"),
        ("anyio-asyncio", "max-time"),
    ],
)
@pytest.mark.trio
async def test_interrupted_or_out_of_time_then_resumed(
    tmp_path: Path, engine: str, stop: str
) -> None:
    """SIGINT and --max-time are not kills: every URL has exactly one line, and a URL is
    fetched again only if the stop cancelled it in flight."""
    rng = random.Random(f"{SEED}-{engine}-{stop}")
    site = Site(PAGES, rng)
    state, output = tmp_path / "crawl.db", tmp_path / "out.jsonl"
    runs = []
    with trio.fail_after(HANG_LIMIT * 2):
        async with open_test_server() as server:
            server.fallback(site.handle)
            root = server.url("/p/0.html")
            if stop == "sigint":
                site.arm(PAGES // 3)
                first = await run_child(
                    command(engine, state, output, "--grace", "0.5", root),
                    tmp_path,
                    site=site,
                    send=signal.SIGINT,
                )
                assert first.returncode == 130, first
                assert "Finish reason: interrupted" in first.stdout, first
                runs.append(first)
            else:
                # Slow enough that no machine crawls the site within one --max-time: at
                # least 3 s at 10 requests at once.
                site.pause = 0.02
                for _ in range(30):
                    run = await run_child(
                        command(engine, state, output, "--max-time", "1", root), tmp_path
                    )
                    assert run.returncode == 0, run
                    runs.append(run)
                    if "Finish reason: finished" in run.stdout:
                        break
                assert len(runs) > 1, "the crawl never ran out of time; nothing was resumed"
            final = await run_child(command(engine, state, output, root), tmp_path)
    context = f"{stop} on {engine}: {len(runs)} runs\n{final}"
    assert final.returncode == 0, context
    assert "Finish reason: finished" in final.stdout, context
    assert f"Done: {PAGES}" in final.stdout, context
    check_output(output, site, server.url(""), context)
    assert max(site.fetched.values()) <= 2, context


@pytest.mark.trio
async def test_a_finished_crawl_is_reported_not_crawled_again(tmp_path: Path) -> None:
    site = Site(50, random.Random(SEED))
    state, output = tmp_path / "crawl.db", tmp_path / "out.jsonl"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.fallback(site.handle)
            first = await run_child(
                command("trio", state, output, server.url("/p/0.html")), tmp_path
            )
            assert first.returncode == 0, first
            served = site.served
            # The ROOTs may be left out; the report is the whole crawl's.
            again = await run_child(command("trio", state, output), tmp_path)
    assert again.returncode == 0, again
    assert site.served == served, "a finished crawl made requests"
    assert "Done: 50" in again.stdout, again
    assert "Finish reason: finished" in again.stdout, again
    # Read from the file in URL order, the listing is the one the crawl printed.
    listed = again.stdout.split("\nFinished ")[0].splitlines()[1:]
    assert len(listed) == 50, again
    assert listed == sorted(listed) == first.stdout.split("\nFinished ")[0].splitlines()[1:]
    check_output(output, site, server.url(""), str(again))


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_recrawl_of_an_unchanged_and_of_a_changed_site(tmp_path: Path, engine: str) -> None:
    site = Site(200, random.Random(f"{SEED}-recrawl"))
    state = tmp_path / "crawl.db"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.fallback(site.handle)
            root = server.url("/p/0.html")
            first = await run_child(command(engine, state, tmp_path / "1.jsonl", root), tmp_path)
            assert first.returncode == 0, first
            fetched = site.served

            unchanged = await run_child(
                command(engine, state, tmp_path / "2.jsonl", "--recrawl", root), tmp_path
            )
            assert unchanged.returncode == 0, unchanged
            assert site.served == fetched, "an unchanged page was sent again"
            records = check_output(tmp_path / "2.jsonl", site, server.url(""), str(unchanged))
            assert {record["status"] for record in records} == {304}, unchanged
            for record in records:
                assert record["size"] == 0, record
                assert record["content_type"] is None, record
            assert site.conditional == 200

            # Page 3 changes and links to a new page; page 5 goes away.
            site.links[3] = [*site.links[3], 200]
            site.links[200] = [0]
            site.version[3] = 1
            site.removed.add(5)
            changed = await run_child(
                command(engine, state, tmp_path / "3.jsonl", "--recrawl", root), tmp_path
            )
    assert changed.returncode == 0, changed
    records = read_records(tmp_path / "3.jsonl", changed)
    status = {
        str(record["url"]).removeprefix(server.url("")): record["status"] for record in records
    }
    assert len(status) == len(records) == 201, changed
    assert status.pop("/p/3.html") == 200
    assert status.pop("/p/200.html") == 200
    assert status.pop("/p/5.html") == 404
    assert set(status.values()) == {304}, changed

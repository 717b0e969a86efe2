"""The handler examples (07-09) run as their readers run them, against a real demo site.

Each example runs as a subprocess, ``python examples/0N_....py ROOT`` from the repository
root, against the demo site served in the test's own nursery, and what it printed is
checked against the site's data (``tests/demo_expectations.py``). Each is also run once
without a URL, when it serves the demo site itself, and its handler once through the
command line, ``--handler examples/0N_....py:NAME``, which must find the same.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from trio_crawler._demo import build_demo_site, serve_demo

from demo_expectations import error_paths, expected_urls, failing_paths, html_paths
from support import REPO, run_cli, run_example

BROKEN = "examples/07_broken_links.py"
EXTRACT = "examples/08_extract.py"
STEER = "examples/09_steer.py"
BROKEN_LINE = re.compile(r"broken (\S+) (.+) on (\S+)")


def broken_targets(root: str) -> set[str]:
    """The demo's links whose target failed or answered 4xx/5xx."""
    site = build_demo_site()
    bad = {path for path in error_paths(site) if site.lookup(path).status >= 400}
    return {root.rstrip("/") + path for path in bad | failing_paths(site)}


def links_to(path: str) -> set[str]:
    """The demo pages whose markup has an ``href`` to ``path``."""
    site = build_demo_site()
    return {
        page_path
        for page_path, page in site.pages.items()
        if f'href="{path}"'.encode() in page.body and page.status == 200
    }


@pytest.mark.trio
async def test_broken_links_are_each_failing_target_with_the_pages_linking_to_it() -> None:
    async with trio.open_nursery() as nursery:
        root = await nursery.start(serve_demo)
        result = await run_example(BROKEN, root)
        nursery.cancel_scope.cancel("example done")
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    found = [BROKEN_LINE.fullmatch(line) for line in lines[:-1]]
    assert all(match is not None for match in found), lines
    pairs = {(match[1], match[3]) for match in found if match is not None}
    targets = broken_targets(root)
    assert {target for target, _ in pairs} == targets
    for target, page in pairs:
        path = urlsplit(target).path
        assert urlsplit(page).path in links_to(path), (target, page)
    problems = {match[1]: match[2] for match in found if match is not None}
    assert problems[root + "missing.html"] == "404"
    assert problems[root + "broken/truncated.html"].startswith("RemoteProtocolError")
    assert lines[-1] == f"{len(found)} broken links to {len(targets)} targets"


@pytest.mark.trio
async def test_extract_gives_the_title_and_headings_of_every_page() -> None:
    async with trio.open_nursery() as nursery:
        root = await nursery.start(serve_demo)
        result = await run_example(EXTRACT, root)
        nursery.cancel_scope.cancel("example done")
    assert result.returncode == 0, result.stderr.decode()
    items = [json.loads(line) for line in result.stdout.decode().splitlines()]
    by_url = {item["url"]: item for item in items}
    assert len(by_url) == len(items)
    site = build_demo_site()
    assert set(by_url) == {root.rstrip("/") + path for path in html_paths(site)}
    assert by_url[root]["title"] == "Trio crawler demo site"
    assert by_url[root]["headings"][0] == "Trio crawler demo site"
    assert by_url[root + "intl/latin1.html"]["title"] == "Café and friends"  # its charset
    assert by_url[root + "xhtml/page.xhtml"]["title"] == "An XHTML page"
    assert all(item["title"] and item["headings"] for item in items)
    headings = sum(len(item["headings"]) for item in items)
    summary = f"extracted {len(items)} pages, {headings} headings"
    assert summary in result.stderr.decode().splitlines()


FETCHED = re.compile(r"fetched (\S+) (\d{3}|None)")


@pytest.mark.trio
async def test_steer_keeps_the_crawl_in_one_section() -> None:
    async with trio.open_nursery() as nursery:
        root = await nursery.start(serve_demo)
        result = await run_example(STEER, root)
        other = await run_example(STEER, root, "/sockets/")
        nursery.cancel_scope.cancel("example done")
    for run, section in ((result, "/nurseries/"), (other, "/sockets/")):
        assert run.returncode == 0, run.stderr.decode()
        lines = run.stdout.decode().splitlines()
        fetched = [FETCHED.fullmatch(line) for line in lines[:-1]]
        urls = {match[1] for match in fetched if match is not None}
        assert len(urls) == len(lines) - 1
        in_section = {
            url
            for url in expected_urls(build_demo_site(), root)
            if urlsplit(url).path.startswith(section)
        }
        assert urls == {root} | in_section
        assert len(in_section) == 1 + 8 + 8 * 5  # the section, its topics, their pages
        assert lines[-1] == f"{len(urls)} urls fetched, {len(in_section)} in {section}"


@pytest.mark.trio
@pytest.mark.parametrize("script", [BROKEN, EXTRACT, STEER])
async def test_example_serves_its_own_demo_without_a_url(script: str) -> None:
    result = await run_example(script)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.strip()


@pytest.mark.trio
async def test_each_examples_handler_works_on_the_command_line(tmp_path: Path) -> None:
    items = trio.Path(tmp_path) / "links.jsonl"
    output = trio.Path(tmp_path) / "records.jsonl"
    async with trio.open_nursery() as nursery:
        root = await nursery.start(serve_demo)
        common = ("--no-progress", "-o", str(output))
        links = await run_cli(
            "--handler", f"{REPO / BROKEN}:links_of", "--items", str(items), *common, root
        )
        extract = await run_cli(
            "--handler", f"{REPO / EXTRACT}:title_and_headings", "--items", "-", root
        )
        steer = await run_cli("--handler", f"{REPO / STEER}:stay_in_section", "--no-progress", root)
        nursery.cancel_scope.cancel("example done")
    for run in (links, extract, steer):
        assert run.returncode == 0, run.stderr.decode()
    site = build_demo_site()
    pages = {root.rstrip("/") + path for path in html_paths(site)}
    link_items = [json.loads(line) for line in (await items.read_text()).splitlines()]
    assert {item["page"] for item in link_items} == pages
    extracted = [json.loads(line) for line in extract.stdout.decode().splitlines()]
    assert {item["url"] for item in extracted} == pages
    assert b"Finish reason: finished" in extract.stderr
    steered = steer.stdout.decode()
    assert f"{root}nurseries/topic-8/page-5.html 200" in steered
    assert f"{root}sockets/" not in steered
    assert "Done: 50" in steered.splitlines()

"""The chapter's first two stages, ``examples/01_callbacks.py`` and ``02_generator_coroutines.py``.

Each example runs as a child process, exactly as a reader runs it, against the demo site served
in the test's own nursery. The test reads the ``fetched <url> <status>`` lines it prints and
checks the crawl: every URL on the demo host, none fetched twice, every page reachable from
``/`` by plain links found (the six sections with all their topics and pages, the archive, the
features page), redirects recorded but not followed, and a final count that matches. The
examples use a naive href regex and follow no redirects, so they are not held to
``expected_urls`` (tests/demo_expectations.py); that is the library's job.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from trio_crawler._demo import build_demo_site, serve_demo

from demo_expectations import html_paths
from support import bare_python, run_example

EXAMPLES = ["examples/01_callbacks.py", "examples/02_generator_coroutines.py"]
# The demo's six top-level sections (see the layout in trio_crawler/_demo.py): every page under
# them, and the home, archive and features pages, is reachable from "/" by plain links.
SECTIONS = ("coroutines", "nurseries", "cancellation", "channels", "sockets", "protocols")
# Runs of one example per test. The examples have no concurrency cap, as in the chapter: ~300
# connections open at once. Hypercorn closes a connection that has sent no complete request
# within its keep_alive_timeout (5 s, counted from accept), so on a heavily loaded machine a
# crawl can see a few connections closed empty ("error"). Such a run is retried once.
ATTEMPTS = 2


def parse_output(result: subprocess.CompletedProcess[bytes]) -> tuple[list[tuple[str, str]], int]:
    """The (url, status) of each ``fetched`` line, and the number in the final count line."""
    assert result.returncode == 0, result.stderr.decode()
    *lines, last = result.stdout.decode().splitlines()
    fetched = []
    for line in lines:
        word, url, status = line.split(" ")
        assert word == "fetched", line
        fetched.append((url, status))
    count, *rest = last.split(" ")
    assert rest == ["urls", "fetched"], last
    return fetched, int(count)


def plain_link_pages(origin: str) -> set[str]:
    """URLs of the demo's pages that a crawler reaches from "/" without any special feature."""
    site = build_demo_site()
    return {
        origin + path
        for path in html_paths(site)
        if path in {"/", "/features/", "/baz"}
        or path.startswith("/archive?")
        or path.split("/")[1] in SECTIONS
    }


@pytest.mark.trio
@pytest.mark.parametrize("script", EXAMPLES)
async def test_crawls_the_demo_site(script: str) -> None:
    for _ in range(ATTEMPTS):
        async with trio.open_nursery() as nursery:
            root = await nursery.start(serve_demo)
            result = await run_example(script, root)
            nursery.cancel_scope.cancel("example finished")
        fetched, count = parse_output(result)
        if all(status != "error" for _, status in fetched):
            break
    urls = [url for url, _ in fetched]
    statuses = dict(fetched)
    origin = root.rstrip("/")

    assert count == len(fetched)
    assert len(urls) == len(set(urls)), "a URL was fetched twice"
    assert all(urlsplit(url).netloc == urlsplit(root).netloc for url in urls)
    assert not [url for url in urls if "#" in url], "fragments must be dropped"

    expected = plain_link_pages(origin)
    assert len(expected) > 250
    assert expected <= set(urls), sorted(expected - set(urls))
    assert {url: statuses[url] for url in expected if statuses[url] != "200"} == {}
    # Redirects are recorded with their status and not followed, as in the chapter's stage.
    for path, status in [("/foo", "302"), ("/bar", "301"), ("/redirect/start", "301")]:
        assert statuses[origin + path] == status
    assert origin + "/redirect/step-2" not in statuses
    assert statuses[origin + "/missing.html"] == "404"


@pytest.mark.trio
@pytest.mark.parametrize("script", EXAMPLES)
async def test_serves_the_demo_itself_without_a_url(script: str) -> None:
    fetched, count = parse_output(await run_example(script))
    assert count == len(fetched) > 250


@pytest.mark.trio
async def test_without_the_dependencies_it_says_what_to_install(tmp_path: Path) -> None:
    """Run with a Python that lacks trio_crawler's dependencies, the example's demo server
    cannot start: one line naming the module missing and the command to run instead, not
    the server's traceback and a "demo server exited"."""
    script = EXAMPLES[0]
    result = await run_example(script, python=bare_python(tmp_path / "bare"))
    assert result.returncode == 1
    [line] = result.stderr.decode().splitlines()
    assert line.startswith(f"{script}: no module named '"), line
    assert line.endswith(
        f"the examples need trio_crawler's dependencies; run .venv/bin/python {script} "
        "after python3 -m venv .venv && .venv/bin/pip install -e ."
    ), line
    assert result.stdout == b""

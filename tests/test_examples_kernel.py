"""examples/03_direct_scheduling.py: its crawl of the demo site, and its trap-based kernel.

The crawl runs as a reader runs it, a subprocess given the root of a demo site this test serves.
The kernel is imported from the file (its name starts with a digit, so through importlib) and
each of its promises gets a test: the parent waits for its children, a child's error cancels
its siblings and reaches the parent, and cancellation is level-triggered. Each kernel test runs
under an alarm (``give_up``), so a broken kernel fails instead of hanging.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

import pytest
import trio

import trio_crawler._demo

from support import HANG_LIMIT

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = "examples/03_direct_scheduling.py"
GIVE_UP_AFTER = 10  # seconds: the kernel tests below take milliseconds


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("direct_scheduling", REPO_ROOT / EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first, as importlib's docs recipe does: @dataclass looks its module up there.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


kernel = load_example()


@pytest.fixture
def give_up() -> Iterator[None]:
    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"kernel.run() still going after {GIVE_UP_AFTER} seconds")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(GIVE_UP_AFTER)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.trio
async def test_crawls_the_demo_site_once_per_url() -> None:
    with trio.fail_after(HANG_LIMIT):
        async with trio.open_nursery() as nursery:
            root = await nursery.start(trio_crawler._demo.serve_demo)
            done = await trio.run_process(
                [sys.executable, EXAMPLE, root], capture_stdout=True, cwd=REPO_ROOT
            )
            nursery.cancel_scope.cancel("crawl finished")
    lines = done.stdout.decode().splitlines()
    fetched = [line.split() for line in lines if line.startswith("fetched ")]
    urls = [url for _, url, _ in fetched]
    assert len(urls) == len(set(urls)), "a URL was fetched twice"
    assert {urlsplit(url).netloc for url in urls} == {urlsplit(root).netloc}
    assert len(urls) > 250
    statuses = {url.removeprefix(root.rstrip("/")): status for _, url, status in fetched}
    assert statuses["/"] == "200"
    assert statuses["/coroutines/topic-1/page-1.html"] == "200"
    assert statuses["/protocols/topic-8/page-5.html"] == "200"
    assert statuses["/archive?page=3"] == "200"
    assert statuses["/redirect/start"] == "301"
    assert statuses["/missing.html"] == "404"
    assert lines[-1] == f"{len(urls)} urls fetched"


@pytest.mark.usefixtures("give_up")
def test_parent_waits_for_its_children() -> None:
    log: list[str] = []

    async def child(name: str, seconds: float) -> None:
        await kernel.Trap("sleep_until", time.monotonic() + seconds)
        log.append(name)

    async def parent() -> None:
        async with kernel.Nursery() as nursery:
            nursery.spawn(child("slow", 0.05))
            nursery.spawn(child("fast", 0.01))
        log.append("parent")

    kernel.run(parent())
    assert log == ["fast", "slow", "parent"]


@pytest.mark.usefixtures("give_up")
def test_child_error_cancels_siblings_and_reaches_the_parent() -> None:
    log: list[str] = []

    async def sleeper() -> None:
        try:
            await kernel.Trap("sleep_until", time.monotonic() + 60)
        except kernel.Cancelled:
            log.append("sibling cancelled")
            raise

    async def failing() -> None:
        await kernel.Trap("sleep_until", time.monotonic() + 0.01)
        raise ValueError("child failed")

    async def parent() -> None:
        async with kernel.Nursery() as nursery:
            nursery.spawn(sleeper())
            nursery.spawn(failing())
            await kernel.Trap("sleep_until", time.monotonic() + 60)  # the body is cancelled too
        log.append("not reached")

    started = time.monotonic()
    with pytest.raises(ValueError, match="child failed"):
        kernel.run(parent())
    assert log == ["sibling cancelled"]
    assert time.monotonic() - started < GIVE_UP_AFTER / 2


@pytest.mark.usefixtures("give_up")
def test_cancellation_is_level_triggered() -> None:
    caught: list[str] = []

    async def stubborn() -> str:
        with kernel.move_on_after(0.01) as scope:
            for attempt in range(3):
                try:
                    await kernel.Trap("sleep_until", time.monotonic() + 60)
                except kernel.Cancelled:  # swallowed, on purpose: the next trap raises again
                    caught.append(f"attempt {attempt}")
            await kernel.Trap("sleep_until", time.monotonic() + 60)  # raises; the scope catches
            caught.append("not reached")
        assert scope.cancelled
        await kernel.Trap("sleep_until", time.monotonic())  # outside the scope: runs normally
        return "after the scope"

    assert kernel.run(stubborn()) == "after the scope"
    assert caught == ["attempt 0", "attempt 1", "attempt 2"]

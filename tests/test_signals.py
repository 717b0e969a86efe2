"""Signals and shutdown: real SIGINT and SIGTERM sent to ``python -m trio_crawler``.

What a user and a service manager are promised (docs/usage.md, "Exit status and signals";
``_cli.py``): the first SIGINT or SIGTERM stops scheduling new URLs and gives the requests
in flight ``--grace`` seconds (default 5) to finish, then cancels them; a second signal
cancels them at once. Either way every finished URL is in the output as a whole JSON
line, the report is printed with ``Finish reason: interrupted``, the exit status is 130,
and nothing complains on the way out: no traceback, no unclosed resource, no task
destroyed pending, no coroutine never awaited.

Every test but one (which is about the CLI alone) runs once per engine. The child runs in
Python's development mode (``-X dev``: asyncio's debug mode, ``Task was destroyed`` and
``never awaited`` reported) with every ResourceWarning shown (``-W
always::ResourceWarning``), and its stderr is searched for those complaints
(:data:`COMPLAINTS`). The warnings are shown, not turned into errors: an error raised from
a finaliser is only printed as "Exception ignored", and an error raised in the middle of
the shutdown would change what is being tested.

Timing without sleeping. The test waits only for things the child causes: the server
receiving a request, or a line on the child's stderr (the CLI logs ``got SIGINT:
finishing the requests in flight ...`` as it acts on the first signal, and ``got SIGINT:
stopping the crawl now`` on the second). Where a test needs a request to stay in flight
until the child has acted on a signal, the server holds the reply until that line has
appeared, which no amount of machine load can reorder. ``trio.fail_after`` is the hang
detector. The only durations measured are the ones the options promise, with wide
margins: the crawl ends once the requests in flight are done, not at the end of the grace;
``--grace 1`` ends it after about a second; a second signal does not wait out a 30-second
grace.

The random runs (:func:`test_interrupted_at_a_random_moment`) crawl a generated site of a
hundred pages (and some 404s and redirects), some slow, some failing once, and signal the
child when the server has seen its k-th request, k random, with one of several plans of
signals (:data:`PLANS`). Each run's seed is derived from ``SIGNAL_TEST_SEED`` (default below; set
it, and ``SIGNAL_TEST_RUNS``, to explore other runs) and the test's parameters, and is in
every assertion message, so a failure can be replayed.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from trio_crawler._cli import ENGINES

from httpserver import DropConnection, Handler, Reply, Request, open_test_server
from support import HANG_LIMIT, page, read_records

# The child is checked for these on stderr. "Exception ignored" is how Python reports an
# exception raised in a finaliser (an unclosed socket's __del__, say).
COMPLAINTS = (
    "Traceback",
    "ResourceWarning",
    "unclosed",
    "Unclosed",
    "Task was destroyed",
    "was never awaited",
    "Exception ignored",
)
GRACE_LINE = "finishing the requests in flight"
NOW_LINE = "stopping the crawl now"
# Seeds of the random runs: a run's seed is f"{SEED}-{engine}-{run}".
SEED = int(os.environ.get("SIGNAL_TEST_SEED", "20240611"))
# Runs per engine; each costs 2-4 s on a loaded 2-core machine, so the default is small.
# Set the variable higher (and SIGNAL_TEST_SEED to a new value) for a soak run.
RUNS_PER_ENGINE = int(os.environ.get("SIGNAL_TEST_RUNS", "2"))


def child_command(engine: str, *args: str) -> list[str]:
    """``python -m trio_crawler --engine ENGINE ARGS`` in development mode."""
    return [
        sys.executable,
        *("-X", "dev", "-W", "always::ResourceWarning"),
        *("-m", "trio_crawler", "--engine", engine, *args),
    ]


# -X dev turns asyncio's debug mode on too; the variable says so for anyone reading a log.
CHILD_ENVIRONMENT = {**os.environ, "PYTHONASYNCIODEBUG": "1"}


@dataclass(repr=False)
class Child:
    """A running ``trio_crawler`` process and everything it has written so far."""

    process: trio.Process
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    exited: trio.Event = field(default_factory=trio.Event)
    exited_at: float = 0.0  # trio.current_time() when it exited
    _stderr_changed: trio.Event = field(default_factory=trio.Event)

    async def wait_for_stderr(self, text: str) -> None:
        """Wait until ``text`` has appeared on stderr.

        Raises:
            AssertionError: If the child exits first.
        """
        while text not in self.stderr.decode(errors="replace"):
            if self.exited.is_set():
                raise AssertionError(f"the child exited without printing {text!r}: {self}")
            await self._stderr_changed.wait()

    async def _read(self, stream: trio.abc.ReceiveStream | None, into: bytearray) -> None:
        assert stream is not None
        async for chunk in stream:
            into.extend(chunk)
            if into is self.stderr:
                self._stderr_changed.set()
                self._stderr_changed = trio.Event()

    def report(self) -> list[str]:
        return self.stdout.decode().splitlines()

    def __repr__(self) -> str:  # what assertion messages show
        return (
            f"exit status {self.process.returncode}\n"
            f"--- stdout ---\n{self.stdout.decode(errors='replace')[-3000:]}\n"
            f"--- stderr ---\n{self.stderr.decode(errors='replace')[-3000:]}"
        )


@asynccontextmanager
async def open_child(command: list[str], *, read_stdout: bool = True) -> AsyncIterator[Child]:
    """Start ``command``; on leaving the block, wait for it to exit and its output to end.

    With ``read_stdout=False`` the block reads ``child.process.stdout`` itself (and must
    read it to the end). If the block raises (or the hang detector cancels it),
    ``trio.run_process`` kills the child, so no test leaves a process behind.
    """
    async with trio.open_nursery() as nursery:
        run = functools.partial(
            trio.run_process,
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=CHILD_ENVIRONMENT,
            check=False,
        )
        process: trio.Process = await nursery.start(run)
        child = Child(process)

        async def read_then_note_exit() -> None:
            async with trio.open_nursery() as readers:
                if read_stdout:
                    readers.start_soon(child._read, process.stdout, child.stdout)
                readers.start_soon(child._read, process.stderr, child.stderr)
                await process.wait()
            child.exited_at = trio.current_time()
            child.exited.set()
            child._stderr_changed.set()

        nursery.start_soon(read_then_note_exit)
        yield child
        await child.exited.wait()


async def wait_either(first: trio.Event, second: trio.Event) -> None:
    """Wait until either event is set."""
    async with trio.open_nursery() as nursery:

        async def wait_then_cancel(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(wait_then_cancel, first)
        nursery.start_soon(wait_then_cancel, second)


def assert_clean_interrupted_exit(
    child: Child, records: list[dict[str, object]], context: object = ""
) -> None:
    """Exit status 130, a whole report that says so and counts every record, no
    complaints on stderr. ``context`` goes into the assertion messages."""
    report = child.report()
    assert child.process.returncode == 130, f"{context}\n{child}"
    assert report[:1] == ["*** Report ***"], f"{context}\n{child}"
    assert report[-1:] == ["Finish reason: interrupted"], f"{context}\n{child}"
    assert f"Done: {len(records)}" in report, f"{context}\n{child}"
    stderr = child.stderr.decode(errors="replace")
    complaints = [complaint for complaint in COMPLAINTS if complaint in stderr]
    assert complaints == [], f"{context}\n{child}"


def urls(records: list[dict[str, object]]) -> list[object]:
    return [record["url"] for record in records]


# The crawler queues a page's links in sorted order, so the slow ones go first.
SLOW_PAGES = ("/a/slow1", "/a/slow2", "/a/slow3")
QUEUED_PAGES = ("/b/queued1", "/b/queued2", "/b/queued3", "/b/queued4", "/b/queued5")


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_grace_lets_the_requests_in_flight_finish(tmp_path: Path, engine: str) -> None:
    """Three pages are in flight when SIGINT arrives (with the default grace, 5 s); the
    server answers them only once the child has logged that it is finishing them. All
    three are in the output, none of the five URLs queued behind them is ever requested,
    and the crawl ends as soon as they are done, without waiting out the grace."""
    output = tmp_path / "out.jsonl"
    all_in_flight = trio.Event()
    grace_started = trio.Event()  # set once the child has logged that it acts on SIGINT

    async def slow(request: Request) -> Reply:
        if sum(server.hits[path] for path in SLOW_PAGES) == len(SLOW_PAGES):
            all_in_flight.set()
        await grace_started.wait()
        return page()

    routes = {"/": page(*SLOW_PAGES, *QUEUED_PAGES), **dict.fromkeys(SLOW_PAGES, slow)}
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server:
            command = child_command(
                engine, "--ignore-robots", "--max-tasks", "3", "-o", str(output), server.url()
            )
            async with open_child(command) as child:
                await wait_either(all_in_flight, child.exited)
                child.process.send_signal(signal.SIGINT)
                await child.wait_for_stderr(GRACE_LINE)
                grace_started.set()
    records = read_records(output, child)
    assert sorted(urls(records)) == sorted(server.url(p) for p in ("/", *SLOW_PAGES)), child
    assert not set(server.hits) & set(QUEUED_PAGES), child
    assert_clean_interrupted_exit(child, records)
    assert "Todo: 5" in child.report(), child
    assert "(up to 5 s;" in child.stderr.decode(), child  # the default grace
    # Ended by the core once nothing was in flight, not by the grace deadline, which is
    # 5 s after the signal and so more than 5 s after the crawl began.
    [finished] = [line for line in child.report() if line.startswith("Finished ")]
    assert float(finished.split()[4]) < 5, child


def never_answering_site(requested: trio.Event) -> dict[str, Handler]:
    async def never(request: Request) -> Reply:
        requested.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    # A chain: once /never is requested, / and /ok have finished, on any engine.
    return {"/": page("/ok"), "/ok": page("/never"), "/never": never}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_grace_expires_and_the_request_in_flight_is_cancelled(
    tmp_path: Path, engine: str
) -> None:
    """With ``--grace 1``, a page that never answers is cancelled about a second after
    SIGINT: the child exits 130, with every other page in the output and that one not."""
    output = tmp_path / "out.jsonl"
    never_requested = trio.Event()
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(never_answering_site(never_requested)) as server:
            command = child_command(
                engine, "--ignore-robots", "--grace", "1", "-o", str(output), server.url()
            )
            async with open_child(command) as child:
                await wait_either(never_requested, child.exited)
                child.process.send_signal(signal.SIGINT)
                signalled_at = trio.current_time()
    records = read_records(output, child)
    assert sorted(urls(records)) == [server.url("/"), server.url("/ok")], child
    assert_clean_interrupted_exit(child, records)
    assert "Todo: 1" in child.report(), child
    assert 1 <= child.exited_at - signalled_at < 10, child


# Same shape as the grace test above on purpose: one signal plan per test, read side by side.
@pytest.mark.parametrize(
    ("engine", "second"),
    [
        pytest.param(name, second, id=f"{name}-then-{second.name}")
        for name, second in zip(
            ENGINES, [signal.SIGINT, signal.SIGTERM, signal.SIGINT, signal.SIGTERM], strict=True
        )
    ],
)
@pytest.mark.trio
async def test_a_second_signal_cancels_at_once(
    tmp_path: Path, engine: str, second: signal.Signals
) -> None:
    """With ``--grace 30``, a second signal after the first (SIGINT, then SIGINT or
    SIGTERM, alternating over the engines) cancels the page in flight at once: the child
    exits 130 well within the grace, with that page not in the output."""
    output = tmp_path / "out.jsonl"
    never_requested = trio.Event()
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(never_answering_site(never_requested)) as server:
            command = child_command(
                engine, "--ignore-robots", "--grace", "30", "-o", str(output), server.url()
            )
            async with open_child(command) as child:
                await wait_either(never_requested, child.exited)
                child.process.send_signal(signal.SIGINT)
                await child.wait_for_stderr(GRACE_LINE)
                child.process.send_signal(second)
                signalled_at = trio.current_time()
    records = read_records(output, child)
    assert sorted(urls(records)) == [server.url("/"), server.url("/ok")], child
    assert_clean_interrupted_exit(child, records)
    assert f"got {second.name}: {NOW_LINE}" in child.stderr.decode(), child
    assert child.exited_at - signalled_at < 10, child


@pytest.mark.trio
async def test_sigterm_while_the_report_is_printed_leaves_the_report_whole() -> None:
    """The crawl is over and its report (about 400 KB: two hundred URLs of 2000
    characters, several times what a pipe holds) is being written to a pipe the test has
    not read yet, so the child is still printing it when SIGTERM arrives. The report
    should still come out whole, with status 130 (or 0: the crawl did finish).

    SIGINT there is a KeyboardInterrupt inside ``print()``: status 130, report cut short,
    as ``_cli.py``'s docstring describes (a Ctrl-C that stops a long report is
    defensible), so only SIGTERM is tested. One engine: the report is printed after the
    engine's event loop has returned, so the engine plays no part."""
    long_path = "x" * 1990
    routes = {"/": page(*(f"/long/{number}/{long_path}" for number in range(200)))}
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(routes) as server:  # the long URLs are 404s
            command = child_command("trio", "--ignore-robots", server.url())
            async with open_child(command, read_stdout=False) as child:
                assert child.process.stdout is not None
                # The first byte of stdout is the report's: the crawl is over.
                child.stdout += await child.process.stdout.receive_some(1)
                child.process.send_signal(signal.SIGTERM)
                await child._read(child.process.stdout, child.stdout)
    report = child.report()
    assert len(report) > 200, child
    assert report[-1].startswith("Finish reason: "), child
    assert child.process.returncode in (0, 130), child


# -- random moments -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """What a random run sends, and with which ``--grace``.

    ``second_after_log``: the second signal is sent once the child has logged that it
    acted on the first; until it has acted on the second too, the server holds every
    reply, so the grace cannot let the crawl end before the second signal lands.
    Otherwise two signals go back to back (two different ones: two of the same, sent
    before the first is handled, may arrive as one).
    """

    signals: tuple[signal.Signals, ...]
    grace: str
    second_after_log: bool = False

    @property
    def waits_for_in_flight(self) -> bool:
        """Whether every request in flight must finish (one signal, a long grace)."""
        return len(self.signals) == 1 and self.grace != "0"

    @property
    def cancels_at_once(self) -> bool:
        """Whether the child cancels what is in flight before the held reply is sent
        (the test holds it until the child has logged that it stops now)."""
        return self.grace == "0" or len(self.signals) == 2

    def __str__(self) -> str:
        names = "+".join(signum.name for signum in self.signals)
        return f"{names} --grace {self.grace}" + (" (second after log)" * self.second_after_log)


# In an order that gives each engine, in its first two runs, one plan that waits for the
# requests in flight (the first two) and one that cancels them (the others).
PLANS = [
    Plan((signal.SIGINT,), "5"),
    Plan((signal.SIGTERM,), "5"),
    Plan((signal.SIGINT,), "0"),
    Plan((signal.SIGINT, signal.SIGTERM), "5"),
    Plan((signal.SIGTERM, signal.SIGINT), "30", second_after_log=True),
    Plan((signal.SIGINT, signal.SIGINT), "30", second_after_log=True),
]
SITE_PAGES = 100


class RandomSite:
    """A generated site: page ``/p/N`` links to its three children in a tree of
    ``SITE_PAGES`` pages and to a random page; some pages also link to a 404, to a
    redirect, or off-site. Some pages are slow (the server waits up to 0.2 s before
    answering), some fail once (the server hangs up) and are retried.

    The server holds its ``trigger_at``-th request, and with it the end of the crawl,
    until the test sets ``child_acted``: that is the random moment.
    """

    def __init__(self, rng: random.Random) -> None:
        self.links: dict[str, list[str]] = {"/": ["/p/0"]}
        self.redirects: dict[str, str] = {}
        self.slow: dict[str, float] = {}
        self.fail_once: set[str] = set()
        for number in range(SITE_PAGES):
            path = f"/p/{number}"
            children = [f"/p/{child}" for child in range(3 * number + 1, 3 * number + 4)]
            links = [link for link in children if int(link[3:]) < SITE_PAGES]
            links.append(f"/p/{rng.randrange(SITE_PAGES)}")
            if rng.random() < 0.1:
                links.append(f"/missing/{number}")
            if rng.random() < 0.1:
                self.redirects[f"/r/{number}"] = f"/p/{rng.randrange(SITE_PAGES)}"
                links.append(f"/r/{number}")
            if rng.random() < 0.05:
                links.append("http://elsewhere.invalid/")  # out of scope: never fetched
            self.links[path] = links
            if rng.random() < 0.1:
                self.slow[path] = rng.uniform(0.02, 0.2)
            if rng.random() < 0.05:
                self.fail_once.add(path)
        self.failed: set[str] = set()
        self.requests = 0
        self.trigger_at = 0  # set by the test
        self.freeze_at_trigger = False  # set by the test: hold every reply from then on
        self.held: str | None = None
        self.triggered = trio.Event()
        self.child_acted = trio.Event()
        self.frozen = False
        self.thawed = trio.Event()

    def expected_requests(self, *, robots: bool) -> int:
        """Requests a whole crawl makes: every reachable URL, the retries, robots.txt."""
        reachable, frontier = {"/"}, ["/"]
        while frontier:
            path = frontier.pop()
            for link in [*self.links.get(path, []), *[self.redirects.get(path, "")]]:
                if link.startswith("/") and link not in reachable:
                    reachable.add(link)
                    frontier.append(link)
        return len(reachable) + len(self.fail_once & reachable) + robots

    async def handle(self, request: Request) -> Reply:
        self.requests += 1
        path = request.target
        if self.requests == self.trigger_at:
            self.held = path
            self.frozen = self.freeze_at_trigger
            self.triggered.set()
            await self.child_acted.wait()
        elif path in self.slow:
            await trio.sleep(self.slow[path])  # the server's own latency
        if self.frozen:
            await self.thawed.wait()
        if path in self.fail_once and path not in self.failed:
            self.failed.add(path)
            raise DropConnection
        if path in self.redirects:
            return Reply.redirect(self.redirects[path])
        if path in self.links:
            return page(*self.links[path])
        return Reply.html("not found", status=404)


@pytest.mark.parametrize("run", range(RUNS_PER_ENGINE))
@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.trio
async def test_interrupted_at_a_random_moment(tmp_path: Path, engine: str, run: int) -> None:
    """Signal the child at a random request of a random crawl, and check everything the
    contract promises about an interrupted crawl."""
    seed = f"{SEED}-{engine}-{run}"
    rng = random.Random(seed)
    site = RandomSite(rng)
    # Plans in turn rather than at random, so that each engine gets a plan that waits for
    # the requests in flight and one that cancels them, with as few as two runs each.
    plan = PLANS[(run * len(ENGINES) + list(ENGINES).index(engine)) % len(PLANS)]
    robots = rng.random() < 0.5
    max_tasks = rng.choice([3, 10, 50])
    site.trigger_at = rng.randint(1, site.expected_requests(robots=robots))
    site.freeze_at_trigger = plan.second_after_log
    output = tmp_path / "out.jsonl"
    options = ["--max-tasks", str(max_tasks), "--grace", plan.grace, "-o", str(output)]
    options += [] if robots else ["--ignore-robots"]

    def context() -> str:
        return (
            f"seed {seed!r} (SIGNAL_TEST_SEED={SEED}): {plan}, --max-tasks {max_tasks}, "
            f"robots.txt {'obeyed' if robots else 'ignored'}, "
            f"signalled at request {site.trigger_at} ({site.held})"
        )

    with trio.fail_after(HANG_LIMIT):
        async with open_test_server() as server:
            server.fallback(site.handle)
            async with open_child(child_command(engine, *options, server.url())) as child:
                await wait_either(site.triggered, child.exited)
                assert site.triggered.is_set(), f"the crawl ended first: {context()}\n{child}"
                first, *others = plan.signals
                child.process.send_signal(first)
                if plan.second_after_log:
                    await child.wait_for_stderr(GRACE_LINE)
                for signum in others:
                    child.process.send_signal(signum)
                await child.wait_for_stderr(NOW_LINE if plan.cancels_at_once else GRACE_LINE)
                site.child_acted.set()
                site.thawed.set()

    records = read_records(output, f"{context()}\n{child}")
    assert_clean_interrupted_exit(child, records, context())
    fetched = set(urls(records))
    assert len(fetched) == len(records), f"a URL recorded twice: {context()}\n{child}"
    requested = {server.url(path) for path in server.hits if path != "/robots.txt"}
    assert fetched <= requested, f"recorded, never requested: {context()}\n{child}"
    if plan.waits_for_in_flight:
        assert fetched == requested, f"requested, not recorded: {context()}\n{child}"
    if plan.cancels_at_once and site.held != "/robots.txt":
        assert server.url(site.held) not in fetched, f"held page recorded: {context()}"

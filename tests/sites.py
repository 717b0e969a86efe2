"""A generated site for crawls run as child processes, and the way to run them.

Shared by the tests of crawls that outlive one process (``--state``) and of crawls shared
by many (``--frontier``): the site counts what it served, per path, and can set an event at
the k-th page, so that a test signals a child at a request count rather than a time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import trio

from httpserver import Reply, Request


@dataclass
class Site:
    """A generated site of ``pages`` pages, each linking to the next and to four others,
    with ETags; a page may change (new ETag, new links) or go away (404)."""

    pages: int
    rng: random.Random
    links: dict[int, list[int]] = field(default_factory=dict)
    version: dict[int, int] = field(default_factory=dict)
    removed: set[int] = field(default_factory=set)
    served: int = 0
    trigger_at: int = 0
    triggered: trio.Event = field(default_factory=trio.Event)
    fetched: dict[str, int] = field(default_factory=dict)  # 200 replies per path
    conditional: int = 0  # requests that carried If-None-Match
    pause: float = 0.0  # seconds each page takes to answer: a slow server
    starts: list[float] = field(default_factory=list)  # when each page request arrived
    last_served: float = 0.0
    begun: trio.Event = field(default_factory=trio.Event)  # the first page was asked for
    in_flight: int = 0  # page requests being answered now
    peak: int = 0  # the most at once

    def __post_init__(self) -> None:
        for number in range(self.pages):
            others = self.rng.sample(range(self.pages), 4)
            self.links[number] = [number + 1, *others] if number + 1 < self.pages else others

    def paths(self) -> set[str]:
        return {f"/p/{number}.html" for number in self.links if number not in self.removed}

    def arm(self, count: int) -> None:
        """Set :attr:`triggered` when ``count`` more pages have been served."""
        self.trigger_at = self.served + count
        self.triggered = trio.Event()

    async def handle(self, request: Request) -> Reply:
        name = request.target.removeprefix("/p/").removesuffix(".html")
        if not request.target.startswith("/p/") or not name.isdigit():
            return Reply.html("not found", status=404)
        number = int(name)
        self.starts.append(trio.current_time())
        self.begun.set()
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.pause:
                await trio.sleep(self.pause)
        finally:
            self.in_flight -= 1
        if number not in self.links or number in self.removed:
            return Reply.html("gone", status=404)
        etag = f'"{number}-{self.version.get(number, 0)}"'
        if "if-none-match" in request.headers:
            self.conditional += 1
            if request.headers["if-none-match"] == etag:
                return Reply(status=304, headers=(("etag", etag),))
        self.served += 1
        self.last_served = trio.current_time()
        self.fetched[request.target] = self.fetched.get(request.target, 0) + 1
        if self.served == self.trigger_at:
            self.triggered.set()
        body = "".join(f'<a href="/p/{link}.html">{link}</a> ' for link in self.links[number])
        reply = Reply.html(f"<html><body>{body}</body></html>")
        return Reply(status=200, headers=(*reply.headers, ("etag", etag)), body=reply.body)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (
            f"exit {self.returncode}\nstdout: {self.stdout[-1500:]}\nstderr: {self.stderr[-3000:]}"
        )


async def run_child(
    args: list[str],
    tmp_path: Path,
    *,
    site: Site | None = None,
    send: int | None = None,
    name: str = "child",
    ended: list[float] | None = None,
    env: dict[str, str] | None = None,
    when: trio.Event | None = None,
) -> Run:
    """Run the command; if ``send`` is given, send it that signal once ``site`` triggers,
    or once ``when`` is set.

    ``ended``, if given, gets the time the process exited (Trio's clock).
    """
    out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    trigger = when if when is not None else None if site is None else site.triggered
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = await trio.lowlevel.open_process(args, stdout=stdout, stderr=stderr, env=env)
        async with trio.open_nursery() as nursery:
            if trigger is not None and send is not None:

                async def signal_when_triggered() -> None:
                    assert trigger is not None
                    assert send is not None
                    await trigger.wait()
                    process.send_signal(send)

                nursery.start_soon(signal_when_triggered)
            returncode = await process.wait()
            if ended is not None:
                ended.append(trio.current_time())
            nursery.cancel_scope.cancel()
    return Run(returncode, out.read_text(), err.read_text())

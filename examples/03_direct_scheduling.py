"""Direct scheduling: a kernel with no futures and no callbacks, and a crawl built on it.

A coroutine yields a *trap*, ``Trap("wait_readable", sock)``, straight to the scheduler, which
parks it and resumes it with ``coro.send(None)`` or ``coro.throw(Cancelled())``: no Future, no
callback. That is enough for a nursery (the parent waits for its children; a child's error
cancels its siblings and reaches the parent) and for level-triggered cancellation (once a
``move_on_after(seconds)`` scope expires, EVERY trap inside it raises Cancelled).

Run: ``python examples/03_direct_scheduling.py [ROOT_URL] [--max-time SECONDS]`` (no root: the
demo site). Prints ``fetched <url> <status>`` per URL, then ``<N> urls fetched``.
"""

from __future__ import annotations

import argparse
import heapq
import math
import re
import selectors
import socket
import sys
import time
from collections import deque
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

EVENTS = {"wait_readable": selectors.EVENT_READ, "wait_writable": selectors.EVENT_WRITE}
QUEUES = ("wait_woken", "wait_children")  # park on a list until someone wakes them


class Cancelled(BaseException):
    """Raised at every trap in a cancelled scope."""


class Trap:
    def __init__(self, kind: str, arg: Any = None) -> None:
        self.kind, self.arg = kind, arg

    def __await__(self) -> Any:
        yield self  # up through every ``await``, out of the coro.send() in Kernel.loop


class CancelScope:
    def __init__(self, deadline: float = math.inf) -> None:
        self.deadline = deadline

    @property
    def cancelled(self) -> bool:
        return time.monotonic() >= self.deadline

    def cancel(self) -> None:
        self.deadline = -math.inf  # Kernel.loop throws Cancelled into the tasks parked in it

    def __enter__(self) -> CancelScope:
        KERNEL.current.scopes.append(self)
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        KERNEL.current.scopes.remove(self)
        return isinstance(exc, Cancelled) and self.cancelled


def move_on_after(seconds: float) -> CancelScope:
    return CancelScope(time.monotonic() + seconds)


class Task:
    def __init__(self, coro: Any, scopes: list[CancelScope], nursery: Nursery | None) -> None:
        self.coro, self.scopes, self.nursery, self.parked = coro, scopes, nursery, None
        self.result, self.error = None, None

    def cancelled(self) -> bool:
        return any(scope.cancelled for scope in self.scopes)


class Nursery:
    async def __aenter__(self) -> Nursery:
        self.scope, self.children, self.waiters, self.error = CancelScope(), set(), [], None
        self.scopes = [*KERNEL.current.scopes, self.scope.__enter__()]
        return self

    def spawn(self, coro: Any) -> None:
        self.children.add(KERNEL.spawn(Task(coro, [*self.scopes], self)))

    def fail(self, error: BaseException) -> None:
        if not isinstance(error, Cancelled) and self.error is None:
            self.error = error
            self.scope.cancel()  # the children, and the parent's body

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.fail(exc)
        while self.children:
            await Trap("wait_children", self.waiters)  # never cancelled
        KERNEL.current.scopes.remove(self.scope)
        if self.error is not None and self.error is not exc:
            raise self.error  # else the body's own exception goes on


class Kernel:
    def __init__(self) -> None:
        self.ready: deque[tuple[Task, BaseException | None]] = deque()
        self.timers: list[tuple[float, int, Task, Trap]] = []  # a heap, for sleep_until
        self.selector, self.tasks = selectors.DefaultSelector(), set[Task]()

    def spawn(self, task: Task) -> Task:
        self.tasks.add(task)
        self.ready.append((task, None))
        return task

    def wake(self, task: Task, exc: BaseException | None = None) -> None:
        trap, task.parked = task.parked, None
        if trap.kind in QUEUES:
            trap.arg.remove(task)
        elif trap.kind in EVENTS:
            self.selector.unregister(trap.arg)
        self.ready.append((task, exc))

    def step(self, task: Task, exc: BaseException | None) -> None:
        self.current = task
        try:
            trap = task.coro.throw(exc) if exc else task.coro.send(None)
        except StopIteration as done:
            return self.finish(task, done.value, None)
        except BaseException as error:
            return self.finish(task, None, error)
        if trap.kind != "wait_children" and task.cancelled():
            return self.ready.append((task, Cancelled()))  # level-triggered: every trap raises
        task.parked = trap
        if trap.kind in EVENTS:
            self.selector.register(trap.arg, EVENTS[trap.kind], task)
        elif trap.kind == "sleep_until":
            heapq.heappush(self.timers, (trap.arg, id(trap), task, trap))
        else:
            trap.arg.append(task)
        return None

    def finish(self, task: Task, result: Any, error: BaseException | None) -> None:
        self.tasks.discard(task)
        task.result, task.error = result, error
        if nursery := task.nursery:
            nursery.children.discard(task)
            if error is not None:
                nursery.fail(error)  # it reaches the parent from Nursery.__aexit__
            if not nursery.children:
                for waiter in nursery.waiters[:]:
                    self.wake(waiter)

    def loop(self, main: Task, give_up_at: float) -> None:
        while True:
            for _ in range(len(self.ready)):
                self.step(*self.ready.popleft())
            if main not in self.tasks:
                return
            parked = [t for t in self.tasks if t.parked and t.parked.kind != "wait_children"]
            for task in [task for task in parked if task.cancelled()]:
                self.wake(task, Cancelled())
            deadlines = [s.deadline for t in parked for s in t.scopes] + [t[0] for t in self.timers]
            timeout = 0 if self.ready else min([give_up_at, *deadlines]) - time.monotonic()
            if time.monotonic() > give_up_at:
                raise TimeoutError("run() still going after give_up_after")
            for key, _ in self.selector.select(None if timeout == math.inf else max(timeout, 0)):
                self.wake(key.data)
            while self.timers and self.timers[0][0] <= time.monotonic():
                _, _, task, trap = heapq.heappop(self.timers)
                if task.parked is trap:  # else it left that trap already, Cancelled
                    self.wake(task)


def run(main: Any, *, give_up_after: float = math.inf) -> Any:
    """Run ``main``; return its result or raise its error (TimeoutError after give_up_after)."""
    global KERNEL
    KERNEL = Kernel()
    KERNEL.loop(task := KERNEL.spawn(Task(main, [], None)), time.monotonic() + give_up_after)
    if task.error is not None:
        raise task.error
    return task.result


async def fetch(url: str) -> tuple[int, list[str]]:
    parts, chunks = urlsplit(url), [b"?"]
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    unsent = f"GET {path} HTTP/1.0\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode()
    with socket.socket() as sock:
        sock.setblocking(False)
        sock.connect_ex((parts.hostname, parts.port or 80))  # writable once connected
        while unsent:
            await Trap("wait_writable", sock)
            unsent = unsent[sock.send(unsent) :]
        while chunks[-1]:  # until the server closes
            await Trap("wait_readable", sock)
            chunks.append(sock.recv(65536))
    head, _, body = b"".join(chunks[1:]).partition(b"\r\n\r\n")
    return int(head.split()[1]), re.findall(r"""href=["']([^"']*)""", body.decode(errors="replace"))


class Crawl:  # MAX_WORKERS workers; ``pending`` counts queued plus in-flight URLs: 0 ends it
    def __init__(self, root: str, max_workers: int = 10) -> None:
        self.netloc, self.frontier, self.seen = urlsplit(root).netloc, deque[str](), set[str]()
        self.pending, self.fetched, self.idle, self.max_workers = 0, 0, list[Task](), max_workers
        self.add(root)

    def add(self, url: str) -> None:
        url = urldefrag(url).url
        if urlsplit(url).netloc == self.netloc and url.startswith("http:") and url not in self.seen:
            self.seen.add(url)
            self.frontier.append(url)
            self.pending += 1

    async def worker(self) -> None:
        while self.pending:
            if not self.frontier:
                await Trap("wait_woken", self.idle)  # for new URLs, or the end
                continue
            url = self.frontier.popleft()
            try:
                status, links = await fetch(url)
            except (OSError, ValueError, IndexError):
                status, links = "failed", []
            print(f"fetched {url} {status}", flush=True)
            self.fetched += 1
            for link in links:
                self.add(urljoin(url, link))
            self.pending -= 1
            for waiter in self.idle[:]:
                KERNEL.wake(waiter)

    async def run(self, max_time: float) -> None:
        with move_on_after(max_time):
            async with Nursery() as nursery:
                for _ in range(self.max_workers):
                    nursery.spawn(self.worker())


def main() -> None:
    parser = argparse.ArgumentParser(description="Crawl a site on a tiny trap-based kernel.")
    parser.add_argument("root", nargs="?", help="the URL to start from (default: the demo site)")
    parser.add_argument("--max-time", type=float, default=math.inf, help="stop after SECONDS")
    args = parser.parse_args()
    from _demo import demo_root  # here, so tests can import the kernel without examples/ on path

    with demo_root([sys.argv[0], *([args.root] if args.root else [])]) as root:
        run((crawl := Crawl(root)).run(args.max_time))
    print(f"{crawl.fetched} urls fetched")


if __name__ == "__main__":
    main()

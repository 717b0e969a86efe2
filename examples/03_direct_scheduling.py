"""Direct scheduling, as in Trio: a coroutine awaits ``Trap(kind, arg)`` straight to the scheduler
(no futures, no callbacks); on that, a Nursery, level-triggered cancellation, and a crawl.
Run: ``python examples/03_direct_scheduling.py [ROOT_URL] [--max-time SECONDS]``."""

import argparse
import heapq
import math
import re
import selectors
import socket
import time
from collections import deque
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

EVENTS = {"wait_readable": selectors.EVENT_READ, "wait_writable": selectors.EVENT_WRITE}


class Cancelled(BaseException):
    """Raised at every trap in a cancelled scope."""


class Trap:
    def __init__(self, kind: str, arg: Any = None) -> None:
        self.kind, self.arg = kind, arg

    def __await__(self) -> Any:
        yield self  # up through every ``await``, out of the coro.send() in run()


class CancelScope:
    def __init__(self, seconds: float = math.inf) -> None:
        self.deadline = time.monotonic() + seconds

    @property
    def cancelled(self) -> bool:
        return time.monotonic() >= self.deadline

    def __enter__(self) -> "CancelScope":
        current.scopes.append(self)
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        current.scopes.remove(self)
        return isinstance(exc, Cancelled) and self.cancelled


move_on_after = CancelScope


class Nursery(CancelScope):  # its scope holds the children and the parent's body
    async def __aenter__(self) -> "Nursery":
        self.parent, self.children, self.error = current, set[Task](), None
        return self.__enter__()

    def spawn(self, coro: Any) -> None:
        self.children.add(Task(coro, [*self.parent.scopes], self))

    def fail(self, error: BaseException) -> None:
        if not isinstance(error, Cancelled | StopIteration) and self.error is None:
            self.error, self.deadline = error, -math.inf  # cancels them all

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.fail(exc or Cancelled())
        while self.children:
            await Trap("wait_children", self)  # never cancelled; the last child wakes it
        self.parent.scopes.remove(self)
        if self.error is not None and self.error is not exc:
            raise self.error  # else the body's own exception goes on


class Task:
    def __init__(self, coro: Any, scopes: list[CancelScope], nursery: Nursery | None = None):
        self.coro, self.scopes, self.nursery, self.trap = coro, scopes, nursery, None
        tasks.add(self)
        ready.append((self, None))


def wake(task: Task, exc: BaseException | None = None) -> None:
    if task.trap.kind in EVENTS:
        selector.unregister(task.trap.arg)
    task.trap = None
    ready.append((task, exc))


def run(main: Any) -> Any:
    """Run ``main``; return its result or raise its error."""
    global ready, timers, selector, tasks, current  # the kernel's state; timers: a heap
    ready, timers, selector, tasks = deque(), [], selectors.DefaultSelector(), set()
    first = Task(main, [])
    while first in tasks:
        parked = [t for t in tasks if t.trap and t.trap.kind != "wait_children"]
        for task in [t for t in parked if any(s.cancelled for s in t.scopes)]:
            wake(task, Cancelled())  # level-triggered: every trap in a cancelled scope raises
        deadlines = [s.deadline for t in parked for s in t.scopes] + [t[0] for t in timers]
        timeout = 0 if ready else min(deadlines, default=math.inf) - time.monotonic()
        for key, _ in selector.select(None if timeout == math.inf else max(timeout, 0)):
            wake(key.data)
        while timers and timers[0][0] <= time.monotonic():
            _, _, task, trap = heapq.heappop(timers)
            if task.trap is trap:  # else it left that trap already, Cancelled
                wake(task)
        while ready:
            current, exc = ready.popleft()
            try:
                trap = current.coro.throw(exc) if exc else current.coro.send(None)
            except BaseException as end:  # StopIteration carries the result
                tasks.discard(current)
                current.end = end
                if nursery := current.nursery:
                    nursery.children.discard(current)
                    nursery.fail(end)  # it reaches the parent from Nursery.__aexit__
                    if not nursery.children and getattr(nursery.parent.trap, "arg", 0) is nursery:
                        wake(nursery.parent)
                continue
            current.trap = trap  # parked; if its scope is cancelled, woken by the scan above
            if trap.kind in EVENTS:
                selector.register(trap.arg, EVENTS[trap.kind], current)
            elif trap.kind == "sleep_until":
                heapq.heappush(timers, (trap.arg, id(trap), current, trap))
    if not isinstance(first.end, StopIteration):
        raise first.end
    return first.end.value


async def fetch(url: str) -> tuple[int, list[str]]:
    parts, chunks = urlsplit(url), [b"?"]
    target = parts._replace(scheme="", netloc="").geturl() or "/"
    request = f"GET {target} HTTP/1.0\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
    with socket.socket() as sock:
        sock.setblocking(False)
        sock.connect_ex((parts.hostname, parts.port or 80))  # writable once connected
        await Trap("wait_writable", sock)
        sock.send(request.encode())  # a few bytes: one send() takes them all
        while chunks[-1]:  # until the server closes
            await Trap("wait_readable", sock)
            chunks.append(sock.recv(65536))
    head, _, body = b"".join(chunks[1:]).partition(b"\r\n\r\n")
    links = re.findall(r"""href=["']([^"']*)""", body.decode(errors="replace"))
    return int(head.split()[1]), [urldefrag(urljoin(url, link)).url for link in links]


async def crawl(root: str, max_time: float) -> int:
    frontier, seen, pending = deque([root]), {root}, 1  # pending: queued plus in-flight URLs

    async def worker() -> None:
        nonlocal pending
        while pending:  # 0 ends the crawl
            if not frontier:  # poll for new URLs, or the end
                await Trap("sleep_until", time.monotonic() + 0.01)
                continue
            url = frontier.popleft()
            try:
                status, links = await fetch(url)
            except (OSError, ValueError, IndexError):
                status, links = "failed", []
            print(f"fetched {url} {status}", flush=True)
            new = {link for link in links if urlsplit(link)[:2] == urlsplit(root)[:2]} - seen
            seen.update(new)
            frontier.extend(new)
            pending += len(new) - 1

    with move_on_after(max_time):
        async with Nursery() as nursery:
            for _ in range(10):
                nursery.spawn(worker())
    return len(seen) - pending


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", nargs="?", help="the URL to start from (default: the demo site)")
    parser.add_argument("--max-time", type=float, default=math.inf, help="stop after SECONDS")
    args = parser.parse_args()
    from _demo import demo_root  # here, so tests can import the kernel without examples/ on path

    with demo_root(["", *filter(None, [args.root])]) as root:
        fetched = run(crawl(root, args.max_time))
    print(f"{fetched} urls fetched")

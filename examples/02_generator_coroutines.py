"""Stage 2 of the chapter: generator coroutines, a Future and a Task, on the same loop.

The ``selectors`` loop of ``01_callbacks.py`` is unchanged, but a fetch is now one generator,
``Fetcher.fetch``, that ``yield from``s a ``Future`` wherever stage 1 registered a callback; a
``Task`` drives it, sending each future's result back in. The socket and the bytes read are
plain local variables that survive every wait, and ``read``/``read_all`` are sub-coroutines.

It still lacks what the chapter's next stage and the library add: cancelling a task, getting
its error to someone who can handle it (each fetch catches its own network errors), a
concurrency cap (one Task per URL), redirects and retries. Links come from a naive ``href``
regex; the library uses a real HTML parser.

Run: ``python examples/02_generator_coroutines.py [ROOT_URL]`` (no ROOT_URL: it serves the
demo site itself). It prints ``fetched <url> <status>`` per URL, then ``<N> urls fetched``.
"""

from __future__ import annotations

from _demo import demo_root, parse_response  # first: it explains a missing dependency

import socket
from collections.abc import Callable, Generator
from contextlib import suppress
from selectors import EVENT_READ, EVENT_WRITE, DefaultSelector
from typing import Any
from urllib.parse import urlsplit

selector = DefaultSelector()
urls_todo: set[str] = set()
seen_urls: set[str] = set()
stopped = False
fetched = 0

# A coroutine yields Futures, is sent their results, and returns a value.
Coroutine = Generator["Future", Any, Any]


class Future:
    def __init__(self) -> None:
        self.result: Any = None
        self._callbacks: list[Callable[[Future], None]] = []

    def add_done_callback(self, fn: Callable[[Future], None]) -> None:
        self._callbacks.append(fn)

    def set_result(self, result: Any) -> None:
        self.result = result
        for fn in self._callbacks:
            fn(self)

    def __iter__(self) -> Coroutine:
        yield self  # Tell the Task to resume me here...
        return self.result  # ...with the result, which becomes the value of "yield from".


class Task:
    def __init__(self, coro: Coroutine) -> None:
        self.coro = coro
        f = Future()
        f.set_result(None)
        self.step(f)

    def step(self, future: Future) -> None:
        try:
            next_future = self.coro.send(future.result)
        except StopIteration:
            return
        next_future.add_done_callback(self.step)


def wait_for(sock: socket.socket, event: int) -> Coroutine:
    f = Future()
    selector.register(sock, event, lambda: f.set_result(None))
    yield from f
    selector.unregister(sock)


def read(sock: socket.socket) -> Coroutine:  # one chunk; b"" at EOF (or a reset)
    yield from wait_for(sock, EVENT_READ)
    try:
        return sock.recv(4096)
    except OSError:
        return b""


def read_all(sock: socket.socket) -> Coroutine:  # until the server closes (HTTP/1.0)
    response = []
    chunk = yield from read(sock)
    while chunk:
        response.append(chunk)
        chunk = yield from read(sock)
    return b"".join(response)


class Fetcher:
    def __init__(self, url: str) -> None:
        self.url = url

    def fetch(self) -> Coroutine:
        global stopped, fetched
        parts = urlsplit(self.url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        request = f"GET {target} HTTP/1.0\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
        with socket.socket() as sock:  # Closed however the fetch ends.
            sock.setblocking(False)
            with suppress(BlockingIOError):  # Connecting is under way: "writable" says when done.
                sock.connect((parts.hostname, parts.port or 80))
            yield from wait_for(sock, EVENT_WRITE)
            try:
                sock.send(request.encode("ascii"))  # Small: one send() takes it all.
                response = yield from read_all(sock)
            except OSError:  # The connection was refused.
                response = b""
        status, links = parse_response(self.url, response)
        print(f"fetched {self.url} {status}")
        fetched += 1
        for link in links.difference(seen_urls):
            urls_todo.add(link)
            Task(Fetcher(link).fetch())  # <- New Task, no cap.
        seen_urls.update(links)
        urls_todo.remove(self.url)
        if not urls_todo:
            stopped = True


def loop() -> None:
    while not stopped:
        events = selector.select()
        for event_key, _event_mask in events:
            callback = event_key.data
            callback()  # Each callback only resolves a future; the Task does the rest.


def main() -> None:
    with demo_root() as root:
        urls_todo.add(root)
        seen_urls.add(root)
        Task(Fetcher(root).fetch())
        loop()
        selector.close()
    print(f"{fetched} urls fetched")


if __name__ == "__main__":
    main()

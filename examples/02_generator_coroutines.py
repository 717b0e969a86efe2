"""Stage 2 of the chapter: generator coroutines, a Future and a Task, on the same loop.

What it shows: the ``selectors`` loop of ``01_callbacks.py`` is unchanged, but a fetch is now
one generator, ``Fetcher.fetch``. Where stage 1 registered the next callback and returned, it
now ``yield from``s a ``Future``; a ``Task`` drives the generator, sending each future's
result back in when the loop resolves it. ``read`` and ``read_all`` are sub-coroutines, called
with ``yield from`` like ordinary functions. Still no concurrency cap: one Task per URL.

What to notice: the socket, the request and the bytes read are plain local variables that
survive every wait; the callbacks shrank to one-liners that resolve a future. Every
``yield from`` marks a place where other fetches may run; between them, nothing can.

What it lacks, compared with the chapter's next stage and the library: cancelling a task, or
getting its error to someone who can handle it (here an exception escapes from ``Task.step``
into whatever resolved the future, the loop itself, and ends the crawl, so each fetch catches
its own network errors); a concurrency cap (``asyncio.Queue`` and ``join()`` in the chapter,
nurseries and channels in ``trio_crawler.engine_trio``); redirects and retries. Links come
from a naive ``href`` regex; the library uses a real HTML parser (``trio_crawler._links``).

Run it::

    python examples/02_generator_coroutines.py [ROOT_URL]

Without ROOT_URL it serves the bundled demo site itself. It prints ``fetched <url> <status>``
per URL, then ``<N> urls fetched``.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Generator
from contextlib import suppress
from selectors import EVENT_READ, EVENT_WRITE, DefaultSelector
from typing import Any
from urllib.parse import quote, urldefrag, urljoin, urlsplit

from _demo import demo_root

# Good enough for the demo's markup; the library uses a real parser instead.
HREF = re.compile(rb"""href=["']([^"']+)["']""", re.IGNORECASE)
# Left as they are when a URL is percent-encoded: RFC 3986 reserved and unreserved, and "%".
URL_SAFE = "/%:@!$&'()*+,;=-._~?#"

selector = DefaultSelector()
urls_todo: set[str] = set()
seen_urls: set[str] = set()
stopped = False
fetched = 0

# A coroutine yields Futures, is sent their results, and returns a value.
Coroutine = Generator["Future", Any, Any]


class Future:
    """A result that is not there yet; callbacks run when ``set_result`` supplies it."""

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
    """Drives a coroutine: sends in each future's result once the future resolves."""

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
    """Pause until ``sock`` is ready for ``event`` (EVENT_READ or EVENT_WRITE)."""
    f = Future()
    selector.register(sock, event, lambda: f.set_result(None))
    yield from f
    selector.unregister(sock)


def read(sock: socket.socket) -> Coroutine:
    """Read one chunk; b"" means EOF (or a reset, which we treat the same)."""
    yield from wait_for(sock, EVENT_READ)
    try:
        return sock.recv(4096)
    except OSError:
        return b""


def read_all(sock: socket.socket) -> Coroutine:
    """Read until the server closes the connection (HTTP/1.0 with Connection: close)."""
    response = []
    chunk = yield from read(sock)
    while chunk:
        response.append(chunk)
        chunk = yield from read(sock)
    return b"".join(response)


def parse_response(url: str, response: bytes) -> tuple[str, set[str]]:
    """The status code, and for an HTML 200 the same-host http links, without fragments."""
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *headers = head.decode("latin-1").lower().split("\r\n")
    words = status_line.split()
    status = words[1] if len(words) > 1 else "error"  # No status line: nothing came back.
    if status != "200" or not any(
        h.startswith("content-type:") and "text/html" in h for h in headers
    ):
        return status, set()
    links = set()
    for match in HREF.finditer(body):
        # Latin-1 never fails to decode; quote() then spells non-ASCII as UTF-8 escapes.
        link = quote(urldefrag(urljoin(url, match.group(1).decode("latin-1"))).url, safe=URL_SAFE)
        parts = urlsplit(link)
        if parts.scheme == "http" and parts.netloc == urlsplit(url).netloc:
            links.add(link)
    return status, links


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

"""An HTTP/1.1 server in a thread of its own, for scenarios that block the event loop.

The suite's other servers (``httpserver.py``, ``hostile_server.py``) run in the test's
own event loop, which is what most scenarios want: one clock, no threads. A scenario about
what the crawler does while its loop is busy needs a server that goes on answering
meanwhile, as a real one does. This one serves each keep-alive connection in a thread, notes
when each request's head arrived (``time.monotonic()``), and answers each with what its
route writes.

A route may also split its answer around :meth:`ThreadServer.hold`: the first part goes,
``held`` is set, and the rest waits until the test says :meth:`ThreadServer.release`
(bounded by HANG_LIMIT). A test that blocks its loop between the two knows the rest
reached the machine while the crawler could not read it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from support import HANG_LIMIT

Route = Callable[["ThreadServer", socket.socket], None]


def response(body: bytes, *, status: str = "200 OK", content_type: str = "text/html") -> bytes:
    """A whole keep-alive response."""
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body


@dataclass
class ThreadServer:
    """See the module docstring. ``arrivals`` holds (monotonic time, target) in order."""

    routes: dict[str, Route]
    listener: socket.socket = field(init=False)
    # Read once: the URL is still asked for once the listener is closed.
    address: tuple[str, int] = field(init=False)
    arrivals: list[tuple[float, str]] = field(default_factory=list)
    held: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]

    def url(self, path: str = "/") -> str:
        host, port = self.address
        return f"http://{host}:{port}{path}"

    def hold(self, connection: socket.socket, first: bytes, rest: bytes) -> None:
        """Send ``first``, say so (``held``), and send ``rest`` once released."""
        connection.sendall(first)
        self.held.set()
        self.released.wait(HANG_LIMIT)
        connection.sendall(rest)

    def release(self) -> None:
        self.released.set()

    def serve(self) -> None:
        self.listener.settimeout(0.05)
        while not self.stopping.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve_connection, args=(connection,), daemon=True).start()

    def _serve_connection(self, connection: socket.socket) -> None:
        with connection:
            self._answer(connection)

    def _answer(self, connection: socket.socket) -> None:
        connection.settimeout(0.05)
        buffered = b""
        while not self.stopping.is_set():
            try:
                data = connection.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            buffered += data
            while b"\r\n\r\n" in buffered:
                head, buffered = buffered.split(b"\r\n\r\n", 1)
                target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("ascii")
                self.arrivals.append((time.monotonic(), target))
                route = self.routes.get(target)
                if route is None:
                    connection.sendall(response(b"", status="404 Not Found"))
                else:
                    route(self, connection)


def busy_for(seconds: float) -> None:
    """Keep the calling thread (an event loop's) computing for ``seconds``: what a
    process reading many pages does to everything else on its loop."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


@contextlib.contextmanager
def thread_server(routes: dict[str, Route]) -> Iterator[ThreadServer]:
    """A :class:`ThreadServer` on 127.0.0.1, stopped (and its thread joined) on exit."""
    server = ThreadServer(routes)
    thread = threading.Thread(target=server.serve, name="thread-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.released.set()
        thread.join(HANG_LIMIT)
        server.listener.close()

"""A web site that answers every request after a fixed delay: the chapter's C10K argument.

Why: on a real site a crawler waits for the network far longer than it computes. The
chapter argues that coroutines let one process wait on thousands of connections at once,
so a crawl of slow pages speeds up with concurrency until the CPU, not the latency, is the
limit. nginx answers in microseconds, so it cannot show that; this server only sleeps.

Theory of operation
-------------------
One Trio task per connection (``trio.serve_tcp``), with a hand-written HTTP/1.1 reader
that is just enough for a crawler's GETs: read up to the blank line, take the target from
the request line, sleep ``delay`` seconds, write a prepared response, repeat while the
client keeps the connection alive. A sleeping task costs a few kilobytes and no CPU, so one
process holds thousands of connections, each with a request waiting; it raises its own
open-file limit to the hard limit to have the descriptors. Request bodies are not read (a
crawler sends none); a request head over 64 KiB, or a malformed one, ends the connection.

The site: page 0 is ``/``, page ``i`` is ``/p/<i>.html``. Pages form a ``fanout``-ary tree
(page ``i``'s children are ``i*fanout+1 .. i*fanout+fanout``), so every page is reachable
from ``/``; each page also links to its parent, and pages with fewer than ``fanout``
children get random cross links up to ``fanout`` links (seeded, so every run serves the
same site). Every response is built once at start-up. Anything else is a 404.

Run it alone to point another crawler at it::

    python benchmarks/slow_server.py [--pages 2000] [--fanout 50] [--delay 1.0] [--port 0]

It prints ``http://127.0.0.1:PORT/`` on one line once it accepts connections, and serves
until it is killed (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
from functools import partial

import trio

# A request head longer than this is not a crawler's GET; HTTP servers commonly cap the
# head at 8-64 KiB (h11's DEFAULT_MAX_INCOMPLETE_EVENT_SIZE is 16 KiB).
MAX_HEAD = 64 * 1024
RECEIVE_SIZE = 16 * 1024
NOT_FOUND = (
    b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\nnot found\n"
)


def page_path(index: int) -> str:
    """The URL path of page ``index``."""
    return "/" if index == 0 else f"/p/{index}.html"


def site_links(pages: int, fanout: int, seed: int = 0) -> list[list[int]]:
    """Each page's links, as page numbers: tree children, parent, then random cross links.

    The benchmark's "ideal" wall time is computed from the same lists, so this is the one
    definition of the site.
    """
    rng = random.Random(seed)
    links = []
    for index in range(pages):
        targets = dict.fromkeys(
            range(index * fanout + 1, min(index * fanout + fanout, pages - 1) + 1)
        )
        if index > 0:
            targets[(index - 1) // fanout] = None
        attempts = 0
        while len(targets) < fanout and attempts < 4 * fanout:
            attempts += 1
            target = rng.randrange(pages)
            if target != index:
                targets[target] = None
        links.append(list(targets))
    return links


def build_responses(pages: int, fanout: int, seed: int = 0) -> dict[bytes, bytes]:
    """Every page's whole HTTP response, keyed by the request target."""
    responses = {}
    for index, targets in enumerate(site_links(pages, fanout, seed)):
        items = "".join(
            f'<li><a href="{page_path(target)}">page {target}</a></li>\n' for target in targets
        )
        body = (
            f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Page {index}</title>'
            f"</head>\n<body><h1>Page {index}</h1>\n<ul>\n{items}</ul>\n</body></html>\n"
        ).encode()
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        responses[page_path(index).encode()] = head + body
    return responses


async def serve_connection(
    stream: trio.SocketStream, *, responses: dict[bytes, bytes], delay: float
) -> None:
    """Answer the requests on one connection, each after ``delay`` seconds, until it closes."""
    buffer = bytearray()
    try:
        async with stream:
            while True:
                end = buffer.find(b"\r\n\r\n")
                while end < 0:
                    if len(buffer) > MAX_HEAD:
                        return
                    data = await stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        return
                    buffer += data
                    end = buffer.find(b"\r\n\r\n")
                head = bytes(buffer[:end])
                del buffer[: end + 4]
                request_line, _, headers = head.partition(b"\r\n")
                parts = request_line.split(b" ")
                if len(parts) != 3:
                    return
                _, target, version = parts
                await trio.sleep(delay)
                await stream.send_all(responses.get(target, NOT_FOUND))
                if version == b"HTTP/1.0" or b"connection: close" in headers.lower():
                    return
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        # The client went away mid-request (a crawl that ended, a timeout): its business.
        return


async def serve(
    *,
    pages: int,
    fanout: int,
    delay: float,
    port: int,
    seed: int = 0,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the site on 127.0.0.1:``port`` (0: a free one) until cancelled.

    Reports the bound port through ``task_status`` once it accepts connections.
    """
    handler = partial(serve_connection, responses=build_responses(pages, fanout, seed), delay=delay)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, port, host="127.0.0.1"))
        task_status.started(listeners[0].socket.getsockname()[1])


def raise_open_file_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit: a connection is a descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _main(args: argparse.Namespace) -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            partial(
                serve,
                pages=args.pages,
                fanout=args.fanout,
                delay=args.delay,
                port=args.port,
                seed=args.seed,
            )
        )
        print(f"http://127.0.0.1:{port}/", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a site that answers after a delay.")
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--fanout", type=int, default=50, help="children (and links) per page")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds before each answer")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.pages < 1 or args.fanout < 1 or args.delay < 0:
        parser.error("--pages and --fanout must be >= 1 and --delay >= 0")
    raise_open_file_limit()
    try:
        trio.run(_main, args)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()

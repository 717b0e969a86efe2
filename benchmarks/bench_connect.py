"""What a new TCP connection costs the crawler's transport: CPU per connection.

A broad crawl opens a connection to each host for its robots.txt, all in its first
seconds, and that burst is CPU-bound: what each connection costs is in the time the last
host waits for its first request. The transport connects through
``trio_crawler._connections.open_connection``; this times it against
``anyio.connect_tcp``, which it used before, on a listener in the same process (each
connection accepted and closed by the listener, then closed by the client), the two
alternating in blocks so that the machine's drift falls on both alike. On Trio and on
asyncio (where ``open_connection`` calls ``anyio.connect_tcp`` itself).

Usage::

    python benchmarks/bench_connect.py [--connections 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):
    # Run as a script: make the `benchmarks` folder importable as a package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import anyio.abc

from benchmarks.measure import markdown_table, run_main
from trio_crawler._connections import open_connection

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


async def _through_open_connection(address: str, port: int) -> anyio.abc.SocketStream:
    return await open_connection([address], port)


async def _through_anyio(address: str, port: int) -> anyio.abc.SocketStream:
    return await anyio.connect_tcp(address, port)


async def cpu_per_connection(
    connect: Callable[[str, int], Awaitable[anyio.abc.SocketStream]],
    listener: socket.socket,
    count: int,
) -> float:
    """CPU microseconds per connection, ``count`` of them one after another."""
    port = listener.getsockname()[1]
    started = time.process_time()
    for _ in range(count):
        stream = await connect("127.0.0.1", port)
        accepted, _ = listener.accept()
        accepted.close()
        await stream.aclose()
    return (time.process_time() - started) / count * 1e6


async def measure(count: int, rounds: int) -> dict[str, list[float]]:
    ways: dict[str, Callable[[str, int], Awaitable[anyio.abc.SocketStream]]] = {
        "open_connection": _through_open_connection,
        "anyio.connect_tcp": _through_anyio,
    }
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1024)
        for connect in ways.values():  # a first block each, not counted: warm-up
            await cpu_per_connection(connect, listener, count // 10)
        for _ in range(rounds):
            for name, connect in ways.items():
                cpu[name].append(await cpu_per_connection(connect, listener, count))
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--connections", type=int, default=2000, help="per block")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for backend in ("trio", "asyncio"):
        cpu = anyio.run(measure, args.connections, args.rounds, backend=backend)
        ours, theirs = cpu["open_connection"], cpu["anyio.connect_tcp"]
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        rows.append(
            [
                backend,
                f"{statistics.median(ours):.0f}",
                f"{statistics.median(theirs):.0f}",
                f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
            ]
        )
    print(
        markdown_table(
            ["event loop", "open_connection µs", "anyio.connect_tcp µs", "ratio (range)"], rows
        )
    )
    print(
        f"\nCPU per connection (connect, accept and close on loopback), median of "
        f"{args.rounds} blocks of {args.connections}."
    )


if __name__ == "__main__":
    run_main(main, "bench_connect")

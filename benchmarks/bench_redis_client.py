"""What the Redis client costs the shared frontier: its import, and its CPU per round trip.

A process of a shared crawl (``--frontier``) imports its Redis client before it can ask
the server for anything, and makes about one step call per request in a broad crawl (one
to add a page's links and one to mark it done, shared with the pages finishing at the
same time). So the client's import is in every process's start, before its first
request, and its cost per call is in the CPU of every request. The crawler speaks to Redis
with its own client (``trio_crawler/_redis.py``); this compares it with coredis, a general
client on AnyIO (installed with the test extras), on a private ``redis-server``, in one
process on Trio:

* the CPU seconds of each client's import in a fresh interpreter that has already
  imported the crawler's command line (``trio_crawler._cli``: trio, anyio, httpx and the
  rest are loaded), median of ``--imports`` interpreters;
* CPU per round trip, each kind ``--calls`` times in each of ``--rounds`` rounds, the
  kinds alternating so that the machine's drift falls on all alike:

  - ``script call``: a one-line Lua script called by its SHA (EVALSHA) with the step
    call's arguments, as the store calls its step script;
  - ``PING``: each client's cheapest command;
  - ``raw RESP: PING``: the same command written and read on a bare Trio stream, the
    floor under any client (no parsing beyond the reply's bytes).

Usage::

    python benchmarks/bench_redis_client.py [--calls 5000] [--rounds 3] [--imports 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if __package__ in (None, ""):
    # Run as a script: make the `benchmarks` folder importable as a package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio

from benchmarks.bench_cluster import serve_redis
from benchmarks.measure import markdown_table, run_main

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

IMPORT_PROBE = (
    "import time, trio_crawler._cli\n"
    "started = time.process_time()\n"
    "import {module}\n"
    "print(time.process_time() - started)\n"
)
# The modules timed, as the table names them.
IMPORTS = {"trio_crawler._redis": "ours", "coredis": "coredis"}

KINDS = (
    "ours: script call",
    "coredis: script call",
    "ours: PING",
    "coredis: PING",
    "raw RESP: PING",
)


def import_cpu(python: str, module: str, times: int) -> list[float]:
    """CPU seconds of ``import module`` in ``times`` fresh interpreters."""
    results = []
    for _ in range(times):
        done = subprocess.run(
            [python, "-c", IMPORT_PROBE.format(module=module)],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(float(done.stdout.strip()))
    return results


async def _cpu_per_call(call: Callable[[], Awaitable[object]], calls: int) -> float:
    await call()  # a first call outside the count (a script is loaded by then)
    started = time.process_time()
    for _ in range(calls):
        await call()
    return (time.process_time() - started) / calls


async def round_trips(
    url: str, host: str, port: int, calls: int, rounds: int
) -> dict[str, list[float]]:
    import coredis

    from trio_crawler._redis import Endpoint, Redis, Script

    results: dict[str, list[float]] = {kind: [] for kind in KINDS}
    stream = await trio.open_tcp_stream(host, port)
    ping = b"*1\r\n$4\r\nPING\r\n"

    async def raw_ping() -> bytes:
        await stream.send_all(ping)
        reply = await stream.receive_some()
        assert reply == b"+PONG\r\n", reply
        return reply

    ours = Redis(Endpoint.from_url(url), name="bench", connect_timeout=5, answer_timeout=10)
    args = ["prefix", "1800000000.5", "owner", "60", "[]"]
    async with (
        stream,
        ours,
        coredis.Redis.from_url(url, decode_responses=True) as client,
    ):
        script = client.register_script("return ARGV[1]")
        our_script = Script.of("return ARGV[1]")
        kinds: dict[str, Callable[[], Awaitable[object]]] = {
            "ours: script call": lambda: ours.run_script(our_script, ["k"], args),
            "coredis: script call": lambda: script(keys=["k"], args=args),
            "ours: PING": lambda: ours.execute("PING"),
            "coredis: PING": client.ping,
            "raw RESP: PING": raw_ping,
        }
        for _ in range(rounds):
            for kind, call in kinds.items():
                results[kind].append(await _cpu_per_call(call, calls))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000, help="round trips per kind a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--imports", type=int, default=5, help="interpreters timing the import")
    args = parser.parse_args(argv)
    imports = {module: import_cpu(sys.executable, module, args.imports) for module in IMPORTS}
    with serve_redis() as redis:
        address = urlsplit(redis.url)
        host, port = address.hostname or "127.0.0.1", address.port or 6379
        trips = trio.run(round_trips, redis.url, host, port, args.calls, args.rounds)
    rows = [
        [
            f"{name}: import (after trio_crawler._cli)",
            f"{1000 * statistics.median(imports[module]):.1f} ms",
            "",
        ]
        for module, name in IMPORTS.items()
    ]
    floor = statistics.median(trips["raw RESP: PING"])
    for kind in KINDS:
        median = statistics.median(trips[kind])
        rows.append([kind, f"{1e6 * median:.0f} µs", f"{median / floor:.1f}"])
    print(markdown_table(["what", "CPU (median)", "÷ raw PING"], rows))


if __name__ == "__main__":
    run_main(main, "bench_redis_client")

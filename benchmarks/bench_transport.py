"""What httpx's ``AsyncClient`` costs above the transport, per request.

The crawler's clients send through its own transport (``trio_crawler/_transport.py``);
above it, ``AsyncClient.stream()`` builds an ``httpx.Request`` (URL parsing, merging the
client's headers, cookies, auth, the event hooks) and wraps the response. This measures
that layer by fetching the same pages from nginx three ways, in one process on Trio, one
connection, one request at a time, in alternating blocks so that the machine's drift falls
on all three alike:

* ``client``: ``trio_crawler._fetch.fetch()`` through a client of the crawler's (what a
  worker does: the client, our transport, the bounded decoder, the outcome);
* ``client.stream``: the bare ``async with client.stream("GET", url)`` and ``aiter_raw``;
* ``transport``: the transport's ``handle_async_request`` with a request built once
  per URL beforehand, and the body read raw: the cost below the client.

CPU per request is this process's ``time.process_time``; the difference between the rows
is the price of each layer.

Usage::

    python benchmarks/bench_transport.py [--pages 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio
from measure import markdown_table, run_main
from nginx import serve_directory
from synthetic_site import generate, page_path


async def measure(urls: list[str], rounds: int) -> dict[str, list[float]]:
    from trio_crawler._fetch import _default_ssl_context, choose_http_library, fetch, open_client
    from trio_crawler._transport import lean_transport_class

    library = choose_http_library()
    results: dict[str, list[float]] = {"client": [], "client.stream": [], "transport": []}
    async with open_client(library=library, max_connections=1, transport="lean") as client:
        transport = lean_transport_class(library)(_default_ssl_context())
        requests = [library.Request("GET", url, headers=client.headers) for url in urls]
        for _ in range(rounds):
            started = time.process_time()
            for url in urls:
                await fetch(client, url)
            results["client"].append((time.process_time() - started) / len(urls))

            started = time.process_time()
            for url in urls:
                async with client.stream("GET", url) as response:
                    async for _ in response.aiter_raw():
                        pass
            results["client.stream"].append((time.process_time() - started) / len(urls))

            started = time.process_time()
            for request in requests:
                response = await transport.handle_async_request(request)
                async for _ in response.stream:
                    pass
                await response.aclose()
            results["transport"].append((time.process_time() - started) / len(urls))
        await transport.aclose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-transport-") as work:
        site = generate(Path(work, "site"), pages=args.pages)
        with serve_directory(site.directory) as root:
            urls = [
                root + page_path(index).removeprefix("index.html") for index in range(site.pages)
            ]
            results = trio.run(measure, urls, args.rounds)
    median = {name: statistics.median(values) * 1e6 for name, values in results.items()}
    rows = [[name, f"{value:.0f}"] for name, value in median.items()]
    print(
        f"### Per request, {args.pages} pages x {args.rounds} rounds, one connection\n\n"
        + markdown_table(["path", "CPU µs/request (median of rounds)"], rows)
        + f"\n\nAbove the transport: client.stream costs "
        f"{median['client.stream'] - median['transport']:.0f} µs/request "
        f"({(median['client.stream'] - median['transport']) / median['client'] * 100:.0f}% "
        "of a worker's fetch); fetch() adds "
        f"{median['client'] - median['client.stream']:.0f} µs (the decoder, the outcome)."
    )
    sys.stdout.flush()


if __name__ == "__main__":
    run_main(main, "bench_transport")

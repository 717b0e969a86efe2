"""What httpx's ``AsyncClient`` costs above the transport, per request.

The crawler's own clients are ``TransportClient``s: each request goes straight to the
crawler's transport (``trio_crawler/_transport.py``) as an ``httpx.Request``. Above a
transport, ``AsyncClient.send`` adds a cookie jar read and written on every response, auth
and redirect flows, event hooks and headers merged anew; this measures what that layer
costs by fetching the same pages from nginx three ways, in one process on Trio, one
connection, one request at a time, in alternating blocks so that the machine's drift falls
on all three alike:

* ``fetch(), TransportClient``: ``trio_crawler._fetch.fetch()`` as a worker calls it
  (the request built and sent to the transport, the bounded decoder, the outcome);
* ``fetch(), AsyncClient``: the same ``fetch()`` through an ``httpx.AsyncClient`` over
  the same transport, as the crawler's clients were before;
* ``transport``: the transport's ``handle_async_request`` with a request built once
  per URL beforehand, and the body read raw: the cost below both.

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
    from trio_crawler._clients import choose_http_library, default_ssl_context, open_client
    from trio_crawler._fetch import fetch
    from trio_crawler._transport import lean_transport_class

    library = choose_http_library()
    results: dict[str, list[float]] = {
        "fetch(), TransportClient": [],
        "fetch(), AsyncClient": [],
        "transport": [],
    }
    transport_class = lean_transport_class(library)
    async with (
        open_client(library=library, max_connections=1, transport="lean") as own,
        library.AsyncClient(
            transport=transport_class(default_ssl_context()),
            follow_redirects=False,
            headers=own.headers,
        ) as stock,
    ):
        transport = transport_class(default_ssl_context())
        requests = [library.Request("GET", url, headers=own.headers) for url in urls]
        for _ in range(rounds):
            clients = (("fetch(), TransportClient", own), ("fetch(), AsyncClient", stock))
            for name, client in clients:
                started = time.process_time()
                for url in urls:
                    await fetch(client, url)
                results[name].append((time.process_time() - started) / len(urls))

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
    own, stock = median["fetch(), TransportClient"], median["fetch(), AsyncClient"]
    print(
        f"### Per request, {args.pages} pages x {args.rounds} rounds, one connection\n\n"
        + markdown_table(["path", "CPU µs/request (median of rounds)"], rows)
        + f"\n\nAsyncClient costs {stock - own:.0f} µs/request above a TransportClient "
        f"({(stock - own) / stock * 100:.0f}% of a fetch through it); above the transport, "
        f"a TransportClient's fetch() adds {own - median['transport']:.0f} µs (the request, "
        "the decoder, the outcome)."
    )
    sys.stdout.flush()


if __name__ == "__main__":
    run_main(main, "bench_transport")

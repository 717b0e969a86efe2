"""The yardstick outside our libraries: the same minimal crawl on asyncio, aiohttp and
selectolax.

``floor.py`` says what Trio, httpx and selectolax cost with no crawler around them. This
says what the fastest common Python stack costs for the same work, so that a table of
CPU per page carries a yardstick no choice of ours sets: aiohttp's HTTP/1.1 parser is in C
(llhttp), its connection pool is built for many tasks.

Two modes, as in ``floor.py``:

* ``crawl``: workers on an ``asyncio.Queue``, one ``aiohttp.ClientSession`` (a pool of
  ``--concurrency`` keep-alive connections), Lexbor for ``a``/``area``/``link`` hrefs, each
  distinct href through ``urljoin``/``urldefrag``, a seen set and a same-host test;
* ``fetch`` (``--fetch-tree DIR``): every ``.html`` file under DIR fetched from a list,
  each body read and nothing more.

It runs in a benchmark-only environment (aiohttp is no dependency of trio_crawler):
``benchmarks/setup.sh`` installs aiohttp and selectolax into ``benchmarks/.venv``.

Run::

    benchmarks/.venv/bin/python benchmarks/floor_aiohttp.py ROOT TALLY.json \\
        [--concurrency 100] [--fetch-tree DIR]

It writes the same tally as ``floor.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from urllib.parse import quote, urldefrag, urljoin, urlsplit

import aiohttp
from selectolax.lexbor import LexborHTMLParser

LINKS = "a[href], area[href], link[href]"


async def run(root: str, *, concurrency: int, fetch_urls: list[str] | None) -> dict[str, object]:
    host = urlsplit(root).netloc
    urls = fetch_urls if fetch_urls is not None else [root]
    seen = set(urls)
    queue: asyncio.Queue[str] = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)
    pages = 0
    html_urls: list[str] = []

    def follow(url: str, body: bytes) -> None:
        document = LexborHTMLParser(body.decode("utf-8", "replace"))
        hrefs = {node.attrs.get("href") or "" for node in document.css(LINKS)}
        for href in hrefs:
            link = urldefrag(urljoin(url, href)).url
            if link not in seen and urlsplit(link).netloc == host:
                seen.add(link)
                queue.put_nowait(link)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal pages
        while True:
            url = await queue.get()
            try:
                async with session.get(url, allow_redirects=False) as response:
                    body = await response.read()
                    if response.status == 200:
                        pages += 1
                        if response.content_type == "text/html":
                            html_urls.append(url)
                            if fetch_urls is None:
                                follow(url, body)
            except aiohttp.ClientError:
                pass
            finally:
                queue.task_done()

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        workers = [asyncio.create_task(worker(session)) for _ in range(concurrency)]
        await queue.join()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return {"pages": pages, "html_pages": len(html_urls), "html_urls": html_urls}


def html_files(root: str, directory: Path) -> list[str]:
    """The URL of every ``.html`` file under ``directory``, served at ``root``."""
    return sorted(
        root + quote(path.relative_to(directory).as_posix(), safe="/%:@!$&'()*+,;=-._~")
        for path in directory.rglob("*.html")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", help="the site's root URL, ending in /")
    parser.add_argument("tally", type=Path, help="where to write the tally JSON")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument(
        "--fetch-tree", type=Path, help="fetch every .html file under this directory; no parsing"
    )
    args = parser.parse_args()
    fetch_urls = None if args.fetch_tree is None else html_files(args.root, args.fetch_tree)
    tally = asyncio.run(run(args.root, concurrency=args.concurrency, fetch_urls=fetch_urls))
    args.tally.write_text(json.dumps(tally))


if __name__ == "__main__":
    main()

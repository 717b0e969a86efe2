"""The floor under any crawler built on these libraries: Trio, httpx and selectolax alone.

Why: "how much CPU per page should a Python crawler need?" has no answer in the abstract,
and this machine's speed changes from hour to hour. So the benchmark measures, in the same
run as the real crawlers, the least that a crawler made of our libraries can cost:

* ``crawl``: a minimal crawler, the one a reader would write in an afternoon. A client per
  worker (one shared SSL context, no proxy lookup: the arrangement trio_crawler uses),
  ``client.get``, Lexbor for ``a``/``area``/``link`` hrefs, each distinct href of a page
  through ``urljoin``/``urldefrag``, a seen set and a same-host test. No URL
  normalisation, records, limits, retries, robots.txt, redirects, timeouts or report:
  everything that makes trio_crawler a crawler is missing.
* ``fetch``: no crawler at all. The same workers and clients GET a list of URLs known in
  advance (every ``.html`` file under a directory), reading each body and nothing more:
  the cost of HTTP alone.

The distance from ``fetch`` to ``crawl`` is what parsing costs; from ``crawl`` to
trio_crawler, what the crawler's own work costs. A target below ``fetch`` cannot be met
by any crawler on these libraries, on this machine.

The HTTP library is chosen as trio_crawler chooses it (``TRIO_CRAWLER_HTTP``, else httpx2
when installed, else httpx), so that each interpreter's floor matches its crawls. Nothing of
trio_crawler is imported.

Run::

    python benchmarks/floor.py ROOT TALLY.json [--concurrency 100] [--fetch-tree DIR]

It writes ``{"pages": N, "html_pages": N, "html_urls": [...]}`` (responses with status
200, the text/html ones, their URLs) to TALLY.json, as ``scrapy_spider.py`` does.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import ssl
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urldefrag, urljoin, urlsplit

import trio
from selectolax.lexbor import LexborHTMLParser

if TYPE_CHECKING:
    from types import ModuleType


LINKS = "a[href], area[href], link[href]"


def http_library() -> ModuleType:
    """httpx or httpx2, by trio_crawler's rule."""
    name = os.environ.get("TRIO_CRAWLER_HTTP") or (
        "httpx2" if importlib.util.find_spec("httpx2") else "httpx"
    )
    return importlib.import_module(name)


async def run(root: str, *, concurrency: int, fetch_urls: list[str] | None) -> dict[str, object]:
    http = http_library()
    ssl_context = ssl.create_default_context()
    host = urlsplit(root).netloc
    urls = fetch_urls if fetch_urls is not None else [root]
    seen = set(urls)
    pending = len(urls)
    pages = 0
    html_urls: list[str] = []
    send, receive = trio.open_memory_channel[str](math.inf)
    for url in urls:
        send.send_nowait(url)

    async def worker() -> None:
        nonlocal pending, pages
        async with http.AsyncClient(verify=ssl_context, trust_env=False) as client:
            async for url in receive:
                try:
                    response = await client.get(url)
                except http.HTTPError:
                    response = None
                if response is not None and response.status_code == 200:
                    pages += 1
                    if response.headers.get("content-type", "").startswith("text/html"):
                        html_urls.append(url)
                        if fetch_urls is None:
                            follow(url, response.content)
                pending -= 1
                if pending == 0:
                    send.close()  # every worker's loop ends

    def follow(url: str, body: bytes) -> None:
        nonlocal pending
        document = LexborHTMLParser(body.decode("utf-8", "replace"))
        hrefs = {node.attrs.get("href") or "" for node in document.css(LINKS)}
        for href in hrefs:
            link = urldefrag(urljoin(url, href)).url
            if link not in seen and urlsplit(link).netloc == host:
                seen.add(link)
                pending += 1
                send.send_nowait(link)

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
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
    tally = trio.run(lambda: run(args.root, concurrency=args.concurrency, fetch_urls=fetch_urls))
    args.tally.write_text(json.dumps(tally))


if __name__ == "__main__":
    main()

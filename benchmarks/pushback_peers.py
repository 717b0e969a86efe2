"""The peers of ``bench_pushback.py``: Scrapy and Crawlee for Python, each crawling the
sites of ``tests/pushback_server.py`` at its defaults. Run in ``benchmarks/.venv``.

Why these two, and why their defaults: the benchmark asks how a crawler a user would reach
for behaves when servers push back (429, 503, ``Retry-After``), out of the box. Scrapy is
the Python crawler people reach for; its defaults are 16 requests at once, 8 per domain, no
delay, and a retry middleware that tries 429 and 503 answers twice more, at once. Its
AutoThrottle extension (``--autothrottle``) is what its documentation offers for politeness:
it adapts each domain's delay to the server's latency. Crawlee for Python is the crawler of
the Apify ecosystem, on asyncio: its pool scales concurrency with the machine's CPU and
memory (and with 429s it gets from the Apify API, which these servers are not), and it
retries a failed request up to 3 times.

Both follow every link on the roots' hosts and nothing else: Scrapy through a ``CrawlSpider``
whose one ``Rule`` follows what a default ``LinkExtractor`` finds, with ``allowed_domains``
the roots' hosts; Crawlee through a ``ParselCrawler`` whose handler calls
``enqueue_links()`` (its default strategy keeps to the same host). Scrapy's start requests
go through its duplicate filter, as in ``scrapy_spider.py`` (its default would fetch each
root twice, the pages linking back to it). Nothing else is set but quiet logs and, for
Scrapy, no telnet console or remote control (listening sockets for people, not crawling).

The server's log judges them, so this script writes nothing but the crawl's own logs::

    benchmarks/.venv/bin/python benchmarks/pushback_peers.py scrapy [--autothrottle] ROOT...
    benchmarks/.venv/bin/python benchmarks/pushback_peers.py crawlee ROOT...

Run it in a scratch directory: Crawlee keeps its request queue in ``./storage``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence


def crawl_with_scrapy(roots: Sequence[str], *, autothrottle: bool) -> None:
    """Scrapy at its defaults (with AutoThrottle on, if asked), on the roots' hosts."""
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy.linkextractors import LinkExtractor
    from scrapy.spiders import CrawlSpider, Rule

    class SitesSpider(CrawlSpider):
        name = "pushback"
        rules = (Rule(LinkExtractor(), follow=True),)

        def __init__(self, **kwargs: Any) -> None:
            self.start_urls = list(roots)
            self.allowed_domains = sorted({urlsplit(root).hostname or "" for root in roots})
            super().__init__(**kwargs)

        async def start(self) -> AsyncIterator[scrapy.Request]:
            for url in self.start_urls:
                yield scrapy.Request(url, dont_filter=False)

    settings: dict[str, Any] = {
        "LOG_LEVEL": "ERROR",
        "TELNETCONSOLE_ENABLED": False,
        "REMOTE_CONTROL_ENABLED": False,
    }
    if autothrottle:
        settings["AUTOTHROTTLE_ENABLED"] = True
    process = CrawlerProcess(settings=settings)
    process.crawl(SitesSpider)
    process.start()


async def crawl_with_crawlee(roots: Sequence[str]) -> None:
    """Crawlee's ParselCrawler at its defaults, following links on the same host."""
    from crawlee.crawlers import ParselCrawler, ParselCrawlingContext

    crawler = ParselCrawler(configure_logging=False)

    @crawler.router.default_handler
    async def follow(context: ParselCrawlingContext) -> None:
        await context.enqueue_links()

    await crawler.run(list(roots))


def main() -> None:
    parser = argparse.ArgumentParser(description="Crawl the pushback server with a peer.")
    tools = parser.add_subparsers(dest="tool", required=True)
    scrapy_parser = tools.add_parser("scrapy", help="Scrapy, CrawlSpider, defaults")
    scrapy_parser.add_argument("--autothrottle", action="store_true")
    scrapy_parser.add_argument("roots", nargs="+")
    crawlee_parser = tools.add_parser("crawlee", help="Crawlee for Python, ParselCrawler")
    crawlee_parser.add_argument("roots", nargs="+")
    args = parser.parse_args()
    if args.tool == "scrapy":
        crawl_with_scrapy(args.roots, autothrottle=args.autothrottle)
    else:
        logging.basicConfig(level=logging.WARNING)
        asyncio.run(crawl_with_crawlee(args.roots))


if __name__ == "__main__":
    main()

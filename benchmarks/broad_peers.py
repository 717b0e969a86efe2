"""The peers of ``bench_broad.py``: Scrapy and Crawlee for Python on a broad crawl. Run in
``benchmarks/.venv``.

Why these settings: the benchmark asks how a crawler a user would reach for handles many
hosts crawled politely at once. Scrapy documents what to change for that ("Broad Crawls",
docs.scrapy.org/en/latest/topics/broad-crawls.html), and it gets exactly that list:

* ``SCHEDULER_PRIORITY_QUEUE = "scrapy.pqueues.DownloaderAwarePriorityQueue"`` (the default
  since 2.13, set anyway);
* ``CONCURRENT_REQUESTS`` high (``--concurrency``, the crawler's ``--max-tasks``);
* ``REACTOR_THREADPOOL_MAXSIZE = 20`` (the DNS thread pool; the hosts here are addresses);
* ``LOG_LEVEL = "INFO"``, ``COOKIES_ENABLED = False``, ``RETRY_ENABLED = False``,
  ``DOWNLOAD_TIMEOUT = 15``, ``REDIRECT_ENABLED = False``, ``AJAXCRAWL_ENABLED = True``
  (a setting later Scrapy versions no longer read);

plus the manners the crawler is given: ``DOWNLOAD_DELAY = --delay``,
``CONCURRENT_REQUESTS_PER_DOMAIN = 1``, ``ROBOTSTXT_OBEY = True``. Scrapy's
``RANDOMIZE_DOWNLOAD_DELAY`` stays at its default (on): each wait is drawn from 0.5 to 1.5
times the delay. A ``CrawlSpider`` with one ``Rule(LinkExtractor(), follow=True)`` follows
links on the roots' hosts (``allowed_domains``), start requests through the duplicate filter
(as ``pushback_peers.py`` does). No telnet console.

Crawlee for Python's ``ParselCrawler`` runs at its defaults, its handler calling
``enqueue_links()``: it keeps to the page's own host (strategy ``same-hostname``), so the
cross-host links are not followed, and every host is reached from its root. It has no
per-host delay or per-host concurrency limit (``ConcurrencySettings`` has a global
``max_tasks_per_minute`` only), and it does not read robots.txt unless
``respect_robots_txt_file=True``.

The server's log judges them; this script writes nothing but the crawls' own logs::

    benchmarks/.venv/bin/python benchmarks/broad_peers.py scrapy --delay 1 \\
        --concurrency 500 ROOTS_FILE
    benchmarks/.venv/bin/python benchmarks/broad_peers.py crawlee ROOTS_FILE

ROOTS_FILE holds one root a line. Run it in a scratch directory: Crawlee keeps its request
queue in ``./storage``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

# The same Crawlee crawl as the pushback benchmark's: its defaults, same-host links. Both
# scripts run as scripts in the peers' venv, so this one imports its sibling by name.
from pushback_peers import crawl_with_crawlee

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence


def scrapy_settings(*, delay: float, concurrency: int) -> dict[str, Any]:
    """Scrapy's documented broad-crawl settings, with the crawler's manners."""
    return {
        # "Broad Crawls", docs.scrapy.org.
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
        "CONCURRENT_REQUESTS": concurrency,
        "REACTOR_THREADPOOL_MAXSIZE": 20,
        "LOG_LEVEL": "INFO",
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": False,
        "DOWNLOAD_TIMEOUT": 15,
        "REDIRECT_ENABLED": False,
        "AJAXCRAWL_ENABLED": True,
        # The manners trio-crawler is run with.
        "DOWNLOAD_DELAY": delay,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "ROBOTSTXT_OBEY": True,
        # Listening sockets for people, not crawling.
        "TELNETCONSOLE_ENABLED": False,
    }


def crawl_with_scrapy(roots: Sequence[str], *, delay: float, concurrency: int) -> None:
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy.linkextractors import LinkExtractor
    from scrapy.spiders import CrawlSpider, Rule

    class BroadSpider(CrawlSpider):
        name = "broad"
        rules = (Rule(LinkExtractor(), follow=True),)

        def __init__(self, **kwargs: Any) -> None:
            self.start_urls = list(roots)
            self.allowed_domains = sorted({urlsplit(root).hostname or "" for root in roots})
            super().__init__(**kwargs)

        async def start(self) -> AsyncIterator[scrapy.Request]:
            for url in self.start_urls:
                yield scrapy.Request(url, dont_filter=False)

    process = CrawlerProcess(settings=scrapy_settings(delay=delay, concurrency=concurrency))
    process.crawl(BroadSpider)
    process.start()


def read_roots(path: Path) -> list[str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def main() -> None:
    parser = argparse.ArgumentParser(description="Crawl the broad site with a peer.")
    tools = parser.add_subparsers(dest="tool", required=True)
    scrapy_parser = tools.add_parser("scrapy", help="Scrapy, broad-crawl settings")
    scrapy_parser.add_argument("--delay", type=float, required=True)
    scrapy_parser.add_argument("--concurrency", type=int, required=True)
    scrapy_parser.add_argument("roots_file", type=Path)
    crawlee_parser = tools.add_parser("crawlee", help="Crawlee for Python, ParselCrawler")
    crawlee_parser.add_argument("roots_file", type=Path)
    args = parser.parse_args()
    roots = read_roots(args.roots_file)
    if args.tool == "scrapy":
        crawl_with_scrapy(roots, delay=args.delay, concurrency=args.concurrency)
    else:
        logging.basicConfig(level=logging.WARNING)
        asyncio.run(crawl_with_crawlee(roots))


if __name__ == "__main__":
    main()

"""Scrapy, the peer crawler, crawling one site the way ``bench_engines.py`` asks: run in its venv.

Why Scrapy: it is the Python crawler people reach for, built on Twisted rather than on
async/await, so it shows what our engines cost next to a mature, optimised one. It is set
up to do the same work as ``trio-crawler --max-tasks N``: a ``CrawlSpider`` whose one
``Rule`` follows every link a default ``LinkExtractor`` finds, on the root's host only
(``allowed_domains``), with N requests in flight (``CONCURRENT_REQUESTS`` and
``CONCURRENT_REQUESTS_PER_DOMAIN``), robots.txt ignored, no AutoThrottle and no delay.
Everything else is Scrapy's default (retries, redirects, cookies, depth-first order); the
telnet console and (Scrapy 2.19's) remote control are off: they are listening sockets for
people, not crawling.

Differences that remain, and why they do not matter on the synthetic site: the default
``LinkExtractor`` reads ``<a>`` and ``<area>`` (ours also reads ``<link>``) and skips
links to files it thinks are not pages (``.css``, ``.js``, images, ...); the synthetic site
has only ``<a>`` links to ``.html`` pages. On the Python docs they make Scrapy fetch fewer
files than we do, which is why that table counts HTML pages separately.

This script only needs Scrapy (2.13 or later, for ``Spider.start``), not trio_crawler;
``benchmarks/setup.sh`` puts Scrapy in ``benchmarks/.venv``. It writes a JSON tally
(responses with status 200, how many of them were HTML, and the HTML pages' URLs, for
comparing what each crawler found)::

    benchmarks/.venv/bin/python benchmarks/scrapy_spider.py URL TALLY.json [--concurrency 100]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


class SiteSpider(CrawlSpider):
    """Follow every link on the root's host; count each page that arrives.

    Only 2xx responses reach the callbacks (Scrapy's HttpErrorMiddleware drops the rest,
    and RedirectMiddleware follows 3xx), so every call is one page fetched with status 200.
    """

    name = "bench"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def __init__(self, *, root: str, tally_path: str, **kwargs: Any) -> None:
        self.start_urls = [root]
        self.allowed_domains = [urlsplit(root).hostname or ""]
        # CrawlSpider compiles ``rules`` in its __init__, so the attributes above come first.
        super().__init__(**kwargs)
        self._tally_path = Path(tally_path)
        self._pages = 0
        self._html_urls: list[str] = []

    async def start(self) -> AsyncIterator[scrapy.Request]:
        # Scrapy's default start request has dont_filter=True, so it never enters the
        # duplicate filter, and the site's links back to "/" fetch the root a second time
        # (301 pages for a 300-page site). Our crawler puts its roots in the seen-set.
        for url in self.start_urls:
            yield scrapy.Request(url, dont_filter=False)

    def parse_start_url(self, response: scrapy.http.Response, **kwargs: Any) -> list[Any]:
        # CrawlSpider sends the root's response here, not to the rule's callback.
        self._count(response)
        return []

    def parse_page(self, response: scrapy.http.Response) -> None:
        self._count(response)

    def _count(self, response: scrapy.http.Response) -> None:
        if response.status != 200:
            return
        self._pages += 1
        if response.headers.get("Content-Type", b"").startswith(b"text/html"):
            self._html_urls.append(response.url)

    def closed(self, reason: str) -> None:
        self._tally_path.write_text(
            json.dumps(
                {
                    "pages": self._pages,
                    "html_pages": len(self._html_urls),
                    "html_urls": self._html_urls,
                    "finish_reason": reason,
                    "scrapy": scrapy.__version__,
                }
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="Crawl one site with Scrapy; write a tally.")
    parser.add_argument("root")
    parser.add_argument("tally", help="where to write the JSON tally")
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": args.concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": args.concurrency,
            "ROBOTSTXT_OBEY": False,
            "AUTOTHROTTLE_ENABLED": False,
            "DOWNLOAD_DELAY": 0,
            "LOG_LEVEL": "ERROR",
            # Listening sockets for people to inspect a crawl, not part of crawling.
            "TELNETCONSOLE_ENABLED": False,
            "REMOTE_CONTROL_ENABLED": False,
        }
    )
    process.crawl(SiteSpider, root=args.root, tally_path=args.tally)
    process.start()


if __name__ == "__main__":
    main()

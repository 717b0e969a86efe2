"""A data extractor: the title and the headings of every page, as JSON lines.

What it shows:

- **The crawler's own parse.** ``page.tree`` is the page as selectolax's Lexbor parser
  built it, the same parse the crawler read the links from: a handler that queries it
  (``page.tree.css_first("title")``, ``page.tree.css("h1, h2, h3")``) costs no second
  parse. The page was decoded with the charset its record names (``page.encoding``), so a
  Latin-1 page's ``Café`` comes out as ``Café``.
- **Items on stdout.** ``items="-"`` writes each item to stdout as one JSON line, in the
  order pages finish, as ``--items -`` does; the crawler adds nothing to an item.
- **One function, two ways to run it.** ``title_and_headings`` is an ordinary function of
  a page; this script runs it from Python, and the command line runs it as it is::

      trio-crawler --handler examples/08_extract.py:title_and_headings --items - ROOT_URL

Run it (without a URL it serves the bundled demo site in a child process)::

    python examples/08_extract.py [ROOT_URL]

Output: one JSON object per page (``url``, ``title``, ``headings``), then
``extracted <N> pages, <H> headings`` on stderr.
"""

from __future__ import annotations

from _demo import demo_root  # first: it explains a missing dependency

import sys
from typing import Any

import trio

from trio_crawler import Crawler, Page


def title_and_headings(page: Page) -> dict[str, Any]:
    """The handler: the page's ``<title>`` and its ``h1``-``h3`` headings, in page order."""
    title = page.tree.css_first("title")
    return {
        "url": page.url,
        "title": title.text(strip=True) if title is not None else None,
        "headings": [node.text(strip=True) for node in page.tree.css("h1, h2, h3")],
    }


async def main(root: str) -> None:
    pages = headings = 0

    def count(page: Page) -> dict[str, Any]:
        nonlocal pages, headings
        item = title_and_headings(page)
        pages += 1
        headings += len(item["headings"])
        return item

    crawler = Crawler([root], max_tasks=10, handler=count, items="-")
    await crawler.crawl()
    print(f"extracted {pages} pages, {headings} headings", file=sys.stderr)


if __name__ == "__main__":
    with demo_root() as root:
        trio.run(main, root)

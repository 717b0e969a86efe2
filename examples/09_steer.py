"""A crawl steered by its handler: only one section of the site is followed.

What it shows:

- **Links are the handler's to edit.** ``page.links`` holds the page's in-scope links,
  in page order, and what the handler leaves in it is what the crawl queues (and what the
  record's ``num_urls`` counts). ``stay_in_section`` keeps the links into ``SECTION`` and
  drops the rest, so the crawl never leaves it.
- **``page.follow(href)`` adds one.** The href is resolved against the page as a link on
  it would be (``"/nurseries/"`` against the home page is the section's index); the
  crawl's rules still hold (scope, ``--exclude``, robots.txt, ``--max-depth``), so
  ``follow`` cannot take a crawl off the site: it returns None for a link the crawl may
  not follow, and the URL otherwise. Here it makes sure the crawl enters the section
  from the root, whether or not the root links to it.
- **Returning None.** A handler that only steers returns nothing: there are no items.

Run it (without a URL it serves the bundled demo site in a child process)::

    python examples/09_steer.py [ROOT_URL [SECTION]]

or from the command line, with the section this file names::

    trio-crawler --handler examples/09_steer.py:stay_in_section ROOT_URL

Output: one ``fetched <url> <status>`` line per record, then ``<N> urls fetched, <M> in
<SECTION>``.
"""

from __future__ import annotations

from _demo import demo_root  # first: it explains a missing dependency

import sys
from urllib.parse import urlsplit

import trio

from trio_crawler import Crawler, Page

# The part of the site to crawl: a path prefix. The demo site has six sections; for
# another site, give its own as the second argument.
SECTION = "/nurseries/"


def stay_in_section(page: Page) -> None:
    """The handler: follow only links into SECTION (and, from a root, SECTION itself)."""
    page.links[:] = [link for link in page.links if urlsplit(link).path.startswith(SECTION)]
    if page.depth == 0:
        page.follow(SECTION)


async def main(root: str) -> None:
    crawler = Crawler([root], max_tasks=10, handler=stay_in_section)
    await crawler.crawl()
    for record in crawler.done:
        print(f"fetched {record.url} {record.status}")
    inside = sum(urlsplit(record.url).path.startswith(SECTION) for record in crawler.done)
    print(f"{len(crawler.done)} urls fetched, {inside} in {SECTION}")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        SECTION = sys.argv.pop(2)
    with demo_root() as root:
        trio.run(main, root)

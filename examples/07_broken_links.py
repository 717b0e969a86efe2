"""A broken-link checker: every link whose target failed or answered 4xx/5xx, and where it is.

What it shows:

- **A page handler that only reads.** ``links_of(page)`` is called once for every page the
  crawler reads for links, with a ``trio_crawler.Page``, and returns one item: the page's
  URL and ``page.links``, its in-scope links in the order the page gives them. It leaves
  the links alone, so the crawl is the one it would be without a handler.
- **Items beside records.** ``items=PATH`` writes each item as one JSON line, in the order
  pages finish, exactly as ``--items`` does. A handler cannot know whether a link is
  broken (its target has not been fetched yet), but after the crawl the records say which
  targets failed (``status`` null) or answered 4xx/5xx, and the items say which pages link
  to each of them: the join is :func:`broken_links`.

Run it (without a URL it serves the bundled demo site in a child process)::

    python examples/07_broken_links.py [ROOT_URL]

or give its handler to the command line and join the two files yourself::

    trio-crawler --handler examples/07_broken_links.py:links_of --items links.jsonl \\
        -o records.jsonl ROOT_URL

Output: one ``broken <target> <status or error> on <page>`` line per broken link, sorted,
then ``<N> broken links to <M> targets``.
"""

from __future__ import annotations

from _demo import demo_root  # first: it explains a missing dependency

import json
import tempfile
from collections.abc import Iterable
from typing import Any

import trio

from trio_crawler import Crawler, FetchStatistic, Page


def links_of(page: Page) -> dict[str, Any]:
    """The handler: one item per page, its URL and the links on it, in page order."""
    return {"page": page.url, "links": page.links}


def broken_links(
    records: Iterable[FetchStatistic], items: Iterable[dict[str, Any]]
) -> list[tuple[str, str, str]]:
    """(target, what went wrong, page linking to it) for every link to a target whose
    every try failed or that answered 4xx or 5xx, sorted."""
    broken = {
        record.url: str(record.status) if record.status is not None else str(record.exception)
        for record in records
        if record.status is None or record.status >= 400
    }
    return sorted(
        (link, broken[link], item["page"])
        for item in items
        for link in item["links"]
        if link in broken
    )


async def main(root: str) -> None:
    with tempfile.TemporaryDirectory() as work:
        links_file = trio.Path(work, "links.jsonl")
        crawler = Crawler([root], max_tasks=10, handler=links_of, items=links_file)
        await crawler.crawl()
        items = [json.loads(line) for line in (await links_file.read_text()).splitlines()]
    found = broken_links(crawler.done, items)
    for target, problem, page in found:
        print(f"broken {target} {problem} on {page}")
    print(f"{len(found)} broken links to {len({target for target, _, _ in found})} targets")


if __name__ == "__main__":
    with demo_root() as root:
        trio.run(main, root)

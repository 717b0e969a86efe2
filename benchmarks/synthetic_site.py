"""A deterministic static site for crawl benchmarks: many pages, all reachable, written to disk.

Why a generated site: a benchmark of the crawler needs thousands of pages that every run
crawls identically, served by something fast enough that the crawler, not the server, is
what gets measured. A static directory served by nginx is that; this module writes it.

Theory of operation
-------------------
Page 0 is ``index.html`` at the site root; page ``i >= 1`` is ``p/<i>.html``. Every page
carries ``LINKS_PER_PAGE`` relative links to other pages, made of:

* its children in a ``BRANCHING``-ary tree (page ``i``'s children are ``i*B+1 .. i*B+B``),
  which spans the site, so a crawl from the root must find every page;
* a link back to its parent (the root is written ``../``, never ``../index.html``, which
  would be a second URL for the same file and make the crawl one page longer);
* random cross links to fill up to ``LINKS_PER_PAGE``, which a crawler has to dedupe.

Each page also has links a crawler must skip (``http://example.com/...``, ``mailto:`` and
``javascript:``), and 5-15 KB of filler text drawn from a fixed pool of paragraphs, so the
crawler's parser sees realistic page sizes. Everything comes from ``random.Random(seed)``:
the same arguments write the same bytes.

The whole site is ``pages`` files and about ``pages * 10 KB`` (100 MB for 10 000 pages);
writing it takes a few seconds, most of it the file system.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path

# Links to other pages of the site on every page; the task asks for "about 20".
LINKS_PER_PAGE = 20
# Children per page in the spanning tree. Ten keeps the tree shallow (depth 4 for 10 000
# pages) and leaves half of each page's links for random cross links.
BRANCHING = 10
# Filler text per page, in bytes: 5-15 KB, roughly the text of a real article page.
MIN_FILLER = 5 * 1024
MAX_FILLER = 15 * 1024
# Paragraphs in the shared filler pool. Pages draw from the pool instead of each making
# its own random words: the bytes differ page to page, and writing 100 MB stays fast.
FILLER_PARAGRAPHS = 256

_VOCABULARY = (
    "nursery cancel scope channel worker crawler frontier request response deadline "
    "checkpoint structured concurrency task group shield timeout event loop coroutine "
    "socket connection pool keepalive header body redirect status robots scope link "
    "parser charset record statistic engine dispatcher trio httpx anyio asyncio"
)
_WORDS = _VOCABULARY.split()


@dataclass(frozen=True, slots=True, kw_only=True)
class Site:
    """What :func:`generate` wrote.

    Attributes:
        directory: The site's root directory (serve it as ``/``).
        pages: Pages written; a correct crawl from ``/`` makes exactly this many records.
        total_bytes: Bytes of HTML written.
    """

    directory: Path
    pages: int
    total_bytes: int


def page_path(index: int) -> str:
    """The site-relative file path of page ``index``."""
    return "index.html" if index == 0 else f"p/{index}.html"


def generate(directory: str | Path, pages: int = 10_000, seed: int = 0) -> Site:
    """Write a site of ``pages`` pages into ``directory`` (created if missing).

    Raises:
        ValueError: If ``pages`` is below 1.
    """
    if pages < 1:
        raise ValueError(f"pages must be >= 1, not {pages!r}")
    root = Path(directory)
    (root / "p").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pool = [_paragraph(rng) for _ in range(FILLER_PARAGRAPHS)]
    total = 0
    for index in range(pages):
        html = _page(index, pages, rng, pool).encode()
        (root / page_path(index)).write_bytes(html)
        total += len(html)
    return Site(directory=root, pages=pages, total_bytes=total)


def _href(source: int, target: int) -> str:
    """A relative href from page ``source`` to page ``target``."""
    if target == 0:
        return "./" if source == 0 else "../"
    if source == 0:
        return f"p/{target}.html"
    return f"{target}.html"


def link_targets(
    index: int, pages: int, *, branching: int, links: int, rng: random.Random
) -> list[int]:
    """The pages page ``index`` of ``pages`` links to: its children in a tree of
    ``branching`` (so that every page is reachable from page 0), its parent, then random
    pages until there are ``links``. A random link may repeat a tree link or another, as on
    a real site; there are ``links`` either way, and fewer only on sites smaller than that.
    """
    children = range(index * branching + 1, min(index * branching + branching, pages - 1) + 1)
    targets = dict.fromkeys(children)  # an ordered set
    if index > 0:
        targets[(index - 1) // branching] = None
    attempts = 0
    while len(targets) < links and attempts < 4 * links:
        attempts += 1
        target = rng.randrange(pages)
        if target != index:
            targets[target] = None
    return list(targets)


def _page(index: int, pages: int, rng: random.Random, pool: list[str]) -> str:
    targets = link_targets(index, pages, branching=BRANCHING, links=LINKS_PER_PAGE, rng=rng)
    links = [f'<li><a href="{_href(index, target)}">page {target}</a></li>' for target in targets]
    links += [
        f'<li><a href="http://example.com/{index}">external</a></li>',
        f'<li><a href="mailto:page{index}@example.com">mail</a></li>',
        '<li><a href="javascript:void(0)">script</a></li>',
    ]
    rng.shuffle(links)
    size = rng.randint(MIN_FILLER, MAX_FILLER)
    filler: list[str] = []
    written = 0
    while written < size:
        paragraph = rng.choice(pool)
        filler.append(f"<p>{paragraph}</p>")
        written += len(paragraph) + 7
    head = (
        "<!DOCTYPE html>\n"
        f'<html><head><meta charset="utf-8"><title>Page {index}</title></head>\n'
        f"<body><h1>Page {index}</h1>\n"
    )
    body = "<ul>\n" + "\n".join(links) + "\n</ul>\n" + "\n".join(filler)
    return head + body + "\n</body></html>\n"


def _paragraph(rng: random.Random) -> str:
    return " ".join(rng.choices(_WORDS, k=rng.randint(40, 120))).capitalize() + "."


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a synthetic site for crawl benchmarks.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    site = generate(args.directory, pages=args.pages, seed=args.seed)
    print(f"wrote {site.pages} pages, {site.total_bytes / 2**20:.1f} MiB, to {site.directory}")


if __name__ == "__main__":
    main()

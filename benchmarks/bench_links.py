"""Link extraction and resolution per page, on real pages, for one or two source trees.

Why: resolving a page's links is on the crawler's hot path (tens of links a page), and the
resolver changed (urllib repairs, then the WHATWG URL Standard through ada-url). This
times ``_links.extract_links`` over every HTML file of a directory (the Python docs by
default, as ``benchmarks/setup.sh`` installs them), each page as its URL under a made-up
origin, in a child process per tree so that two trees can be compared side by side:
rounds alternate between the trees and the best round of each is reported.

Usage:
    python benchmarks/bench_links.py [--site DIR] [--rounds N] TREE [TREE ...]

Each TREE is a checkout of this project (its ``trio_crawler`` package is imported from
there); the figures are milliseconds per page (parse and resolve, then resolution alone:
each page's hrefs through ``_urls.LinkResolver``) and microseconds per link found.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

DOCS = "/usr/share/doc/python3.11/html"
ORIGIN = "http://docs.example/"

# Run in the child, with the tree's package first on sys.path.
CHILD = """
import json, sys, time
from pathlib import Path
from trio_crawler._links import extract_links

site = Path(sys.argv[1])
pages = [(ORIGIN + str(p.relative_to(site)), p.read_bytes()) for p in sorted(site.rglob("*.html"))]
from selectolax.lexbor import LexborHTMLParser
from trio_crawler._urls import LinkResolver

hrefs = [
    (url, [node.attributes.get("href") or "" for node in
           LexborHTMLParser(body).css("a[href], area[href], link[href]")])
    for url, body in pages
]
best = resolving = None
links = 0
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    links = 0
    for url, body in pages:
        links += len(extract_links(body, url, "utf-8"))
    elapsed = time.perf_counter() - start
    best = elapsed if best is None else min(best, elapsed)
    start = time.perf_counter()
    for url, page_hrefs in hrefs:
        resolve = LinkResolver(url).resolve
        for href in page_hrefs:
            resolve(href)
    elapsed = time.perf_counter() - start
    resolving = elapsed if resolving is None else min(resolving, elapsed)
print(json.dumps({"pages": len(pages), "links": links, "seconds": best, "resolving": resolving,
                  "hrefs": sum(len(h) for _, h in hrefs)}))
""".replace("ORIGIN", repr(ORIGIN))


def measure(tree: Path, site: Path, rounds: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(site), str(rounds)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    figures: dict[str, float] = json.loads(result.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--site", type=Path, default=Path(DOCS))
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per tree")
    args = parser.parse_args()
    best: dict[Path, dict[str, float]] = {}
    for _ in range(args.rounds):
        for tree in args.trees:  # alternate, so drift in the machine's speed hits both
            figures = measure(tree, args.site, 1)
            if tree not in best or figures["seconds"] < best[tree]["seconds"]:
                best[tree] = figures
    for tree, figures in best.items():
        per_page = figures["seconds"] / figures["pages"] * 1000
        per_link = figures["seconds"] / max(figures["links"], 1) * 1e6
        resolving = figures["resolving"] / figures["pages"] * 1000
        print(
            f"{tree}: {figures['pages']:.0f} pages, {figures['links']:.0f} links; "
            f"extract_links {per_page:.3f} ms/page ({per_link:.2f} us/link); resolving "
            f"{figures['hrefs']:.0f} hrefs alone {resolving:.3f} ms/page"
        )


if __name__ == "__main__":
    main()

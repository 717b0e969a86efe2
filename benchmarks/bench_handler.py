"""What a page handler costs: CPU per page with one, against the same crawl without.

Two questions, each answered side by side with its yardstick in the same run, because this
machine's speed moves by half within minutes and only ratios mean much:

1. **CPU per page.** The synthetic site on nginx, crawled by the command line on the trio
   engine at ``--max-tasks 100``, without a handler and with :func:`title_item` (it reads
   the page's ``<title>`` from ``page.tree`` and returns one item, written to ``--items``),
   alternating (each round starting with the next mode), ``--rounds`` rounds. CPU is the
   child's user + system time (GNU time's ``wait4``), interpreter start and the handler's
   import included. The ratio is taken per round and its median reported; target: at most
   1.10. With ``--before DIR`` (a directory holding the ``trio_crawler`` package as it was
   before the handler existed, e.g. ``git archive 107e2e3 trio_crawler | tar -x -C DIR``),
   a third crawl per round runs that code, and the median of "no handler" / "before" says
   what the handler's machinery costs a crawl that has none; target: at most 1.03.
2. **One parse per page.** In this process, the same site crawled with :func:`title_item`,
   with selectolax's ``LexborHTMLParser`` counted where the crawler makes it
   (``trio_crawler._links``): the parses divided by the pages read for links must be 1,
   the handler's ``page.tree`` being the parse the links came from.

Usage::

    python benchmarks/bench_handler.py [--pages 10000] [--rounds 3] [--before DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

# The crawl under test imports this file for its handler (--handler PATH:title_item), so
# the harness's own modules are imported where they are used: the crawl with a handler
# pays for the handler, not for nginx's and the site generator's imports (about 40 ms).

CRAWL_TIMEOUT = 900.0
HANDLER = f"{Path(__file__).resolve()}:title_item"


def title_item(page: Any) -> dict[str, Any]:
    """The handler measured: the page's title, from the crawler's own parse, as one item."""
    title = page.tree.css_first("title")
    return {"url": page.url, "title": title.text(strip=True) if title is not None else None}


def crawl_command(root: str, output: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trio_crawler",
        "--max-tasks",
        "100",
        "-q",
        "--no-progress",
        "--ignore-robots",
        "-o",
        str(output),
        *extra,
        root,
    ]


def count_lines(path: Path) -> int:
    with path.open() as lines:
        return sum(1 for _ in lines)


def cpu_part(pages: int, rounds: int, before: Path | None) -> tuple[str, bool]:
    """Part 1: the crawl without a handler, with one, and (``before``) on the old code."""
    import statistics
    import tempfile

    from measure import markdown_table, run_measured
    from nginx import serve_directory
    from synthetic_site import generate

    modes = ["before", "no handler", "handler"] if before is not None else ["no handler", "handler"]
    rows = []
    ratios: dict[str, list[float]] = {"handler": [], "before": []}
    passed = True
    with tempfile.TemporaryDirectory(prefix="bench-handler-") as work:
        site = generate(Path(work, "site"), pages=pages)
        with serve_directory(site.directory) as root:
            for round_number in range(1, rounds + 1):
                cpu: dict[str, float] = {}
                # Each round starts with another mode, so that no mode always runs first
                # (on a cold page cache, or just after the site was written).
                shift = (round_number - 1) % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    output, items = Path(work, "out.jsonl"), Path(work, "items.jsonl")
                    extra: tuple[str, ...] = ()
                    env = dict(os.environ)
                    if mode == "handler":
                        extra = ("--handler", HANDLER, "--items", str(items))
                    if mode == "before":
                        assert before is not None
                        env["PYTHONPATH"] = str(before)
                    # cwd: python -m puts it first on sys.path, ahead of PYTHONPATH.
                    cost = run_measured(
                        crawl_command(root, output, *extra),
                        timeout=CRAWL_TIMEOUT,
                        cwd=work,
                        env=env,
                    )
                    made = count_lines(output)
                    made_items = count_lines(items) if mode == "handler" else 0
                    ok = cost.returncode == 0 and made == site.pages
                    ok &= mode != "handler" or made_items == site.pages
                    passed &= ok
                    cpu[mode] = cost.cpu_s
                    rows.append(
                        [
                            round_number,
                            mode,
                            f"{cost.cpu_s * 1000 / made:.3f}" if made else "-",
                            f"{cost.peak_rss_mib:.1f}",
                            f"{cost.wall_s:.1f}",
                            made,
                            made_items if mode == "handler" else "",
                            f"{cost.steal_percent:.0f}%",
                        ]
                    )
                ratios["handler"].append(cpu["handler"] / cpu["no handler"])
                if before is not None:
                    ratios["before"].append(cpu["no handler"] / cpu["before"])
    table = markdown_table(
        ["round", "crawl", "CPU ms/page", "peak RSS MiB", "wall s", "records", "items", "steal"],
        rows,
    )
    handler_median = statistics.median(ratios["handler"])
    text = (
        f"### A page handler against none: {pages} pages, trio engine, --max-tasks 100\n\n"
        f"{table}\n\nCPU with the handler / without, per round: "
        + ", ".join(f"{ratio:.3f}" for ratio in ratios["handler"])
        + f"; median **{handler_median:.3f}** (target: at most 1.10)."
    )
    passed &= handler_median <= 1.10
    if before is not None:
        before_median = statistics.median(ratios["before"])
        text += (
            "\n\nCPU without a handler / the code before the handler existed, per round: "
            + ", ".join(f"{ratio:.3f}" for ratio in ratios["before"])
            + f"; median **{before_median:.3f}** (target: at most 1.03)."
        )
        passed &= before_median <= 1.03
    return text, passed


def parse_part(pages: int) -> tuple[str, bool]:
    """Part 2: selectolax's parses per page read for links, with the handler."""
    import json
    import tempfile

    import trio
    from measure import markdown_table
    from nginx import serve_directory
    from synthetic_site import generate

    import trio_crawler
    from trio_crawler import _links

    parses = 0
    real_parser = _links.LexborHTMLParser

    def counting_parser(markup: str | bytes) -> Any:
        nonlocal parses
        parses += 1
        return real_parser(markup)

    _links.LexborHTMLParser = counting_parser  # type: ignore[assignment,misc]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-handler-") as work:
            site = generate(Path(work, "site"), pages=pages)
            items = Path(work, "items.jsonl")
            with serve_directory(site.directory) as root:
                crawler = trio_crawler.Crawler(
                    [root], max_tasks=100, obey_robots=False, handler=title_item, items=items
                )
                trio.run(crawler.crawl)
            titles = [json.loads(line)["title"] for line in items.read_text().splitlines()]
    finally:
        _links.LexborHTMLParser = real_parser  # type: ignore[misc]
    read = sum(1 for record in crawler.done if record.content_type == "text/html")
    table = markdown_table(
        ["pages read for links", "items", "titles found", "parses", "parses per page"],
        [[read, len(titles), sum(t is not None for t in titles), parses, f"{parses / read:.3f}"]],
    )
    text = (
        f"### Parses per page with a handler reading page.tree: {pages} pages\n\n{table}\n\n"
        "Target: exactly 1 (the handler's tree is the parse the links came from)."
    )
    return text, parses == read == len(titles) == site.pages


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--before",
        type=Path,
        help="a directory holding the trio_crawler package before the handler, to compare",
    )
    parser.add_argument("--only", choices=["cpu", "parses"], default=None)
    return parser


def run(args: argparse.Namespace) -> tuple[str, bool]:
    parts = []
    passed = True
    if args.only in (None, "parses"):
        text, ok = parse_part(min(args.pages, 2000))
        parts.append(text)
        passed &= ok
    if args.only in (None, "cpu"):
        text, ok = cpu_part(args.pages, args.rounds, args.before)
        parts.append(text)
        passed &= ok
    return "\n\n".join(parts), passed


def main() -> None:
    text, passed = run(build_parser().parse_args())
    print(text)
    if not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    from measure import run_main

    os.environ.setdefault("PYTHONHASHSEED", "0")
    run_main(main, "bench_handler")

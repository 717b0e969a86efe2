"""Our four engines against Scrapy and wget: the same site, crawled by each tool in turn.

The question: what does a crawl with trio_crawler cost next to the tools people already
use, and do its engines differ? Each tool crawls a whole site from its root and is measured
from outside, as a user would run it, in a fresh process:

* **trio_crawler**, once per engine, through the real command line:
  ``python -m trio_crawler --engine E --max-tasks N -q -o FILE ROOT`` (plus
  ``--ignore-robots`` if this version has it). Its pages are the JSON Lines records with
  status 200. ``--our-python LABEL=PATH`` adds interpreters (another venv, say one with
  httpx2): the first runs every engine, the others the ``--extra-engines``.
* **Scrapy**, a ``CrawlSpider`` with a ``LinkExtractor`` and the same concurrency, robots
  off (``scrapy_spider.py``, run in the peers venv that ``setup.sh`` makes).
* **wget -r**, sequential (one connection, one request at a time):
  ``wget -r -l inf -np --no-verbose -e robots=off -P DIR ROOT``; its pages are the files
  it saved.
* **The floor** (``floor.py``), in each of our interpreters: a minimal crawler on the same
  libraries (``floor: minimal crawl``), and the same workers fetching every ``.html`` file
  of the site from a list, with no parsing (``floor: fetch only``). No crawler built on
  Trio, httpx and selectolax costs less than the second on this machine; the first is what
  the libraries cost with a crawler that does almost nothing itself.

Two sites, each served by a private nginx (``nginx.py``), so the server costs microseconds
of C per page and the crawler is what gets measured:

* ``synthetic``: ``synthetic_site.py``'s deterministic site (10 000 pages by default). Every
  tool must find exactly its page count; a run that does not is reported as a failure.
* ``docs``: the Python 3.11 documentation from Debian's ``python3.11-doc`` (about 530 HTML
  pages, plus stylesheets, sources and images). The tools follow different elements (we
  read ``<a>``, ``<area>`` and ``<link>``; Scrapy ``<a>`` and ``<area>`` minus file types it
  skips; wget also images and scripts), so the table counts HTML pages separately, and the
  report lists the HTML pages one tool found and another did not.

How noise is handled: the machine is a shared 2-CPU virtual machine whose host steals CPU
(see README.md). Every tool runs once per round, in a rotated order (round 2 starts with the
second tool), all within one invocation, and the table gives medians over the rounds, the
range of CPU per page, and the steal each tool's runs met. CPU per page is (user + system
CPU of the crawler's process) / pages and includes interpreter start-up and imports, as a
user pays them; wall time includes them too.

Run from the repository root (``benchmarks/setup.sh`` first)::

    python benchmarks/bench_engines.py [--sites synthetic docs] [--pages 10000] [--rounds 3]
        [--max-tasks 100] [--our-python httpx=.venv/bin/python --our-python httpx2=PATH]

``benchmarks/run.py`` runs this with the other benchmarks and saves the tables.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if __package__ in (None, ""):
    # Run as a script: make the `benchmarks` folder importable as a package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import (
    REPOSITORY,
    ChildCost,
    compiled,
    markdown_table,
    package_identity,
    run_main,
    run_measured,
    snapshot_package,
)
from benchmarks.nginx import NginxError, find_nginx, serve_directory
from benchmarks.synthetic_site import generate

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

ENGINES = ("trio", "anyio-trio", "anyio-asyncio", "asyncio")
SITES = ("synthetic", "docs")
DOCS_DIRECTORY = Path("/usr/share/doc/python3.11/html")
PEERS_PYTHON = REPOSITORY / "benchmarks" / ".venv" / "bin" / "python"
SCRAPY_SPIDER = Path(__file__).resolve().parent / "scrapy_spider.py"
FLOOR_SCRIPT = Path(__file__).resolve().parent / "floor.py"
AIOHTTP_FLOOR_SCRIPT = Path(__file__).resolve().parent / "floor_aiohttp.py"
# A crawl that has not finished in this long is stuck, not slow: the slowest 10 000-page
# crawl seen (bench_clients.py, arrangement A under heavy steal) took 213 s.
CHILD_TIMEOUT = 1800.0
# wget's exit status 8 means "the server answered some request with an error" (a broken
# link on the site, or robots.txt); the crawl itself went on to the end.
WGET_OK_STATUSES = frozenset({0, 8})
# Runs of a tool's start-up alone (the median is reported).
STARTUP_RUNS = 3
# How many differing URLs the docs comparison prints per pair of tools.
SHOWN_DIFFERENCES = 5


class BenchmarkError(RuntimeError):
    """The benchmark cannot run as asked (a missing tool, a bad option); the message says why."""


# -- our command line, from a given interpreter ------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OurPython:
    """An interpreter that runs our CLI from the snapshot, as probed before any crawl.

    Attributes:
        label: The name given with ``--our-python LABEL=PATH`` (empty for the default).
        python: The interpreter's path.
        versions: Its Python and HTTP stack versions, for the report.
        extra_args: Options every crawl gets: ``--ignore-robots`` if this CLI has it.
    """

    label: str
    python: str
    versions: str
    extra_args: tuple[str, ...]


def parse_our_python(text: str) -> tuple[str, str]:
    """``LABEL=PATH`` (or a bare ``PATH``, labelled by its venv's name) to (label, path)."""
    label, sep, path = text.partition("=")
    if not sep:
        path = label
        label = Path(path).resolve().parent.parent.name
    if not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(f"--our-python {text!r}: {path} is not an executable")
    # Absolute, since the children run elsewhere; not resolved, since a venv's python is a
    # symlink to the base interpreter, and following it would leave the venv behind.
    return label, os.path.abspath(path)


_PROBE = """\
import importlib.metadata as metadata, json, platform, trio_crawler
versions = {"Python": platform.python_version()}
for name in ("httpx", "httpx2", "httpcore", "trio", "anyio"):
    try:
        versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
print(json.dumps({"file": trio_crawler.__file__, "versions": versions}))
"""


def probe_our_python(
    label: str, python: str, *, package_path: Path, env: dict[str, str], cwd: Path
) -> OurPython:
    """Check that ``python`` runs our CLI from the snapshot, and read what it has.

    Also compiles the snapshot for this interpreter, so the first measured run does not pay
    for writing the ``.pyc`` files, and reads ``--help`` for ``--ignore-robots`` (an option
    being added; nginx answers 404 for /robots.txt, so without it the crawl is the same).

    Raises:
        BenchmarkError: If the interpreter cannot import the snapshot or lacks an engine.
    """
    probe = subprocess.run(
        [python, "-c", _PROBE], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    if probe.returncode != 0:
        raise BenchmarkError(
            f"{python} cannot import trio_crawler and its dependencies:\n{probe.stderr}"
        )
    found = json.loads(probe.stdout)
    if not Path(found["file"]).is_relative_to(package_path):
        raise BenchmarkError(f"{python} imported {found['file']}, not the snapshot")
    subprocess.run(
        [python, "-m", "compileall", "-q", str(package_path)], env=env, cwd=cwd, check=True
    )
    help_text = subprocess.run(
        [python, "-m", "trio_crawler", "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=True,
    ).stdout
    missing = [engine for engine in ENGINES if engine not in help_text]
    if missing:
        raise BenchmarkError(f"{python}'s trio-crawler --help names no engine {missing}")
    versions = ", ".join(f"{name} {value}" for name, value in found["versions"].items())
    extra = ("--ignore-robots",) if "--ignore-robots" in help_text else ()
    return OurPython(label=label, python=python, versions=versions, extra_args=extra)


def our_command(
    our: OurPython, engine: str, *, max_tasks: int, output: Path, root: str
) -> list[str]:
    """The documented command line, run from the interpreter's ``-m``."""
    return [
        our.python,
        "-m",
        "trio_crawler",
        "--engine",
        engine,
        "--max-tasks",
        str(max_tasks),
        "-q",
        *our.extra_args,
        "-o",
        str(output),
        root,
    ]


def floor_command(
    python: str, *, max_tasks: int, output: Path, root: str, fetch_tree: Path | None = None
) -> list[str]:
    """``floor.py``'s command line: its minimal crawl, or with ``fetch_tree`` fetch only."""
    command = [python, str(FLOOR_SCRIPT), root, str(output), "--concurrency", str(max_tasks)]
    return command if fetch_tree is None else [*command, "--fetch-tree", str(fetch_tree)]


def snapshot_environment(package_path: Path) -> dict[str, str]:
    """The environment of our CLI's children: the snapshot first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(package_path), *filter(None, [env.get("PYTHONPATH")])])
    return env


# -- what a crawl found ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """What one crawl fetched.

    Attributes:
        pages: Responses with status 200 (for wget: files saved).
        html_pages: Those of them that were HTML (served as text/html, which nginx does for
            ``.html`` files only).
        html_urls: The HTML pages' URLs, spelled for comparison (``.../index.html`` is
            ``.../``, as nginx serves both); fewer than ``html_pages`` when a tool fetched
            a page under both names.
    """

    pages: int
    html_pages: int
    html_urls: frozenset[str] = field(repr=False)


# The tally of a crawl that left no output.
_NOTHING = Tally(pages=0, html_pages=0, html_urls=frozenset())


def comparable(url: str) -> str:
    """A URL spelled so that the tools agree: a directory's ``index.html`` is the directory."""
    return url.removesuffix("index.html") if url.endswith("/index.html") else url


def tally_jsonl(path: Path) -> Tally:
    """Our CLI's output: one JSON record per finished URL; pages are the status-200 ones."""
    pages = 0
    html_urls = []
    with path.open() as records:
        for line in records:
            record = json.loads(line)
            if record["status"] != 200:
                continue
            pages += 1
            if record["content_type"] == "text/html":
                html_urls.append(comparable(record["url"]))
    return Tally(pages=pages, html_pages=len(html_urls), html_urls=frozenset(html_urls))


def tally_json(path: Path) -> Tally:
    """The tally JSON that ``scrapy_spider.py`` writes when the spider closes, as
    ``floor.py`` does when it ends."""
    found = json.loads(path.read_text())
    return Tally(
        pages=found["pages"],
        html_pages=found["html_pages"],
        html_urls=frozenset(comparable(url) for url in found["html_urls"]),
    )


def tally_wget(directory: Path, root: str) -> Tally:
    """The files wget saved under ``DIR/HOST:PORT/``; each is one page fetched with 200."""
    host_directory = directory / root.split("/")[2]
    pages = 0
    html_urls = set()
    for path in host_directory.rglob("*"):
        if not path.is_file():
            continue
        pages += 1
        if path.suffix == ".html":
            relative = path.relative_to(host_directory).as_posix()
            html_urls.add(comparable(root + quote(relative, safe="/%:@!$&'()*+,;=-._~")))
    return Tally(pages=pages, html_pages=len(html_urls), html_urls=frozenset(html_urls))


# -- the tools and their runs ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """One row of the table: a crawler and how to run it.

    Attributes:
        label: The row's name.
        kind: ``"ours"``, ``"floor"``, ``"aiohttp"`` (``floor_aiohttp.py``, in the peers
            venv), ``"scrapy"`` or ``"wget"``.
        engine: For ``"ours"``: the ``--engine``; for ``"floor"`` and ``"aiohttp"``:
            ``"crawl"`` or ``"fetch"``.
        our: For ``"ours"`` and ``"floor"``: the interpreter.
    """

    label: str
    kind: str
    engine: str = ""
    our: OurPython | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One crawl by one tool: its cost, what it found and what was wrong with it."""

    site: str
    tool: str
    round: int
    cost: ChildCost
    tally: Tally
    problems: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "tool": self.tool,
            "round": self.round,
            **asdict(self.cost),
            "pages": self.tally.pages,
            "html_pages": self.tally.html_pages,
            "problems": list(self.problems),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What every crawl of a benchmark run shares."""

    max_tasks: int
    workdir: Path
    our_env: dict[str, str]
    peers_python: str
    wget: str
    json_out: Path | None


def run_tool(
    tool: Tool,
    *,
    site: str,
    root: str,
    site_directory: Path,
    round_number: int,
    expected_pages: int | None,
    settings: Settings,
) -> Run:
    """Crawl ``root`` once with ``tool`` in a fresh process, measure it and count its pages.

    A run is failed (its ``problems`` say why) if the tool exits with an error or is killed,
    or, when ``expected_pages`` is given, finds any other number of pages.
    """
    scratch = Path(tempfile.mkdtemp(prefix=f"{tool.kind}-", dir=settings.workdir))
    stderr = scratch / "stderr.txt"
    problems: list[str] = []
    ok_statuses: Iterable[int] = {0}
    try:
        if tool.kind == "ours":
            assert tool.our is not None
            output = scratch / "records.jsonl"
            command = our_command(
                tool.our, tool.engine, max_tasks=settings.max_tasks, output=output, root=root
            )
            # The report (one line per URL) goes to stdout; producing it is part of the
            # command's cost, reading it is not ours.
            cost = run_measured(
                command,
                timeout=CHILD_TIMEOUT,
                cwd=scratch,
                env=settings.our_env,
                stderr=stderr,
            )
            tally = tally_jsonl(output) if output.exists() else _NOTHING
        elif tool.kind == "floor":
            assert tool.our is not None
            output = scratch / "tally.json"
            command = floor_command(
                tool.our.python,
                max_tasks=settings.max_tasks,
                output=output,
                root=root,
                fetch_tree=site_directory if tool.engine == "fetch" else None,
            )
            cost = run_measured(
                command, timeout=CHILD_TIMEOUT, cwd=scratch, env=settings.our_env, stderr=stderr
            )
            tally = tally_json(output) if output.exists() else _NOTHING
        elif tool.kind == "aiohttp":
            output = scratch / "tally.json"
            command = [settings.peers_python, str(AIOHTTP_FLOOR_SCRIPT), root, str(output)]
            command += ["--concurrency", str(settings.max_tasks)]
            if tool.engine == "fetch":
                command += ["--fetch-tree", str(site_directory)]
            cost = run_measured(command, timeout=CHILD_TIMEOUT, cwd=scratch, stderr=stderr)
            tally = tally_json(output) if output.exists() else _NOTHING
        elif tool.kind == "scrapy":
            output = scratch / "tally.json"
            command = [settings.peers_python, str(SCRAPY_SPIDER), root, str(output)]
            command += ["--concurrency", str(settings.max_tasks)]
            cost = run_measured(command, timeout=CHILD_TIMEOUT, cwd=scratch, stderr=stderr)
            tally = tally_json(output) if output.exists() else _NOTHING
        else:
            saved = scratch / "saved"
            command = [settings.wget, "-r", "-l", "inf", "-np", "--no-verbose"]
            command += ["-e", "robots=off", "-P", str(saved), root]
            cost = run_measured(command, timeout=CHILD_TIMEOUT, cwd=scratch, stderr=stderr)
            ok_statuses = WGET_OK_STATUSES
            tally = tally_wget(saved, root)
        if cost.timed_out:
            problems.append(f"killed after {CHILD_TIMEOUT:g} s")
        elif cost.returncode not in ok_statuses:
            tail = stderr.read_text(errors="replace")[-600:]
            problems.append(f"exit status {cost.returncode}: {tail.strip()}")
        if expected_pages is not None and {tally.pages, tally.html_pages} != {expected_pages}:
            problems.append(f"found {tally.pages} pages, the site has {expected_pages}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    run = Run(
        site=site,
        tool=tool.label,
        round=round_number,
        cost=cost,
        tally=tally,
        problems=tuple(problems),
    )
    if settings.json_out is not None:
        with settings.json_out.open("a") as out:
            out.write(json.dumps(run.as_json()) + "\n")
    return run


def crawl_rounds(
    tools: Sequence[Tool],
    *,
    site: str,
    root: str,
    site_directory: Path,
    rounds: int,
    expected_pages: int | None,
    settings: Settings,
) -> list[Run]:
    """Every tool once per round, the order rotated from round to round.

    Rotation spreads slow drifts in the machine's load (another tenant starting a job)
    over all tools instead of always hitting the one that runs last.
    """
    runs = []
    for round_number in range(1, rounds + 1):
        shift = (round_number - 1) % len(tools)
        for tool in [*tools[shift:], *tools[:shift]]:
            run = run_tool(
                tool,
                site=site,
                root=root,
                site_directory=site_directory,
                round_number=round_number,
                expected_pages=expected_pages,
                settings=settings,
            )
            runs.append(run)
            print(
                f"{site} round {round_number}/{rounds} {tool.label}: {run.tally.pages} pages "
                f"({run.tally.html_pages} HTML), {run.cost.wall_s:.1f} s wall, "
                f"{run.cost.cpu_s:.1f} s CPU, {run.cost.peak_rss_mib:.1f} MiB peak, "
                f"steal {run.cost.steal_percent:.0f}%"
                + (f"; PROBLEM: {'; '.join(run.problems)}" if run.problems else ""),
                file=sys.stderr,
                flush=True,
            )
    return runs


def site_table(runs: Sequence[Run], tools: Sequence[Tool], *, html_column: bool) -> str:
    """Medians per tool, in the tools' order; a ✗ marks a tool with a failed run."""
    rows = []
    for tool in tools:
        mine = [run for run in runs if run.tool == tool.label]
        per_page = [1000 * run.cost.cpu_s / max(1, run.tally.pages) for run in mine]
        found = sorted({run.tally.pages for run in mine})
        html = sorted({run.tally.html_pages for run in mine})
        mark = " ✗" if any(run.problems for run in mine) else ""
        row: list[object] = [
            tool.label + mark,
            f"{statistics.median(run.tally.pages / run.cost.wall_s for run in mine):.0f}",
            f"{statistics.median(per_page):.2f} ({min(per_page):.2f}-{max(per_page):.2f})",
            f"{statistics.median(run.cost.peak_rss_mib for run in mine):.1f}",
        ]
        if html_column:
            row.append(_count_range(html))
        row += [
            _count_range(found),
            f"{statistics.median(run.cost.wall_s for run in mine):.1f}",
            f"{statistics.median(run.cost.steal_percent for run in mine):.0f}",
        ]
        rows.append(row)
    headers = ["tool", "pages/s", "CPU ms/page (min-max)", "peak RSS MiB"]
    if html_column:
        headers.append("HTML pages")
    headers += ["pages found", "wall s", "steal %"]
    return markdown_table(headers, rows)


def _count_range(counts: Sequence[int]) -> str:
    """One count, or ``low-high`` when the rounds disagreed."""
    return str(counts[0]) if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}"


def compare_findings(runs: Sequence[Run], tools: Sequence[Tool]) -> list[str]:
    """Where the tools disagree on which HTML pages a site has, as lines of markdown.

    Each tool's first run is compared with the first tool's; a tool whose rounds found
    different counts, or that fetched one page under two names, is named too.
    """
    first_runs: dict[str, Run] = {}
    for run in runs:
        first_runs.setdefault(run.tool, run)
    reference = tools[0].label
    expected = first_runs[reference].tally.html_urls
    lines = []
    for tool in tools:
        counts = sorted({run.tally.html_pages for run in runs if run.tool == tool.label})
        if len(counts) > 1:
            lines.append(f"- {tool.label}: its rounds found {counts} HTML pages")
        tally = first_runs[tool.label].tally
        if tally.html_pages != len(tally.html_urls):
            lines.append(
                f"- {tool.label}: {tally.html_pages} HTML responses for "
                f"{len(tally.html_urls)} distinct pages (it fetched a directory and its "
                "index.html both)"
            )
        if tool.label == reference:
            continue
        found = first_runs[tool.label].tally.html_urls
        missing, extra = sorted(expected - found), sorted(found - expected)
        if missing or extra:
            lines.append(
                f"- {tool.label} vs {reference}: {len(missing)} HTML pages missing "
                f"{_examples(missing)}, {len(extra)} extra {_examples(extra)}"
            )
    return lines


def _examples(urls: Sequence[str]) -> str:
    if not urls:
        return ""
    paths = ["/" + url.split("/", 3)[3] for url in urls[:SHOWN_DIFFERENCES]]
    more = ", ..." if len(urls) > SHOWN_DIFFERENCES else ""
    return "(" + ", ".join(f"`{path}`" for path in paths) + more + ")"


# -- the whole benchmark -----------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Crawl a synthetic site and the Python docs with our engines, Scrapy and "
        "wget; print markdown tables of medians."
    )
    parser.add_argument("--sites", nargs="+", choices=SITES, default=list(SITES))
    parser.add_argument("--pages", type=int, default=10_000, help="synthetic site size")
    parser.add_argument("--seed", type=int, default=0, help="synthetic site seed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tasks", type=int, default=100, help="our --max-tasks, Scrapy's")
    parser.add_argument(
        "--engines", nargs="+", choices=ENGINES, default=list(ENGINES), help="ours, first python"
    )
    parser.add_argument(
        "--our-python",
        action="append",
        type=parse_our_python,
        metavar="LABEL=PATH",
        help="interpreter to run our CLI with (repeatable; default: this one). The first "
        "runs --engines, the others --extra-engines",
    )
    parser.add_argument(
        "--extra-engines", nargs="+", choices=ENGINES, default=["trio"], metavar="ENGINE"
    )
    parser.add_argument("--no-scrapy", action="store_true", help="leave Scrapy out")
    parser.add_argument("--no-wget", action="store_true", help="leave wget out")
    parser.add_argument("--no-floor", action="store_true", help="leave floor.py's rows out")
    parser.add_argument("--peers-python", default=str(PEERS_PYTHON), help="Scrapy's venv")
    parser.add_argument("--docs-directory", type=Path, default=DOCS_DIRECTORY)
    parser.add_argument("--json-out", type=Path, help="append every run as JSON here")
    # run.py's snapshot of the package, shared by every part of one run; not for people.
    parser.add_argument("--snapshot", type=Path, help=argparse.SUPPRESS)
    return parser


def run(args: argparse.Namespace) -> tuple[str, bool]:
    """Run the benchmark ``args`` asks for; return (markdown, True if every check passed).

    Raises:
        BenchmarkError: If a tool or the docs are missing, before any crawl.
        NginxError: If nginx is missing or does not start.
    """
    if args.pages < 1 or args.rounds < 1 or args.max_tasks < 1:
        raise BenchmarkError("--pages, --rounds and --max-tasks must be >= 1")
    if "docs" in args.sites and not (args.docs_directory / "index.html").is_file():
        raise BenchmarkError(
            f"no Python docs in {args.docs_directory}: run benchmarks/setup.sh "
            "(apt-get install python3.11-doc)"
        )
    wget = shutil.which("wget") or ""
    if not args.no_wget and not wget:
        raise BenchmarkError("wget not found: run benchmarks/setup.sh (apt-get install wget)")
    if not args.no_scrapy and not os.access(args.peers_python, os.X_OK):
        raise BenchmarkError(
            f"no Scrapy venv at {args.peers_python}: run benchmarks/setup.sh, or pass "
            "--peers-python or --no-scrapy"
        )
    interpreters = args.our_python or [("", sys.executable)]
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as work:
        workdir = Path(work)
        package_path = (
            compiled(args.snapshot) if args.snapshot else snapshot_package(workdir / "snapshot")
        )
        our_env = snapshot_environment(package_path)
        ours = [
            probe_our_python(label, python, package_path=package_path, env=our_env, cwd=workdir)
            for label, python in interpreters
        ]
        tools = _tools(ours, args)
        settings = Settings(
            max_tasks=args.max_tasks,
            workdir=workdir,
            our_env=our_env,
            peers_python=args.peers_python,
            wget=wget,
            json_out=args.json_out,
        )
        sections = [_environment(ours, tools, package_path, args, settings)]
        all_passed = True
        if "synthetic" in args.sites:
            site = generate(workdir / "site", pages=args.pages, seed=args.seed)
            with serve_directory(site.directory) as root:
                runs = crawl_rounds(
                    tools,
                    site="synthetic",
                    root=root,
                    site_directory=site.directory,
                    rounds=args.rounds,
                    expected_pages=site.pages,
                    settings=settings,
                )
            shutil.rmtree(site.directory)
            sections.append(
                f"### Synthetic site: {site.pages} pages, {site.total_bytes / 2**20:.0f} MiB, "
                f"max_tasks={args.max_tasks}, median of {args.rounds} rounds\n\n"
                + site_table(runs, tools, html_column=False)
                + _problems(runs)
            )
            all_passed &= not any(run.problems for run in runs)
        if "docs" in args.sites:
            with serve_directory(args.docs_directory) as root:
                runs = crawl_rounds(
                    tools,
                    site="docs",
                    root=root,
                    site_directory=args.docs_directory,
                    rounds=args.rounds,
                    expected_pages=None,
                    settings=settings,
                )
            differences = compare_findings(runs, tools)
            agreement = (
                "Where the tools disagree on the HTML pages:\n\n" + "\n".join(differences)
                if differences
                else "Every tool found the same HTML pages."
            )
            sections.append(
                f"### Python docs ({args.docs_directory}), max_tasks={args.max_tasks}, "
                f"median of {args.rounds} rounds\n\n"
                "Pages are every response with status 200 (for wget, every file saved); the "
                "tools follow different elements, so only the HTML pages should agree.\n\n"
                + site_table(runs, tools, html_column=True)
                + "\n\n"
                + agreement
                + _problems(runs)
            )
            all_passed &= not any(run.problems for run in runs)
    return "\n\n".join(sections), all_passed


def _tools(ours: Sequence[OurPython], args: argparse.Namespace) -> list[Tool]:
    tools = []
    for index, our in enumerate(ours):
        suffix = f" [{our.label}]" if len(ours) > 1 else ""
        for engine in args.engines if index == 0 else args.extra_engines:
            tools.append(
                Tool(label=f"trio-crawler {engine}{suffix}", kind="ours", engine=engine, our=our)
            )
    if not args.no_floor:
        for our in ours:
            suffix = f" [{our.label}]" if len(ours) > 1 else ""
            tools.append(
                Tool(label=f"floor: minimal crawl{suffix}", kind="floor", engine="crawl", our=our)
            )
            tools.append(
                Tool(label=f"floor: fetch only{suffix}", kind="floor", engine="fetch", our=our)
            )
        if _imports(args.peers_python, "aiohttp, selectolax"):
            tools.append(Tool(label="aiohttp: minimal crawl", kind="aiohttp", engine="crawl"))
            tools.append(Tool(label="aiohttp: fetch only", kind="aiohttp", engine="fetch"))
    if not args.no_scrapy:
        tools.append(Tool(label="Scrapy", kind="scrapy"))
    if not args.no_wget:
        tools.append(Tool(label="wget -r", kind="wget"))
    return tools


def _imports(python: str, modules: str) -> bool:
    """Whether ``python`` (the peers venv) can import ``modules`` (setup.sh installs them)."""
    if not os.access(python, os.X_OK):
        return False
    done = subprocess.run(
        [python, "-c", f"import {modules}"], capture_output=True, check=False, timeout=120
    )
    return done.returncode == 0


def _problems(runs: Sequence[Run]) -> str:
    failed = [
        f"- {run.tool}, round {run.round}: {'; '.join(run.problems)}"
        for run in runs
        if run.problems
    ]
    return "\n\nFailed checks (✗):\n\n" + "\n".join(failed) if failed else ""


def _environment(
    ours: Sequence[OurPython],
    tools: Sequence[Tool],
    package_path: Path,
    args: argparse.Namespace,
    settings: Settings,
) -> str:
    """Who ran what, on what: every version that could explain a difference.

    Also what each Python tool costs before it crawls anything (interpreter and imports,
    the median of three runs), which every run's CPU time includes: on a small site it is
    a large share of the CPU per page.
    """
    lines = [
        f"Machine: {datetime.date.today().isoformat()}, {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPUs; trio_crawler "
        f"{package_identity(package_path)}",
    ]
    for our in ours:
        robots = (
            "--ignore-robots passed" if our.extra_args else "no --ignore-robots option (nginx 404s)"
        )
        name = f" [{our.label}]" if our.label else ""
        startup = _startup_cost(
            [our.python, "-m", "trio_crawler", "--version"], settings, env=settings.our_env
        )
        lines.append(
            f"trio-crawler{name}: {our.python}: {our.versions}; {robots}; start-up "
            f"(`--version`): {startup}"
        )
    if any(tool.kind == "scrapy" for tool in tools):
        startup = _startup_cost([args.peers_python, str(SCRAPY_SPIDER), "--help"], settings)
        lines.append(
            f"Scrapy: {_scrapy_versions(args.peers_python)}; start-up (imports, "
            f"`scrapy_spider.py --help`): {startup}"
        )
    if any(tool.kind == "wget" for tool in tools):
        wget_version = subprocess.run(
            [shutil.which("wget") or "wget", "--version"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split("\n")[0]
        lines.append(f"wget: {wget_version}")
    nginx_version = subprocess.run(
        [find_nginx(), "-v"], capture_output=True, text=True, check=False
    ).stderr.strip()
    lines.append(f"Server: {nginx_version}")
    return "\n".join(f"- {line}" for line in lines)


def _startup_cost(
    command: Sequence[str], settings: Settings, *, env: dict[str, str] | None = None
) -> str:
    costs = [
        run_measured(command, timeout=60, cwd=settings.workdir, env=env)
        for _ in range(STARTUP_RUNS)
    ]
    cpu = statistics.median(cost.cpu_s for cost in costs)
    rss = statistics.median(cost.peak_rss_mib for cost in costs)
    return f"{cpu:.2f} s CPU, {rss:.1f} MiB"


def _scrapy_versions(python: str) -> str:
    code = (
        "import importlib.metadata as m, platform; print(f'Python {platform.python_version()}, '"
        " + ', '.join(f'{n} {m.version(n)}' for n in ('scrapy', 'twisted', 'lxml')))"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() or f"(could not read versions: {done.stderr.strip()[-200:]})"


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        markdown, passed = run(args)
    except (BenchmarkError, NginxError) as exc:
        raise SystemExit(f"bench_engines: {exc}") from None
    print(markdown)
    if not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    run_main(main, "bench_engines")

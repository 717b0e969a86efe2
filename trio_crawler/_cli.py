"""The ``trio-crawler`` command: options to a CrawlConfig, an engine, logging, exit status.

Exit status (CONTRACT.md): 0 when the crawl ran to its end or to ``--max-time``; 2 for a
usage error, reported as exactly one line ``trio-crawler: error: ...`` before any request is
made; 130 after SIGINT or SIGTERM, once the partial report is printed and the output is
complete.

Signals are caught as data, not as exceptions: while a crawl runs, SIGINT and SIGTERM go to
a signal receiver (``anyio.open_signal_receiver``, which is Trio's on the Trio backend)
whose task calls the engine's ``stop()``. So a Ctrl-C never arrives as a KeyboardInterrupt
inside an exception group halfway through a worker, on any engine; the crawl unwinds like a
deadline does, and the report is printed from the state that outlives it. While the report
is printed, signals are noted and acted on once it is whole. Only a signal while starting
up is a plain KeyboardInterrupt (SIGTERM is made one too), which :func:`main` turns into
status 130.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import math
import platform
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

import anyio
import trio

from . import engine_anyio, engine_asyncio, engine_trio
from ._config import (
    DEFAULT_MAX_REDIRECT,
    DEFAULT_MAX_SIZE,
    DEFAULT_MAX_TRIES,
    DEFAULT_MAX_URL_LENGTH,
    DEFAULT_TIMEOUT,
    ConfigError,
    CrawlConfig,
)
from ._fetch import DEFAULT_USER_AGENT, choose_http_library
from ._output import JsonLinesWriter
from ._report import format_report
from ._version import __version__

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator, Sequence

    from ._progress import ProgressDisplay
    from ._warc import WarcWriter

LOGGER = logging.getLogger("trio_crawler")

PROG = "trio-crawler"
AnyCrawler = engine_trio.Crawler | engine_anyio.Crawler | engine_asyncio.Crawler
# --engine NAME: the Crawler class and the event loop (AnyIO backend) it runs on.
ENGINES: dict[str, tuple[type[AnyCrawler], str]] = {
    "trio": (engine_trio.Crawler, "trio"),
    "anyio-trio": (engine_anyio.Crawler, "trio"),
    "anyio-asyncio": (engine_anyio.Crawler, "asyncio"),
    "asyncio": (engine_asyncio.Crawler, "asyncio"),
}
# The chapter's crawl.py defaults to 100 tasks on the command line (its Crawler class to 10).
CLI_MAX_TASKS = 100
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention for "killed by Ctrl-C"
# Seconds the requests in flight get to finish after the first Ctrl-C: a page on a healthy
# site takes well under a second, and five is short enough that nobody reaches for kill -9.
DEFAULT_GRACE = 5.0
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"

EXAMPLES = """\
examples:
  trio-crawler --demo
      crawl the bundled demo site, offline, and print the report
  trio-crawler -o pages.jsonl --max-pages 500 example.com
      crawl up to 500 pages of a site, one JSON record per URL
  trio-crawler --delay 1 --max-per-host 2 --warc site.warc.gz https://www.example.org/
      crawl politely and archive every request and response
"""


class _Closable(Protocol):
    def close(self) -> None: ...


_Output = TypeVar("_Output", bound=_Closable)


class UsageError(Exception):
    """A command line the crawler cannot run; its message is the whole error line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage block before the message; the contract wants the
        # one line only (``--help`` shows usage).
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (numbers are taken as text and checked by :func:`parse_args`)."""
    parser = _Parser(
        prog=PROG,
        description="Crawl web sites from ROOT URLs with Trio, the way the 500 Lines\n"
        "asyncio crawler does, and report every URL. robots.txt is obeyed.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "roots", nargs="*", metavar="ROOT", help="root URL (http:// is added if no scheme)"
    )
    parser.add_argument("--version", action="version", version=version_line())

    what = parser.add_argument_group("what to crawl")
    what.add_argument(
        "--demo", action="store_true", help="crawl the bundled demo site (served on 127.0.0.1)"
    )
    what.add_argument(
        "--serve-demo", action="store_true", help="only serve the demo site until Ctrl-C"
    )
    what.add_argument("--port", metavar="N", help="port for --serve-demo (default: a free one)")
    what.add_argument(
        "--exclude", metavar="REGEX", help="skip URLs where re.search(REGEX, url) matches"
    )
    hosts = what.add_mutually_exclusive_group()
    hosts.add_argument(
        "--strict",
        dest="strict",
        action="store_true",
        default=True,
        help="hosts must match a root host, modulo one 'www.' (default)",
    )
    hosts.add_argument(
        "--lenient",
        dest="strict",
        action="store_false",
        help="hosts match when their last two labels match a root host's",
    )
    what.add_argument(
        "--engine",
        default="trio",
        metavar="{" + ",".join(ENGINES) + "}",
        help="which scheduler runs the crawl (default trio)",
    )

    limits = parser.add_argument_group("limits")
    _number_option(
        limits,
        "--max-redirect",
        "--max_redirect",
        default=DEFAULT_MAX_REDIRECT,
        help="redirects followed from any one URL",
    )
    _number_option(
        limits,
        "--max-tries",
        "--max_tries",
        default=DEFAULT_MAX_TRIES,
        help="attempts per URL on network errors",
    )
    _number_option(
        limits,
        "--max-tasks",
        "--max_tasks",
        default=CLI_MAX_TASKS,
        help="concurrent workers and requests",
    )
    _number_option(
        limits,
        "--timeout",
        metavar="SECONDS",
        default=DEFAULT_TIMEOUT,
        help="limit for one whole request attempt, connect to last byte",
    )
    _number_option(
        limits, "--max-time", metavar="SECONDS", help="deadline for the whole crawl (default: none)"
    )
    _number_option(limits, "--max-pages", help="records to make at most (default: no limit)")
    _number_option(
        limits,
        "--max-depth",
        help="link hops from a root; redirects are not hops (default: no limit)",
    )
    _number_option(
        limits,
        "--max-size",
        metavar="BYTES",
        default=DEFAULT_MAX_SIZE,
        help="body bytes read from one response, after decompression",
    )
    _number_option(
        limits,
        "--max-url-length",
        metavar="CHARS",
        default=DEFAULT_MAX_URL_LENGTH,
        help="longer links are skipped",
    )
    _number_option(
        limits,
        "--grace",
        metavar="SECONDS",
        default=DEFAULT_GRACE,
        help="after Ctrl-C, time for requests in flight to finish",
    )

    manners = parser.add_argument_group("manners")
    manners.add_argument(
        "--ignore-robots", action="store_true", help="do not fetch or obey robots.txt"
    )
    manners.add_argument(
        "--user-agent",
        metavar="STRING",
        help=f"the User-Agent header (default {DEFAULT_USER_AGENT})",
    )
    _number_option(
        manners, "--max-per-host", help="concurrent requests to one host (default: --max-tasks)"
    )
    _number_option(
        manners,
        "--delay",
        metavar="SECONDS",
        default=0,
        help="between two requests to one host; robots.txt Crawl-delay can raise it",
    )

    output = parser.add_argument_group("output")
    output.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write one JSON record per finished URL ('-' for stdout)",
    )
    output.add_argument(
        "--warc",
        metavar="FILE",
        help="archive every request and response in a WARC file (.warc or .warc.gz)",
    )
    output.add_argument(
        "--no-progress",
        action="store_true",
        help="no live progress line (it is shown only when stderr is a terminal)",
    )
    output.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more logging on stderr (-v info, -vv debug)",
    )
    output.add_argument("-q", "--quiet", action="store_true", help="log errors only")
    return parser


def _number_option(
    group: argparse._ArgumentGroup,
    *flags: str,
    help: str,
    metavar: str = "N",
    default: float | None = None,
) -> None:
    """An option taken as text (checked by :func:`parse_args`), its default in its help."""
    dest = flags[0].lstrip("-").replace("-", "_")
    text = None if default is None else str(default) if isinstance(default, int) else f"{default:g}"
    group.add_argument(
        *flags,
        dest=dest,
        metavar=metavar,
        default=text,
        help=help if text is None else f"{help} (default {text})",
    )


def version_line() -> str:
    """``trio-crawler X.Y.Z`` with the versions that matter when reporting a bug."""
    try:
        http = choose_http_library()
    except ConfigError:  # a wrong TRIO_CRAWLER_HTTP is parse_args' to report
        http = choose_http_library({})
    python = platform.python_version()
    libraries = f"{http.__name__} {http.__version__}, trio {trio.__version__}"
    return f"{PROG} {__version__} ({libraries}, Python {python})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """A parsed, checked command line."""

    roots: tuple[str, ...]
    demo: bool
    serve_demo: bool
    port: int
    crawler_options: dict[str, Any]
    output: str | None
    warc: str | None
    progress: bool
    grace: float
    log_level: int
    engine: str


# (flag, Python name, type) of the options the Crawler takes as they are.
_CRAWLER_NUMBERS: list[tuple[str, str, Callable[[str], Any]]] = [
    ("--max-redirect", "max_redirect", int),
    ("--max-tries", "max_tries", int),
    ("--max-tasks", "max_tasks", int),
    ("--timeout", "timeout", float),
    ("--max-time", "max_time", float),
    ("--max-pages", "max_pages", int),
    ("--max-depth", "max_depth", int),
    ("--max-size", "max_size", int),
    ("--max-url-length", "max_url_length", int),
    ("--max-per-host", "max_per_host", int),
    ("--delay", "delay", float),
]


def parse_args(argv: Sequence[str] | None) -> Options:
    """Parse and check a command line without side effects.

    Raises:
        UsageError: With the one line to print, naming the option and its value.
    """
    args = build_parser().parse_args(argv)
    if args.engine not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {args.engine!r}")
    if args.serve_demo:
        if args.roots or args.demo:
            raise UsageError(
                "--serve-demo only serves the demo site; it takes no ROOT and no --demo"
            )
    elif args.port is not None:
        raise UsageError("--port goes with --serve-demo")
    elif args.demo and args.roots:
        raise UsageError(f"--demo crawls the demo site; drop the ROOT {args.roots[0]!r} or --demo")
    elif not args.demo and not args.roots:
        raise UsageError("no ROOT given: name a URL to crawl (or use --demo)")
    port = _number(args.port, "--port", int) if args.port is not None else 0
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be from 0 to 65535, not {port}")
    grace = _number(args.grace, "--grace", float)
    if not (0 <= grace < math.inf):
        raise UsageError(f"--grace must be a number of seconds >= 0, not {args.grace!r}")
    crawler_options: dict[str, Any] = {
        "exclude": args.exclude,
        "strict": args.strict,
        "obey_robots": not args.ignore_robots,
        "user_agent": args.user_agent,
    }
    for flag, name, kind in _CRAWLER_NUMBERS:
        text = getattr(args, name)
        if text is not None:
            crawler_options[name] = _number(text, flag, kind)
    # Check every crawl option now, before any server starts or request is made; the demo's
    # root is not known yet, so a stand-in root is checked in its place.
    try:
        CrawlConfig.create(args.roots or ["http://127.0.0.1/"], **crawler_options)
    except ConfigError as exc:
        if exc.option == "roots":
            raise UsageError(f"ROOT {exc.problem}") from None
        raise UsageError(f"--{exc.option.replace('_', '-')} {exc.problem}") from None
    try:
        choose_http_library()
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.quiet:
        log_level = logging.ERROR
    else:
        log_level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    return Options(
        roots=tuple(args.roots),
        demo=args.demo,
        serve_demo=args.serve_demo,
        port=port,
        crawler_options=crawler_options,
        output=args.output,
        warc=args.warc,
        progress=not args.no_progress,
        grace=grace,
        log_level=log_level,
        engine=args.engine,
    )


def _number(text: str, option: str, kind: Callable[[str], Any]) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise UsageError(f"{option} must be {what}, not {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C outside the crawl's signal receiver (start-up, or printing the report).
        return EXIT_INTERRUPTED
    except BaseExceptionGroup as group:
        # The same, raised inside a Trio nursery, where it arrives wrapped in a group.
        interrupts, others = group.split(KeyboardInterrupt)
        if interrupts is not None and others is None:
            return EXIT_INTERRUPTED
        raise


def _main(argv: Sequence[str] | None) -> int:
    # Until the crawl's signal receiver takes over, SIGTERM stops the run as Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        options = parse_args(argv)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    with contextlib.ExitStack() as outputs:
        try:
            writer = _open_output(outputs, "--output", options.output, JsonLinesWriter.open)
            warc = _open_output(outputs, "--warc", options.warc, _open_warc)
        except UsageError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        progress = _open_progress(options)
        handler = progress.log_handler() if progress is not None else logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT if progress is None else "%(message)s"))
        logging.basicConfig(level=options.log_level, handlers=[handler], force=True)
        if options.log_level > logging.DEBUG:
            # httpx logs every request at INFO; -v is for the crawler's own decisions.
            for library in ("httpx", "httpx2"):
                logging.getLogger(library).setLevel(max(options.log_level, logging.WARNING))
        if options.serve_demo:
            return anyio.run(_serve_demo_until_signal, options.port, backend="trio")
        _pad_the_heap()
        return _run_crawl(options, writer, warc, progress)
    raise AssertionError("unreachable")  # pragma: no cover (ExitStack swallows nothing)


# glibc's mallopt() parameter M_TOP_PAD (malloc.h), and the pad the command line asks for.
_M_TOP_PAD = -2
HEAP_TOP_PAD = 2**20


def _pad_the_heap() -> bool:
    """Ask glibc to keep a megabyte free at the top of the heap; return whether it could.

    A crawl allocates and frees each page's body, text and parse tree in turn. With glibc's
    defaults (no pad), the top of the heap follows them down and up again: a ``brk`` call
    each way and freshly zeroed pages each time up. Measured on a 10 000-page crawl: 40 000
    ``brk`` calls, and 1.05 s of system time against 0.49 s with the pad (the same runs'
    user time did not grow). The setting is process-wide, so the command line makes it
    and the library does not. Elsewhere than Linux, or without a ``mallopt``, it does
    nothing.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_TOP_PAD, HEAP_TOP_PAD))


def _open_output(
    outputs: contextlib.ExitStack, flag: str, path: str | None, opener: Callable[[str], _Output]
) -> _Output | None:
    """Open an output file, closed with ``outputs``; one that cannot be opened is a usage
    error, reported before any request is made."""
    if path is None:
        return None
    try:
        opened = opener(path)
    except OSError as exc:
        raise UsageError(f"{flag} {path!r}: {exc.strerror or exc}") from None
    outputs.callback(opened.close)
    return opened


# The demo server (hypercorn), the progress display (rich) and the WARC writer (warcio) are
# imported only when used: together they are a third of the command's start-up time.


def _open_warc(path: str) -> WarcWriter:
    from ._warc import WarcWriter

    return WarcWriter.open(path)


def _open_progress(options: Options) -> ProgressDisplay | None:
    """The live display, when stderr is a terminal we may draw on."""
    if options.serve_demo or not options.progress or not sys.stderr.isatty():
        return None
    from ._progress import ProgressDisplay

    return ProgressDisplay()


def _run_crawl(
    options: Options,
    writer: JsonLinesWriter | None,
    warc: WarcWriter | None,
    progress: ProgressDisplay | None,
) -> int:
    report_stream = sys.stderr if options.output == "-" else sys.stdout
    crawler_class, backend = ENGINES[options.engine]
    crawler: AnyCrawler | None = None

    def make_crawler(roots: Sequence[str]) -> AnyCrawler:
        nonlocal crawler
        crawler = crawler_class(
            roots,
            on_record=writer.write if writer is not None else None,
            on_exchange=warc.write_exchange if warc is not None else None,
            on_progress=progress.update if progress is not None else None,
            **options.crawler_options,
        )
        return crawler

    held: list[int] = []
    try:
        with progress if progress is not None else contextlib.nullcontext():
            try:
                anyio.run(
                    _crawl_until_signal,
                    make_crawler,
                    options.roots,
                    options.demo,
                    options.grace,
                    backend=backend,
                )
            finally:
                if progress is not None and crawler is not None:
                    progress.update(crawler.statistics())  # the line as the crawl ended
    finally:
        if crawler is not None:
            with _signals_held() as held:
                print(_report(crawler), end="", file=report_stream, flush=True)
    assert crawler is not None
    if held or crawler.finish_reason == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK


@contextlib.contextmanager
def _signals_held() -> Iterator[list[int]]:
    """Print the report whole: SIGINT and SIGTERM meanwhile are noted, not acted on.

    The crawl's signal receiver is closed by the time the report is printed, so without
    this a Ctrl-C would raise inside ``print()`` and SIGTERM would kill the process, each
    leaving the report cut off mid-line. A handler that only takes note is not enough
    either: a signal that interrupts a large blocking write to a pipe makes CPython drop
    the rest of what it was writing, silently (CPython 3.11, measured: 128 KiB of 400 KiB
    arrived). So the signals are also blocked while the report is written, and delivered
    to the note-taking handler when they are unblocked. The report takes milliseconds; a
    signal in that window still ends the run, with status 130, once it is written.
    """
    received: list[int] = []
    signals = {signal.SIGINT, signal.SIGTERM}

    def note(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {signum: signal.signal(signum, note) for signum in signals}
    blocking = hasattr(signal, "pthread_sigmask")  # not on Windows
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals) if blocking else set()
    try:
        yield received
    finally:
        if blocking:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # pending ones reach note() now
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _report(crawler: AnyCrawler) -> str:
    return format_report(
        crawler.done,
        elapsed=crawler.elapsed,
        max_tasks=crawler.max_tasks,
        todo=crawler.statistics().todo,
        finish_reason=crawler.finish_reason or "interrupted",
        extra_counters=crawler.limit_counts,
    )


async def _crawl_until_signal(
    make_crawler: Callable[[Sequence[str]], AnyCrawler],
    roots: Sequence[str],
    demo: bool,
    grace: float,
) -> None:
    """Crawl, with the demo server beside the crawl if asked, until done or signalled.

    Written on AnyIO so that one function runs every engine: ``anyio.run`` with the Trio
    backend is ``trio.run``, and the asyncio engine's plain coroutines run on the asyncio
    backend as they would under ``asyncio.run``.
    """
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as task_group:
            if demo:
                from ._demo import serve_demo

                roots = [await task_group.start(serve_demo)]
            crawler = make_crawler(roots)
            task_group.start_soon(_stop_on_signal, signals, crawler.stop, grace)
            await crawler.crawl()
            # The crawl is over: stop the demo server and the signal watcher.
            task_group.cancel_scope.cancel("crawl complete")


async def _stop_on_signal(
    signals: AsyncIterator[int], stop: Callable[[float], None], grace: float
) -> None:
    """First signal: stop scheduling, with a grace period; second: stop at once."""
    first = True
    async for signum in signals:
        name = signal.Signals(signum).name
        if first and grace > 0:
            LOGGER.warning(
                "got %s: finishing the requests in flight (up to %g s; again to stop now)",
                name,
                grace,
            )
            stop(grace)
        else:
            LOGGER.warning("got %s: stopping the crawl now", name)
            stop(0.0)
        first = False


async def _serve_demo_until_signal(port: int) -> int:
    from ._demo import serve_demo

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as task_group:
            root = await task_group.start(functools.partial(serve_demo, port=port))
            print(f"Serving the demo site at {root} (Ctrl-C to stop)", flush=True)
            async for _ in signals:
                task_group.cancel_scope.cancel("signal")
                break
    return EXIT_INTERRUPTED

"""The ``trio-crawler`` command, run: logging, outputs, signals, the crawl, the report.

Reading the command line is ``_cli_args.py``'s job; this module runs what it read.

Exit status: 0 when the crawl ran to its end, to ``--max-time`` or to ``--max-pages``
(HTTP errors are records, not failures); 2 for a usage error, reported as exactly one line
``trio-crawler: error: ...`` before any request is made; 130 after SIGINT or SIGTERM, once
the partial report is printed and the output is complete.

A reader that goes away (``trio-crawler -o - ... | head -1``, or ``--items -``) ends the crawl
as a first Ctrl-C does, with status 130: the ``-o`` (or ``--items``) writer notes the broken
pipe and a task of the crawl calls ``stop()``. A report written to a pipe with no reader
ends the run with status 130 too, without a traceback (see :func:`_silence_closed_pipes`).

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

import contextlib
import functools
import gc
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, cast

import anyio

from ._cli_args import (
    ENGINES,
    PROG,
    CommandLine,
    UsageError,
    engine_class,
    for_the_command_line,
    parse_args,
)
from ._handler import load_handler
from ._options import ConfigError
from ._output import OutputFiles
from ._report import report_lines, sorted_by_url
from ._stores import check_output, find_stored_options, read_status

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
    from typing import TextIO

    from ._cli_args import AnyCrawler
    from ._config import CrawlKeywords
    from ._progress import ProgressDisplay

# main is the console entry point; ENGINES, engine_class and parse_args are _cli_args',
# named here too for code that reads them from the command's module.
__all__ = [
    "ENGINES",
    "HEAP_TOP_PAD",
    "HEAP_TRIM_THRESHOLD",
    "REPORT_CHUNK",
    "engine_class",
    "main",
    "parse_args",
    "run",
]

LOGGER = logging.getLogger("trio_crawler")

EXIT_OK = 0
EXIT_FAILED = 1  # the crawl's store was lost (--state file unwritable)
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention for "killed by Ctrl-C"
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    try:
        status = _main(argv)
        # Flushed here rather than as Python exits, so that a reader gone is handled below.
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # The reader of stdout or stderr went away (the report into ``| head -1``).
        _silence_closed_pipes()
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        # Ctrl-C outside the crawl's signal receiver (start-up, or printing the report).
        return EXIT_INTERRUPTED
    except BaseExceptionGroup as group:
        # The same, raised inside a Trio nursery, where it arrives wrapped in a group.
        interrupts, others = group.split((KeyboardInterrupt, BrokenPipeError))
        if interrupts is not None and others is None:
            if interrupts.subgroup(BrokenPipeError) is not None:
                _silence_closed_pipes()
            return EXIT_INTERRUPTED
        raise


def run() -> int:
    """The console command (``trio-crawler``, ``python -m trio_crawler``): :func:`main`,
    with the garbage collector kept off what lives as long as the process.

    The modules, classes and functions the imports made live until the process ends, and
    the collector's full collections would walk them all again and again: the one a broad
    crawl makes in its first second took 19-31 ms, in the burst of its first requests. They
    are frozen (left out of every collection) before the crawl starts, and main()'s full
    collections then walk only what the crawl made (500 hosts x 20 pages: none at all).

    What remains once main() returns is the interpreter's teardown, whose garbage
    collections walk every object the crawl left: a tenth of a second and more on every
    exit, which each process of a shared crawl adds to the crawl's wall time. By then the
    outputs are closed and the report written, so the objects are frozen too and their
    memory goes back with the process. main() itself leaves the collector alone, for a
    program that calls it and goes on."""
    gc.freeze()
    status = main()
    gc.freeze()
    return status


def _silence_closed_pipes() -> None:
    """Point stdout and stderr, if their reader went away, at ``/dev/null``.

    Python flushes them as it exits, and a flush into a pipe without a reader raises
    BrokenPipeError again, which it prints as "Exception ignored ..." and turns into status
    120. Redirecting to devnull is the advice of Python's own documentation (the signal
    module's "Note on SIGPIPE").
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # the reader is gone (or the stream is closed)
                with contextlib.suppress(OSError, ValueError):
                    os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    # Until the crawl's signal receiver takes over, SIGTERM stops the run as Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        options = parse_args(argv)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # The output files are only looked at here; they are opened once every check that
    # can refuse the run has passed, the store's included (see _output.py).
    outputs = OutputFiles(output=options.output, warc=options.warc)
    try:
        outputs.check()
        check_output(options.crawl, options.output)  # not an earlier pass's file
        OutputFiles(items=options.items).check()  # the crawler opens it: looked at here too
        check_output(options.crawl, options.items, option="items")
    except ConfigError as exc:
        print(f"{PROG}: error: --{exc}", file=sys.stderr)
        return EXIT_USAGE
    progress = _open_progress(options)
    _configure_logging(options.log_level, progress)
    if options.serve_demo:
        return anyio.run(_serve_demo_until_signal, options.port or 0, backend="trio")
    if options.status:
        return _print_status(options)
    _pad_the_heap()
    try:
        return CrawlRun(options, outputs, progress).run()
    finally:
        outputs.close()


def _print_status(options: CommandLine) -> int:
    """``--status``: the shared crawl's counts, one per line; no request is made."""
    try:
        lines = anyio.run(read_status, options.crawl_keywords(), backend="trio")
    except ConfigError as exc:
        print(f"{PROG}: error: {for_the_command_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    print(lines, end="")
    return EXIT_OK


def _configure_logging(level: int, progress: ProgressDisplay | None) -> None:
    """Log to stderr, above the progress line when there is one."""
    handler = progress.log_handler() if progress is not None else logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT if progress is None else "%(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    if level > logging.DEBUG:
        # httpx logs every request at INFO; -v is for the crawler's own decisions.
        for library in ("httpx", "httpx2"):
            logging.getLogger(library).setLevel(max(level, logging.WARNING))


# glibc's mallopt() parameters M_TRIM_THRESHOLD and M_TOP_PAD (malloc.h), and what the
# command line asks for.
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
HEAP_TOP_PAD = 2**20
HEAP_TRIM_THRESHOLD = 8 * 2**20


def _pad_the_heap() -> bool:
    """Ask glibc to keep a megabyte free at the top of the heap, and to give memory back
    only once 8 MiB are free there; return whether it could.

    A crawl allocates and frees each page's body, text and parse tree in turn. With glibc's
    defaults (no pad), the top of the heap follows them down and up again: a ``brk`` call
    each way and freshly zeroed pages each time up. Measured on a 10 000-page crawl: 40 000
    ``brk`` calls, and 1.05 s of system time against 0.49 s with the pad (the same runs'
    user time did not grow).

    The pad alone is not enough: setting it turns off glibc's own moving thresholds, so
    the top was still given back whenever more than 128 KiB lay free above the pad, and
    whether that happened in a crawl depended on what else sat at the top of the heap.
    Measured on 500 hosts x 5 pages: 5 958 ``brk`` calls with the pad alone when nothing
    did, 65 with the 8 MiB threshold. The settings are process-wide, so the command line
    makes them and the library does not. Elsewhere than Linux, or without a ``mallopt``,
    it does nothing.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_TOP_PAD, HEAP_TOP_PAD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD)
    )


# The demo server (hypercorn), the progress display (rich) and the WARC writer (warcio) are
# imported only when used: together they are a third of the command's start-up time.


def _open_progress(options: CommandLine) -> ProgressDisplay | None:
    """The live display, when stderr is a terminal we may draw on."""
    if options.serve_demo or not options.progress or not sys.stderr.isatty():
        return None
    from ._progress import ProgressDisplay

    return ProgressDisplay()


class CrawlRun:
    """One crawl as the command line runs it, from making the crawler to the exit status.

    The crawler is made inside the event loop, since the demo's root is known only once
    its server listens there; the report is printed outside it, after the loop has ended
    however it ended, a signal's exception included. The run holds the crawler between
    the two.
    """

    def __init__(
        self, options: CommandLine, outputs: OutputFiles, progress: ProgressDisplay | None
    ) -> None:
        self.options = options
        self.outputs = outputs
        self.progress = progress
        self.crawler: AnyCrawler | None = None  # made by _crawl_until_signal
        # A --state file or --frontier server that cannot be used (a ConfigError of theirs).
        self.unusable_state: ConfigError | None = None
        # Whether the reader of the -o pipe went away: the output is incomplete.
        self.reader_gone = False

    def run(self) -> int:
        """Crawl until done or signalled, print the report, and return the exit status."""
        stdout_taken = "-" in (self.options.output, self.options.items)
        report_stream = sys.stderr if stdout_taken else sys.stdout
        backend = ENGINES[self.options.engine][1]
        held: list[int] = []
        try:
            with self.progress if self.progress is not None else contextlib.nullcontext():
                try:
                    anyio.run(self._crawl_until_signal, backend=backend)
                finally:
                    if self.progress is not None and self.crawler is not None:
                        self.progress.update(self.crawler.statistics())  # the line at the end
        finally:
            if self.crawler is not None:
                with _signals_held() as held:
                    _write_report(report_stream, _report(self.crawler))
                    report_stream.flush()
        if self.unusable_state is not None:  # nothing ran, nothing in the file changed
            print(f"{PROG}: error: {for_the_command_line(self.unusable_state)}", file=sys.stderr)
            return EXIT_USAGE
        # Here the crawl returned (a crawl that raised is not here), so the crawler was made,
        # unless a signal came while the process waited for the shared crawl to be created.
        finish_reason = self.crawler.finish_reason if self.crawler is not None else "interrupted"
        if held or finish_reason == "interrupted" or self.reader_gone:
            return EXIT_INTERRUPTED
        if finish_reason == "frontier-lost":
            return EXIT_FAILED
        return EXIT_OK

    def _make_crawler(self, roots: Sequence[str], keywords: CrawlKeywords) -> AnyCrawler:
        crawler_class = engine_class(self.options.engine)
        outputs = self.outputs
        crawler = crawler_class(
            roots,
            on_record=outputs.write_record if outputs.output_path is not None else None,
            on_exchange=outputs.write_exchange if outputs.warc_path is not None else None,
            on_progress=self.progress.update if self.progress is not None else None,
            handler=None if self.options.handler is None else load_handler(self.options.handler),
            items=self.options.items,
            **keywords,
        )
        # The files open once the store's session is (a shared crawl joined).
        crawler.open_outputs = outputs.open
        self.crawler = crawler
        return crawler

    async def _find_stored(
        self, signals: AsyncIterator[int], roots: Sequence[str]
    ) -> tuple[Sequence[str], CrawlKeywords] | None:
        """The roots and options of this run: as given, and for a stored crawl a store
        must be asked for over the network (a shared crawl), its roots if none are given
        and its stored options where left out (see
        :func:`~trio_crawler._stores.find_stored_options`); None if they cannot be used
        (then :attr:`unusable_state` says why) or a signal came first.

        A process given no ROOTs may wait for its crawl to be created: Ctrl-C or SIGTERM
        meanwhile ends the wait, and the run, at once.
        """

        found: list[tuple[Sequence[str], CrawlKeywords]] = []
        async with anyio.create_task_group() as waiting:

            async def stop_on_signal() -> None:
                async for _ in signals:
                    waiting.cancel_scope.cancel("signal while waiting to join")
                    return

            waiting.start_soon(stop_on_signal)
            try:
                joined, options = await find_stored_options(roots, self.options.crawl_keywords())
                found.append((joined, cast("CrawlKeywords", options)))
            except ConfigError as exc:
                self.unusable_state = exc
            waiting.cancel_scope.cancel("joined")
        return found[0] if found else None

    async def _crawl_until_signal(self) -> None:
        """Crawl, with the demo server beside the crawl if asked, until done or signalled.

        Written on AnyIO so that one function runs every engine: ``anyio.run`` with the
        Trio backend is ``trio.run``, and the asyncio engine's plain coroutines run on the
        asyncio backend as they would under ``asyncio.run``.
        """
        roots: Sequence[str] = self.options.roots
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as task_group:
                if self.options.demo:
                    from ._demo import serve_demo

                    roots = [await task_group.start(serve_demo)]
                # A stored crawl's roots and options, where this run leaves them out.
                joined = await self._find_stored(signals, roots)
                if joined is None:  # a signal, no such crawl, other options
                    return
                roots, keywords = joined
                try:
                    crawler = self._make_crawler(roots, keywords)
                except ConfigError as exc:  # the options were checked: this is the store's
                    self.unusable_state = exc
                    task_group.cancel_scope.cancel("unusable store")
                    return
                task_group.start_soon(_stop_on_signal, signals, crawler.stop, self.options.grace)
                written = [p for p in (self.outputs.output_path, self.options.items) if p]
                if written:
                    gone = anyio.Event()

                    def reader_gone() -> None:
                        self.reader_gone = True
                        gone.set()

                    self.outputs.on_reader_gone = reader_gone
                    if crawler.item_files is not None:
                        crawler.item_files.on_reader_gone = reader_gone
                    task_group.start_soon(
                        _stop_when_reader_gone,
                        gone,
                        "<stdout>" if "-" in written else written[0],
                        crawler.stop,
                        self.options.grace,
                    )
                try:
                    await crawler.crawl()
                except ConfigError as exc:  # the server, before the crawl joined: nothing done
                    self.unusable_state = exc
                    self.crawler = None
                    task_group.cancel_scope.cancel("unusable store")
                    return
                # The crawl is over: stop the demo server and the signal watcher.
                task_group.cancel_scope.cancel("crawl complete")


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


# The report goes out in writes of about this many characters, not a line at a time: with
# PYTHONUNBUFFERED set (many container images set it) each write() to a text stream is a
# system call of its own, and the report has a line for every URL (10 000 lines: 17 ms a
# line at a time, 2 ms in chunks, measured).
REPORT_CHUNK = 1 << 16


def _write_report(stream: TextIO, lines: Iterable[str]) -> None:
    """Write ``lines`` to ``stream`` joined into chunks of about :data:`REPORT_CHUNK`."""
    chunk: list[str] = []
    size = 0
    for line in lines:
        chunk.append(line)
        size += len(line)
        if size >= REPORT_CHUNK:
            stream.write("".join(chunk))
            chunk.clear()
            size = 0
    if chunk:
        stream.write("".join(chunk))


def _report(crawler: AnyCrawler) -> Iterator[str]:
    """The report's lines; a state file's are read from it in URL order, one at a time,
    rather than all into memory and sorted there."""
    kept = crawler.store.listing()
    return report_lines(
        sorted_by_url(crawler.done) if kept is None else kept,
        elapsed=crawler.elapsed,
        max_tasks=crawler.max_tasks,
        todo=crawler.statistics().todo,
        finish_reason=crawler.finish_reason or "interrupted",
        extra_counters=crawler.limit_counts,
        notes=crawler.store.report_notes(),
        made=crawler.records_made,
    )


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


async def _stop_when_reader_gone(
    gone: anyio.Event, name: str, stop: Callable[[float], None], grace: float
) -> None:
    """Once the reader of the ``-o`` (or ``--items``) pipe went away, stop as a first
    Ctrl-C does.

    A task of its own, since the writer finds out inside the core's decisions, where the
    crawl must not be stopped.
    """
    await gone.wait()
    if grace > 0:
        LOGGER.warning(
            "the reader of %s went away: finishing the requests in flight (up to %g s)",
            name,
            grace,
        )
    else:
        LOGGER.warning("the reader of %s went away: stopping the crawl now", name)
    stop(grace)


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

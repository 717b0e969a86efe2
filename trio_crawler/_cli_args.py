"""The command line, read: argv to a checked :class:`CommandLine`, with no side effects.

Every flag comes from a declaration: the crawl's options are the fields of
:class:`~trio_crawler._config.CrawlOptions`, and the command line's own (``--demo``,
``--grace``, ``-o``...) are the fields of :class:`CommandLine`, declared the same way with
:func:`~trio_crawler._options.option`. From them :func:`build_parser` makes the parser (each
default in its help) and :func:`parse_args` makes the typed result, checked by the same code
the ``Crawler`` uses and re-spelt for the command line: ``--max-tasks must be >= 1, not 0``.

A usage error is one line (see :class:`UsageError`), found before anything is opened,
served or requested. Reading is all this module does: argv, and the file of roots ``-i``
names (or stdin), which is read, never written. Running what was read is ``_cli.py``'s job.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import platform
import sys
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, cast

import trio

from ._between_runs import OptionChanged
from ._clients import choose_http_library
from ._config import CrawlOptions, normalize_roots
from ._handler import load_handler
from ._options import (
    DURABLE,
    LIMITS,
    OUTPUT,
    SAME,
    SECTIONS,
    ConfigError,
    Option,
    check_options,
    declared_options,
    option,
    whole_number,
)
from ._urls import normalize_root
from ._version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence
    from dataclasses import Field

    from . import engine_anyio, engine_asyncio, engine_trio
    from ._config import CrawlKeywords

    AnyCrawler = engine_trio.Crawler | engine_anyio.Crawler | engine_asyncio.Crawler

PROG = "trio-crawler"
# --engine NAME: the module whose Crawler runs the crawl, and the event loop (AnyIO backend)
# it runs on. Named, not imported: a crawl imports its own engine only, and a start-up spends
# no time on asyncio's modules when Trio runs it (see engine_class).
ENGINES: dict[str, tuple[str, str]] = {
    "trio": ("engine_trio", "trio"),
    "anyio-trio": ("engine_anyio", "trio"),
    "anyio-asyncio": ("engine_anyio", "asyncio"),
    "asyncio": ("engine_asyncio", "asyncio"),
}
# Seconds the requests in flight get to finish after the first Ctrl-C: a page on a healthy
# site takes well under a second, and five is short enough that nobody reaches for kill -9.
DEFAULT_GRACE = 5.0

EXAMPLES = """\
examples:
  trio-crawler --demo
      crawl the bundled demo site, offline, and print the report
  trio-crawler -o pages.jsonl --max-pages 500 example.com
      crawl up to 500 pages of a site, one JSON record per URL
  trio-crawler --delay 1 --max-per-host 2 --warc site.warc.gz https://www.example.org/
      crawl politely and archive every request and response
"""


def engine_class(name: str) -> type[AnyCrawler]:
    """The ``Crawler`` class of the engine ``--engine`` names, imported now.

    Every process of a shared crawl pays its start-up while the others crawl, on the same
    CPUs; importing the three engines a crawl does not use cost about 12 ms of it.
    """
    module = importlib.import_module(f"{__package__}.{ENGINES[name][0]}")
    return cast("type[AnyCrawler]", module.Crawler)


class UsageError(Exception):
    """A command line the crawler cannot run; its message is the whole error line."""


def _engine(name: str, value: object) -> str:
    if value not in ENGINES:
        raise ConfigError(name, f"must be one of {', '.join(ENGINES)}, not {value!r}")
    return str(value)


def _port(name: str, value: object) -> int:
    port: int = whole_number(minimum=0)(name, value)
    if port > 65535:
        raise ConfigError(name, f"must be from 0 to 65535, not {port}")
    return port


def _handler(name: str, value: object) -> str:
    # Loaded now, so that a missing file or a syntax error is a usage error before anything
    # runs (load_handler keeps what it loaded: the crawl gets the same function).
    load_handler(str(value))
    return str(value)


def _grace(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ConfigError(name, f"must be a number of seconds >= 0, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandLine:
    """A command line, read and checked: what to crawl, the crawl's options, and how to run.

    Its fields after ``roots`` and ``crawl`` are the command line's own options, declared
    as :class:`~trio_crawler._config.CrawlOptions`' are. ``--help`` lists the crawl's
    options where the ``crawl`` field stands, each in its section.
    """

    # As given, then those -i lists (normalised as they were checked); the Crawler
    # normalises them all.
    roots: tuple[str, ...] = ()
    # The crawl's options given on the command line, by name: a run of a crawl kept in a
    # state file takes the ones that say what to crawl from the file when left out.
    given: frozenset[str] = frozenset()
    demo: bool = option(
        False, help="crawl the bundled demo site (served on 127.0.0.1)", flags=("--demo",)
    )
    serve_demo: bool = option(
        False, help="only serve the demo site until Ctrl-C", flags=("--serve-demo",)
    )
    input_file: str | None = option(
        None,
        help="more ROOTs, one a line, after those given (blank lines and lines starting "
        "with # are skipped; - reads stdin)",
        flags=("-i", "--input-file"),
        metavar="FILE",
    )
    port: int | None = option(
        None,
        help="port for --serve-demo (default: a free one)",
        check=_port,
        flags=("--port",),
        metavar="N",
    )
    crawl: CrawlOptions = field(default_factory=CrawlOptions)
    status: bool = option(
        False,
        help="with --frontier, print the shared crawl's counts and whether it is finished",
        flags=("--status",),
        section=DURABLE,
    )
    # The command line's own options, declared as CrawlOptions declares the crawl's: rows of
    # one table, alike in shape on purpose.
    engine: str = option(
        "trio",
        help="which scheduler runs the crawl",
        check=_engine,
        flags=("--engine",),
        metavar="{" + ",".join(ENGINES) + "}",
    )
    grace: float = option(
        DEFAULT_GRACE,
        help="after Ctrl-C, time for requests in flight to finish",
        check=_grace,
        flags=("--grace",),
        metavar="SECONDS",
        section=LIMITS,
    )
    output: str | None = option(
        None,
        help="write one JSON record per finished URL ('-' for stdout)",
        flags=("-o", "--output"),
        metavar="FILE",
        section=OUTPUT,
    )
    warc: str | None = option(
        None,
        help="archive every request and response in a WARC file (.warc or .warc.gz)",
        flags=("--warc",),
        metavar="FILE",
        section=OUTPUT,
    )
    handler: str | None = option(
        None,
        help="run the function NAME on every page read for links (PATH.py:NAME or "
        "package.module:NAME): it may return items and edit the page's links",
        check=_handler,
        flags=("--handler",),
        metavar="SPEC",
        section=OUTPUT,
    )
    items: str | None = option(
        None,
        help="write the items --handler returns, one JSON line each ('-' for stdout)",
        flags=("--items",),
        metavar="FILE",
        section=OUTPUT,
    )
    progress: bool = option(
        True,
        help="a live progress line on stderr, when it is a terminal",
        off_flags=("--no-progress",),
        off_help="no live progress line (it is shown only when stderr is a terminal)",
        section=OUTPUT,
    )
    verbose: int = option(
        0,
        help="more logging on stderr (-v info, -vv debug)",
        flags=("-v", "--verbose"),
        counted=True,
        section=OUTPUT,
    )
    quiet: bool = option(False, help="log errors only", flags=("-q", "--quiet"), section=OUTPUT)

    def __post_init__(self) -> None:
        check_options(self)

    def crawl_keywords(self) -> CrawlKeywords:
        """The crawl's options as ``Crawler`` keyword arguments: those given, and the
        command line's own defaults (``--max-tasks 100``). The others are left out, so that
        the ``Crawler`` tells an option left out from one given with its default value."""
        keywords = self.crawl.keywords()
        defaults = {
            f.name for f, spec in declared_options(CrawlOptions) if spec.cli_default is not SAME
        }
        passed = self.given | defaults
        return cast(
            "CrawlKeywords", {name: value for name, value in keywords.items() if name in passed}
        )

    @property
    def log_level(self) -> int:
        """The logging level ``-q`` and ``-v`` ask for (warnings without either)."""
        if self.quiet:
            return logging.ERROR
        return {0: logging.WARNING, 1: logging.INFO}.get(self.verbose, logging.DEBUG)


def version_line() -> str:
    """``trio-crawler X.Y.Z`` with the versions that matter when reporting a bug."""
    try:
        http = choose_http_library()
    except ConfigError:  # a wrong TRIO_CRAWLER_HTTP is parse_args' to report
        http = choose_http_library({})
    python = platform.python_version()
    libraries = f"{http.__name__} {http.__version__}, trio {trio.__version__}"
    return f"{PROG} {__version__} ({libraries}, Python {python})"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage block before the message; a usage error is the
        # one line only (``--help`` shows usage).
        raise UsageError(message)


# (owner, field, Option) of every flag, in --help's order within each section: the command
# line's own options, with the crawl's where CommandLine's ``crawl`` field stands.
_Declared = tuple[type[Any], "Field[Any]", Option]


def _declarations() -> list[_Declared]:
    crawl = [(CrawlOptions, f, spec) for f, spec in declared_options(CrawlOptions)]
    own = {f.name: (CommandLine, f, spec) for f, spec in declared_options(CommandLine)}
    ordered: list[_Declared] = []
    for name in CommandLine.__dataclass_fields__:
        if name == "crawl":
            ordered.extend(crawl)
        elif name in own:
            ordered.append(own[name])
    return ordered


def _value_type(owner: type[Any], name: str) -> type[Any]:
    """The type an option's value has on the command line: ``int`` for ``int | None``."""
    hint = _type_hints(owner)[name]
    kinds = [kind for kind in typing.get_args(hint) if kind is not type(None)]
    return kinds[0] if kinds else hint  # type: ignore[no-any-return]


_TYPE_HINTS: dict[type[Any], dict[str, Any]] = {}


def _type_hints(owner: type[Any]) -> dict[str, Any]:
    """``owner``'s annotations, evaluated once: each evaluation reads every annotation of
    the class, and the parser asks for one option's at a time (14 ms a start, for 47)."""
    hints = _TYPE_HINTS.get(owner)
    if hints is None:
        hints = _TYPE_HINTS[owner] = typing.get_type_hints(owner)
    return hints


def _shown(value: object) -> str:
    """A default as ``--help`` shows it: 10, 2.5, 5 (not 5.0), trio."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _cli_default(declared: Field[Any], spec: Option) -> object:
    return declared.default if spec.cli_default is SAME else spec.cli_default


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, made from the declarations.

    Every flag's value defaults to None, meaning "not given", so that :func:`parse_args`
    leaves the default to the declaration; numbers are taken as text and converted there,
    with messages in the crawler's words.
    """
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
    declarations = _declarations()
    for section in SECTIONS:
        group = parser.add_argument_group(section)
        for owner, declared, spec in declarations:
            if spec.section == section:
                _add_flags(group, declared, spec, _value_type(owner, declared.name))
    return parser


def _add_flags(
    group: argparse._ArgumentGroup, declared: Field[Any], spec: Option, kind: type[Any]
) -> None:
    name = declared.name
    default = _cli_default(declared, spec)
    if kind is bool:
        both = bool(spec.flags and spec.off_flags)
        target = group.add_mutually_exclusive_group() if both else group
        if spec.flags:
            on_help = f"{spec.help} (default)" if both and default is True else spec.help
            target.add_argument(
                *spec.flags, dest=name, action="store_true", default=None, help=on_help
            )
        if spec.off_flags:
            off_help = f"{spec.off_help} (default)" if both and default is False else spec.off_help
            target.add_argument(
                *spec.off_flags, dest=name, action="store_false", default=None, help=off_help
            )
    elif spec.counted:
        group.add_argument(*spec.flags, dest=name, action="count", default=None, help=spec.help)
    elif spec.repeated:
        group.add_argument(
            *spec.flags,
            dest=name,
            action="append",
            metavar=spec.metavar,
            default=None,
            help=f"{spec.help} (repeatable)",
        )
    elif spec.flags:
        shown = spec.help if default is None else f"{spec.help} (default {_shown(default)})"
        group.add_argument(*spec.flags, dest=name, metavar=spec.metavar, default=None, help=shown)


def parse_args(argv: Sequence[str] | None) -> CommandLine:
    """Read and check a command line, without side effects.

    Raises:
        UsageError: With the one line to print, naming the option and its value.
    """
    namespace = build_parser().parse_args(argv)
    roots = tuple(namespace.roots)
    listed: tuple[str, ...] = ()
    if namespace.input_file is not None:
        if namespace.serve_demo or namespace.demo or namespace.status:
            chosen = "--serve-demo" if namespace.serve_demo else "--demo"
            chosen = "--status" if namespace.status else chosen
            raise UsageError(f"-i {namespace.input_file} lists ROOTs, and {chosen} takes none")
        listed = read_roots(namespace.input_file)
    _check_what_to_crawl(namespace, roots + listed)
    try:
        if roots:
            # Checked apart from the options: the demo's root is known only once its
            # server is listening, after the options must be checked. (Those of -i were
            # checked as they were read.)
            normalize_roots(roots)
        roots += listed
        crawl = CrawlOptions(**_given(CrawlOptions, namespace))
        given = frozenset(
            f.name
            for f, _ in declared_options(CrawlOptions)
            if getattr(namespace, f.name, None) is not None
        )
        command_line = CommandLine(
            roots=roots, given=given, crawl=crawl, **_given(CommandLine, namespace)
        )
        choose_http_library()
    except ConfigError as exc:
        raise UsageError(for_the_command_line(exc)) from None
    return command_line


def read_roots(path: str) -> tuple[str, ...]:
    """The roots listed in the file ``path`` (``-`` for stdin), one a line, normalised:
    blank lines and lines starting with ``#`` are skipped. One pass over the file, each
    root normalised once, so that hundreds of thousands cost seconds, not minutes.

    Raises:
        UsageError: The file cannot be read, is not UTF-8 text, or has a line that is no
            root (the message names the line).
    """
    shown = "stdin" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as file:
                data = file.read()
        text = data.decode("utf-8-sig")  # a byte-order mark, as Windows editors write one
    except OSError as exc:
        raise UsageError(f"-i {shown}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"-i {shown}: not UTF-8 text (byte {exc.start})") from None
    roots = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        root = normalize_root(line)
        if root is None:
            raise UsageError(f"-i {shown}: line {number} is no http(s) URL: {line[:200]!r}")
        roots.append(root)
    return tuple(roots)


def _check_what_to_crawl(namespace: argparse.Namespace, roots: tuple[str, ...]) -> None:
    """The options that say what to crawl must agree with each other and the roots."""
    if namespace.serve_demo:
        if roots or namespace.demo:
            raise UsageError(
                "--serve-demo only serves the demo site; it takes no ROOT and no --demo"
            )
    elif namespace.port is not None:
        raise UsageError("--port goes with --serve-demo")
    elif namespace.demo and roots:
        raise UsageError(f"--demo crawls the demo site; drop the ROOT {roots[0]!r} or --demo")
    elif namespace.status:
        if namespace.frontier is None:
            raise UsageError("--status reads a shared crawl: it needs --frontier")
        if roots or namespace.demo:
            raise UsageError("--status only reads the shared crawl's counts; it takes no ROOT")
    elif not namespace.demo and not roots and not namespace.state and not namespace.frontier:
        if namespace.input_file is not None:
            raise UsageError(f"no ROOT given: -i {namespace.input_file} lists none")
        raise UsageError("no ROOT given: name a URL to crawl (or use --demo)")
    elif namespace.demo and namespace.frontier:
        raise UsageError("--demo crawls a site served by this process; it cannot be shared")
    if namespace.items is not None and namespace.handler is None:
        raise UsageError(f"--items {namespace.items!r} writes what --handler returns: give both")
    if namespace.items == "-" and namespace.output == "-":
        raise UsageError("-o - and --items - cannot both write to stdout: give one a file")
    if namespace.frontier is None:
        # Without --frontier they would be accepted and mean nothing, as --status would.
        if namespace.crawl_id is not None:
            raise UsageError(
                f"--crawl-id {namespace.crawl_id!r} names a shared crawl: it needs --frontier"
            )
        if namespace.lease is not None:
            raise UsageError(
                f"--lease {namespace.lease!r} is for a shared crawl: it needs --frontier"
            )


def _given(owner: type[Any], namespace: argparse.Namespace) -> dict[str, Any]:
    """The options of ``owner`` that the command line sets: the flags given, converted to
    their types, and the command-line defaults that differ from the API's."""
    values: dict[str, Any] = {}
    for declared, spec in declared_options(owner):
        given = getattr(namespace, declared.name, None)
        if given is None:
            if spec.cli_default is not SAME:
                values[declared.name] = spec.cli_default
            continue
        kind = _value_type(owner, declared.name)
        if isinstance(given, str) and kind in (int, float):
            given = _number(given, spec.flags[0], kind)
        values[declared.name] = given
    return values


def _number(text: str, flag: str, kind: type[Any]) -> object:
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise UsageError(f"{flag} must be {what}, not {text!r}") from None


def for_the_command_line(error: ConfigError) -> str:
    """A ConfigError's message with the options it names spelt as on the command line:
    ``--recrawl needs --state`` for the API's ``recrawl needs state``."""
    problem = error.problem_as(_flag)
    if error.option == "roots":
        return f"ROOT {problem}"
    for _, declared, spec in _declarations():
        if declared.name == error.option:
            if isinstance(error, OptionChanged):
                return (
                    f"{_as_flags(spec, error.given)}: the crawl in {error.where} was made with "
                    f"{_as_flags(spec, error.stored)}, and what to crawl is fixed by the run "
                    "that made it (leave the option out to keep that, or start a new crawl)"
                )
            return f"{(spec.flags or spec.off_flags)[0]} {problem}"
    return str(error)  # not an option (TRIO_CRAWLER_HTTP): it names itself


def _flag(name: str) -> str:
    """The command-line flag of the option ``name`` (``max_tasks`` -> ``--max-tasks``);
    ``name`` itself for what is no option."""
    for _, declared, spec in _declarations():
        if declared.name == name:
            return (spec.flags or spec.off_flags)[0]
    return name


def _as_flags(spec: Option, value: object) -> str:
    """An option's value as the command line gives it: ``--max-depth 2``, ``--lenient``,
    ``no --max-depth`` (None), ``no --ignore-robots`` (a boolean's other value)."""
    if isinstance(value, bool):
        chosen = spec.flags if value else spec.off_flags
        if chosen:
            return chosen[0]
        return f"no {(spec.off_flags if value else spec.flags)[0]}"
    flag = (spec.flags or spec.off_flags)[0]
    if value is None:
        return f"no {flag}"
    if spec.repeated and isinstance(value, tuple | list):
        return " ".join(f"{flag} {each!r}" for each in value)
    return f"{flag} {value!r}" if isinstance(value, str) else f"{flag} {value}"

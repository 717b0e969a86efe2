"""Every option of a crawl, declared once, and the checked config made from them.

An option is one field of :class:`CrawlOptions`, declared with
:func:`~trio_crawler._options.option` (:mod:`trio_crawler._options` is the machinery: what
an option's declaration holds, and how checks, signatures and flags are made from a table
of them). Everything else is derived from those fields, so adding an option is one
declaration here (plus its test and its row in docs/usage.md):

* validation: :class:`CrawlOptions` checks each value when it is made (the generic checks
  are :mod:`~trio_crawler._options`', those that know one option
  :mod:`~trio_crawler._option_checks`') and raises
  :class:`~trio_crawler._options.ConfigError` naming the option by its Python name;
  :class:`CrawlConfig` is the options plus the roots they apply to, and is what the core
  reads;
* the ``Crawler`` keyword arguments: ``CrawlerBase.__init__`` takes ``**options`` and
  ``takes_options(CrawlOptions)`` gives it the signature and documentation listing every
  option;
* the command line: ``_cli_args.build_parser`` makes a flag of every option, and re-spells a
  ConfigError with the flag (``max_tasks`` -> ``--max-tasks``), so each audience reads its
  own name. The command line's own options (``--demo``, ``--grace``...) are declared the same
  way there;
* between runs: the options declared ``fixed`` say *what* to crawl, and a durable crawl
  keeps them (:func:`keep_what_to_crawl`).

Static typing: a TypedDict is the only way to tell a type checker which keyword arguments
``**options`` takes (``Unpack[CrawlKeywords]``), and no checker can derive one from a
dataclass. So :class:`CrawlKeywords` spells each option's name and type a second time. We
keep it rather than take ``**options: Any``, because with it ``mypy --strict`` catches a
misspelt option or a wrong type in the caller's code, as it did when the options were
spelt out in the signature; ``tests/test_config.py`` fails if it and the declarations ever
disagree, so it cannot drift silently.
"""

from __future__ import annotations

import re

# Read at run time: typing.get_type_hints() evaluates the options' annotations (the command
# line reads each option's type from them, and the tests compare them with CrawlKeywords').
from collections.abc import Iterable, Mapping, Sequence  # noqa: TC003
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, cast

from . import _option_checks as checks
from ._options import (
    DURABLE,
    LIMITS,
    MANNERS,
    ConfigError,
    check_options,
    declared_options,
    option,
    seconds,
    takes_options,
    truth,
    whole_number,
)
from ._urls import Scope, normalize_root

if TYPE_CHECKING:
    from typing import Unpack

# The chapter's defaults (crawl.py), except max_tasks, which the chapter's Crawler class also
# defaults to 10 while its command line defaults to 100; the CLI keeps that split.
DEFAULT_MAX_REDIRECT = 10
DEFAULT_MAX_TRIES = 4
DEFAULT_MAX_TASKS = 10
CLI_MAX_TASKS = 100
# One request attempt, connect to last byte. The chapter had none; 10 s is wget's
# connect-timeout order of magnitude and long enough for slow pages on a real site.
DEFAULT_TIMEOUT = 10.0
# Bodies above this are cut off, counted after Content-Encoding is undone so that a gzip
# bomb stops here too. 10 MiB is far above any real HTML page, and Scrapy's and wget's order
# of magnitude for "this is not a page".
DEFAULT_MAX_SIZE = 10 * 1024 * 1024
# The longest link followed: Internet Explorer's old limit, which Scrapy's URLLENGTH_LIMIT
# also uses. Longer links are almost always traps (session IDs, recursive query strings).
DEFAULT_MAX_URL_LENGTH = 2083
# No host may make the crawl wait longer than this between two of its requests, whatever
# its Crawl-delay or Retry-After says: a server asking for an hour would otherwise stall
# the crawl's end for an hour. A minute is Scrapy's AUTOTHROTTLE_MAX_DELAY default.
MAX_HOST_DELAY = 60.0
# The longest Retry-After a crawl waits for; a server asking for longer gets its answer
# recorded instead (the adaptive-manners contract's default). Ten minutes outlasts the
# windows rate limiters usually count in, and a server that wants an hour is better left
# for a later run than allowed to stall this one's end.
DEFAULT_MAX_RETRY_AFTER = 600.0


# The crawl's own checks that know what one option means are _option_checks'; this
# one goes with MAX_HOST_DELAY.


def _host_delay(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, f"must be a number of seconds, not {value!r}")
    if not (0 <= value <= MAX_HOST_DELAY):
        raise ConfigError(name, f"must be from 0 to {MAX_HOST_DELAY:g} seconds, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class CrawlOptions:
    """The options of one crawl, checked when made; the roots are :class:`CrawlConfig`'s.

    The fields are the declarations: their order is the order of ``--help``, of the
    the option tables of docs/usage.md and (the chapter's first) of the ``Crawler`` signature.

    Raises:
        ConfigError: For the first option whose value is unusable.
    """

    # Every field has the same shape on purpose: this list is the table of options, and a
    # finder of repeated code will pair its rows (and the command line's, in _cli_args).
    exclude: str | None = option(
        None,
        help="skip URLs where re.search(REGEX, url) matches",
        check=checks.regex,
        flags=("--exclude",),
        metavar="REGEX",
        chapter=True,
        fixed=True,
    )
    strict: bool = option(
        True,
        help="hosts must match a root host, modulo one 'www.'",
        check=truth,
        flags=("--strict",),
        off_flags=("--lenient",),
        off_help="hosts match when their last two labels match a root host's",
        chapter=True,
        fixed=True,
    )
    max_redirect: int = option(
        DEFAULT_MAX_REDIRECT,
        help="redirects followed from any one URL",
        check=whole_number(minimum=0),
        flags=("--max-redirect", "--max_redirect"),
        metavar="N",
        section=LIMITS,
        chapter=True,
    )
    max_tries: int = option(
        DEFAULT_MAX_TRIES,
        help="attempts per URL on network errors and on 408, 429, 502, 503 and 504 answers",
        check=whole_number(minimum=1),
        flags=("--max-tries", "--max_tries"),
        metavar="N",
        section=LIMITS,
        chapter=True,
    )
    max_tasks: int = option(
        DEFAULT_MAX_TASKS,
        help="concurrent workers and requests",
        check=whole_number(minimum=1),
        flags=("--max-tasks", "--max_tasks"),
        metavar="N",
        cli_default=CLI_MAX_TASKS,
        section=LIMITS,
        chapter=True,
    )
    sitemaps: bool = option(
        False,
        help="also crawl what each root origin's sitemaps list (robots.txt Sitemap: lines, "
        "else /sitemap.xml)",
        check=truth,
        flags=("--sitemaps",),
        fixed=True,
    )
    include: str | Iterable[str] | None = option(
        None,
        help="follow only URLs where re.search(REGEX, url) matches one of these (roots are "
        "always fetched; default: every URL in scope)",
        check=checks.regexes,
        flags=("--include",),
        metavar="REGEX",
        repeated=True,
        fixed=True,
    )
    no_parent: bool = option(
        False,
        help="follow only URLs at or below the directory of a root on its host, as wget's -np",
        check=truth,
        flags=("--no-parent",),
        fixed=True,
    )
    timeout: float = option(
        DEFAULT_TIMEOUT,
        help="limit for one whole request attempt, connect to last byte",
        check=seconds,
        flags=("--timeout",),
        metavar="SECONDS",
        section=LIMITS,
    )
    max_time: float | None = option(
        None,
        help="deadline for the whole crawl (default: none)",
        check=seconds,
        flags=("--max-time",),
        metavar="SECONDS",
        section=LIMITS,
    )
    max_pages: int | None = option(
        None,
        help="records to make at most (default: no limit)",
        check=whole_number(minimum=1),
        flags=("--max-pages",),
        metavar="N",
        section=LIMITS,
        fixed=True,
    )
    max_depth: int | None = option(
        None,
        help="link hops from a root; redirects are not hops (default: no limit)",
        check=whole_number(minimum=0),
        flags=("--max-depth",),
        metavar="N",
        section=LIMITS,
        fixed=True,
    )
    max_size: int = option(
        DEFAULT_MAX_SIZE,
        help="body bytes read from one response, after decompression",
        check=whole_number(minimum=1),
        flags=("--max-size",),
        metavar="BYTES",
        section=LIMITS,
    )
    max_url_length: int = option(
        DEFAULT_MAX_URL_LENGTH,
        help="longer links are skipped",
        check=whole_number(minimum=1),
        flags=("--max-url-length",),
        metavar="CHARS",
        section=LIMITS,
    )
    obey_robots: bool = option(
        True,
        help="fetch each origin's robots.txt first and follow its rules",
        check=truth,
        off_flags=("--ignore-robots",),
        off_help="do not fetch or obey robots.txt",
        section=MANNERS,
        fixed=True,
    )
    user_agent: str | None = option(
        None,
        # None is _fetch.DEFAULT_USER_AGENT. (The version is not read here: importlib.metadata
        # would bring the socket module into the sans-I/O core.)
        help="the User-Agent header (default trio-crawler/<version>)",
        check=checks.user_agent,
        flags=("--user-agent",),
        metavar="STRING",
        section=MANNERS,
    )
    headers: Mapping[str, str] | Iterable[tuple[str, str] | str] | None = option(
        None,
        help="send this header with every request, robots.txt and sitemaps included "
        "('Name: value'; in Python, a mapping or (name, value) pairs; default: none)",
        check=checks.headers,
        flags=("--header",),
        metavar="'NAME: VALUE'",
        section=MANNERS,
        repeated=True,
        secret=True,
    )
    max_per_host: int | None = option(
        None,
        help="concurrent requests to one host (default: --max-tasks)",
        check=whole_number(minimum=1),
        flags=("--max-per-host",),
        metavar="N",
        section=MANNERS,
    )
    delay: float = option(
        0.0,
        help="between two requests to one host; robots.txt Crawl-delay can raise it",
        check=_host_delay,
        flags=("--delay",),
        metavar="SECONDS",
        section=MANNERS,
    )
    max_retry_after: float = option(
        DEFAULT_MAX_RETRY_AFTER,
        help="longest Retry-After waited for; a longer one ends the URL with that answer",
        check=checks.longest_wait,
        flags=("--max-retry-after",),
        metavar="SECONDS",
        section=MANNERS,
    )
    adapt: bool = option(
        True,
        help="slow each origin down when it pushes back (429, 503, timeouts, slow answers)",
        check=truth,
        off_flags=("--no-adapt",),
        off_help="keep every origin at --delay and --max-per-host whatever it answers",
        section=MANNERS,
    )

    state: str | None = option(
        None,
        help="keep the crawl in this SQLite file, to resume it after a kill with the same "
        "command (default: in memory)",
        check=checks.state_path,
        flags=("--state",),
        metavar="FILE",
        section=DURABLE,
    )
    recrawl: bool = option(
        False,
        help="with --state, crawl a finished crawl again with conditional requests",
        check=truth,
        flags=("--recrawl",),
        section=DURABLE,
    )

    frontier: str | None = option(
        None,
        help="share the crawl through this Redis server with every process given the same "
        "--frontier and --crawl-id (redis://[USER:PASSWORD@]HOST[:PORT][/DB] or rediss://)",
        check=checks.frontier_url,
        flags=("--frontier",),
        metavar="URL",
        section=DURABLE,
        secret=True,
    )
    crawl_id: str = option(
        "crawl",
        help="with --frontier, the name of the shared crawl",
        check=checks.crawl_id,
        flags=("--crawl-id",),
        metavar="NAME",
        section=DURABLE,
    )
    lease: float = option(
        60.0,
        help="with --frontier, seconds a URL stays with a process that stopped renewing it",
        check=seconds,
        flags=("--lease",),
        metavar="SECONDS",
        section=DURABLE,
    )

    def __post_init__(self) -> None:
        check_options(self)
        if self.recrawl and self.state is None:
            raise ConfigError(
                "recrawl",
                "needs {state}: it crawls again the crawl kept in that file",
                mentions=("state",),
            )
        if self.state is not None and self.frontier is not None:
            raise ConfigError(
                "frontier",
                "and {state} cannot go together: a crawl is kept in one or the other",
                mentions=("state",),
            )

    def keywords(self) -> CrawlKeywords:
        """The options as keyword arguments for a ``Crawler`` (or :meth:`CrawlConfig.create`)."""
        values = {f.name: getattr(self, f.name) for f, _ in declared_options(CrawlOptions)}
        return cast("CrawlKeywords", values)


class CrawlKeywords(TypedDict, total=False):
    """The options as ``Crawler`` keyword arguments, for type checkers (see the module's
    docstring): each :class:`CrawlOptions` field again, with the same name and type."""

    exclude: str | None
    strict: bool
    max_redirect: int
    max_tries: int
    max_tasks: int
    sitemaps: bool
    include: str | Iterable[str] | None
    no_parent: bool
    timeout: float
    max_time: float | None
    max_pages: int | None
    max_depth: int | None
    max_size: int
    max_url_length: int
    obey_robots: bool
    user_agent: str | None
    headers: Mapping[str, str] | Iterable[tuple[str, str] | str] | None
    max_per_host: int | None
    delay: float
    max_retry_after: float
    adapt: bool
    state: str | None
    recrawl: bool
    frontier: str | None
    crawl_id: str
    lease: float


def normalize_roots(roots: Iterable[str]) -> tuple[str, ...]:
    """The roots as the crawl keeps them: normalised, in order, without repeats.

    Checked apart from the options because the command line knows the demo's root only
    once its server has started, long after the options must be checked.

    Raises:
        ConfigError: For ``roots`` that are a string, empty, or have a non-http(s) URL.
    """
    if isinstance(roots, str):
        # A lone string would otherwise be crawled one character at a time.
        raise ConfigError("roots", f"must be a list of URLs, not the string {roots!r}")
    # Roots keep their order; repeats are dropped (a dict, so that hundreds of thousands
    # of roots from -i cost no quadratic search).
    normalized: dict[str, None] = {}
    for root in roots:
        url = normalize_root(root)
        if url is None:
            raise ConfigError("roots", f"has {root!r}, which is {_not_a_root(root)}")
        normalized[url] = None
    if not normalized:
        raise ConfigError("roots", "must name at least one URL to crawl")
    return tuple(normalized)


def roots_in_brief(roots: Sequence[str], *, shown: int = 3) -> str:
    """The roots for a one-line message: the first ``shown`` of them, and how many more
    (a crawl given hundreds of thousands with ``-i`` must not print them all)."""
    more = len(roots) - shown
    listed = " ".join(roots[:shown])
    return f"{listed} (and {more} more)" if more > 0 else listed


def _not_a_root(root: str) -> str:
    """What is wrong with a root :func:`normalize_root` refused: another scheme, or an
    http(s) URL (or a host, which gets ``http://``) that does not parse."""
    scheme, separator, _ = root.strip().partition("://")
    if separator and scheme.lower() not in ("http", "https"):
        return "not an http(s) URL"
    return "not a valid URL"


@dataclass(frozen=True, slots=True, kw_only=True)
class CrawlConfig(CrawlOptions):
    """The checked options of one crawl with its roots: what the core reads.

    Build it with :meth:`create`, which takes the roots as any iterable. ``scope``, which
    answers "should this link be crawled?", is made from ``roots``, ``strict``,
    ``exclude``, ``include`` and ``no_parent``.
    """

    roots: tuple[str, ...]
    scope: Scope = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Roots first: they are the first argument, so theirs is the first error reported.
        object.__setattr__(self, "roots", normalize_roots(self.roots))
        CrawlOptions.__post_init__(self)  # (zero-argument super() fails in slotted classes)
        pattern = None if self.exclude is None else re.compile(self.exclude)
        scope = Scope(
            self.roots,
            strict=self.strict,
            exclude=pattern,
            include=[re.compile(pattern) for pattern in self.include or ()],
            no_parent=self.no_parent,
            normalized=True,
        )
        object.__setattr__(self, "scope", scope)

    @classmethod
    @takes_options(CrawlOptions)
    def create(cls, roots: Iterable[str], **options: Unpack[CrawlKeywords]) -> CrawlConfig:
        """Check the roots and the options and build the config.

        Raises:
            ConfigError: For the roots, or the first option whose value is unusable.
            TypeError: For a keyword that is not an option.
        """
        # Normalised and checked once, in __post_init__ (a root costs microseconds, and -i
        # gives hundreds of thousands); a lone string goes there whole, to be refused.
        given = roots if isinstance(roots, str) else tuple(roots)
        return cls(roots=cast("tuple[str, ...]", given), **options)

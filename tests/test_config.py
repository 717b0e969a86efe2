"""The options' declarations and what is made from them: checks, the Crawler, the CLI, the docs.

Each option is declared once, as a field of ``CrawlOptions`` (or, for the command line's own
options, of ``CommandLine``). These tests pin what the declarations must give: the checks'
messages, the ``Crawler`` signature, the ``CrawlKeywords`` TypedDict that type checkers
read, the command-line flags and their defaults, and the options tables in docs/usage.md.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from dataclasses import Field
from pathlib import Path

import pytest

import trio_crawler
from trio_crawler._cli_args import CommandLine
from trio_crawler._config import CrawlConfig, CrawlKeywords, CrawlOptions, normalize_roots
from trio_crawler._options import SAME, ConfigError, Option, declared_options

from conftest import Engine

# Where the options are documented: the tables, the chapter's spellings, the signature.
USAGE = Path(__file__).resolve().parent.parent / "docs" / "usage.md"

# The chapter's signature first (client where its loop was), then this port's additions.
SIGNATURE = (
    "(roots, *, exclude=None, strict=True, max_redirect=10, max_tries=4, max_tasks=10, "
    "client=None, sitemaps=False, include=None, no_parent=False, timeout=10.0, max_time=None, "
    "max_pages=None, max_depth=None, max_size=10485760, max_url_length=2083, "
    "obey_robots=True, user_agent=None, headers=None, "
    "max_per_host=None, delay=0.0, max_retry_after=600.0, adapt=True, state=None, recrawl=False, "
    "frontier=None, "
    "crawl_id='crawl', lease=60.0, handler=None, items=None, on_record=None, "
    "on_exchange=None, on_progress=None, progress_interval=0.1)"
)


def plain(signature: inspect.Signature) -> str:
    """A signature as the chapter would write it: names and defaults, no annotations."""
    parameters = [
        p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()
    ]
    return str(signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty))


def all_declarations() -> list[tuple[str, Field[typing.Any], Option, type]]:
    """(name, field, Option, value type) of every option: the crawl's, the command line's."""
    return [
        (f.name, f, spec, typing.get_type_hints(owner)[f.name])
        for owner in (CrawlOptions, CommandLine)
        for f, spec in declared_options(owner)
    ]


# --- the checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"exclude": "("}, "exclude is not a valid regular expression: missing )"),
        ({"exclude": 3}, "exclude must be a regular expression string, not 3"),
        ({"max_redirect": -1}, "max_redirect must be >= 0, not -1"),
        ({"max_tries": 0}, "max_tries must be >= 1, not 0"),
        ({"max_tries": 2.5}, "max_tries must be a whole number, not 2.5"),
        ({"max_tasks": True}, "max_tasks must be a whole number, not True"),
        ({"timeout": 0}, "timeout must be a positive number of seconds, not 0"),
        ({"timeout": None}, "timeout must be a number of seconds, not None"),
        ({"timeout": float("inf")}, "timeout must be a positive number of seconds, not inf"),
        ({"max_time": "1"}, "max_time must be a number of seconds, not '1'"),
        ({"max_pages": 0}, "max_pages must be >= 1, not 0"),
        ({"max_depth": -1}, "max_depth must be >= 0, not -1"),
        ({"max_size": 0}, "max_size must be >= 1, not 0"),
        ({"max_url_length": 0}, "max_url_length must be >= 1, not 0"),
        ({"user_agent": " "}, "user_agent must be a non-empty string, not ' '"),
        ({"user_agent": "a\nb"}, "user_agent must be printable ASCII (one header line)"),
        ({"max_per_host": 0}, "max_per_host must be >= 1, not 0"),
        ({"delay": -1}, "delay must be from 0 to 60 seconds, not -1"),
        ({"delay": "1"}, "delay must be a number of seconds, not '1'"),
        ({"max_retry_after": -1}, "max_retry_after must be a finite number of seconds, 0 or"),
        ({"max_retry_after": float("inf")}, "max_retry_after must be a finite number of"),
        ({"max_retry_after": None}, "max_retry_after must be a number of seconds, not None"),
        ({"include": ["/a", "("]}, "include is not a valid regular expression: missing )"),
        ({"include": 3}, "include must be a regular expression string or a list of them, not 3"),
        ({"headers": "X-Token"}, "headers must be 'Name: value', not 'X-Token'"),
        ({"headers": [("X-A", 1)]}, "headers must be a (name, value) pair or 'Name: value'"),
        ({"headers": 3}, "headers must be a mapping or a list of (name, value) pairs, not 3"),
        ({"headers": {"X A": "1"}}, "headers has a name that is no HTTP field name: 'X A'"),
        ({"headers": {"": "1"}}, "headers has a name that is no HTTP field name: ''"),
        ({"headers": ["X-A: 1\r\nX-B: 2"]}, "headers has a value that is not one line of"),
        ({"headers": {"X-A": "caf\u00e9"}}, "headers has a value that is not one line of"),
        ({"headers": ["Host: a"]}, "headers may not set Host ('Host: a'): the crawler frames"),
        ({"headers": {"content-length": "0"}}, "headers may not set content-length"),
        ({"headers": ["Accept-Encoding: br"]}, "headers may not set Accept-Encoding"),
        ({"headers": ["user-agent: x"]}, "headers may not set User-Agent: give it with user_agent"),
    ],
)
def test_an_unusable_option_is_a_config_error_naming_it(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}") as raised:
        CrawlOptions(**options)  # type: ignore[arg-type]
    assert raised.value.option == next(iter(options))
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        CrawlConfig.create(["example.com"], **options)  # type: ignore[arg-type]


def test_none_is_accepted_exactly_where_it_is_the_default() -> None:
    types = typing.get_type_hints(CrawlOptions)
    for f, _ in declared_options(CrawlOptions):
        if f.default is None:
            assert getattr(CrawlOptions(**{f.name: None}), f.name) is None
        elif types[f.name] is not bool:  # a boolean takes any value's truth
            with pytest.raises(ConfigError, match=f"^{f.name} "):
                CrawlOptions(**{f.name: None})


def test_values_are_kept_as_the_crawl_reads_them() -> None:
    options = CrawlOptions(timeout=5, max_time=2, delay=1, strict=0, obey_robots="")  # type: ignore[arg-type]
    assert (options.timeout, options.max_time, options.delay) == (5.0, 2.0, 1.0)
    assert all(type(value) is float for value in (options.timeout, options.max_time))
    assert (options.strict, options.obey_robots) == (False, False)


def test_include_and_headers_are_kept_as_tuples_in_the_order_given() -> None:
    """A pattern or many, a header as a mapping, as pairs or as ``--header`` lines: the
    crawl keeps tuples, so that they compare between runs and cannot change under it."""
    assert CrawlOptions(include="/a").include == ("/a",)
    assert CrawlOptions(include=["/a", "/b"]).include == ("/a", "/b")
    assert CrawlOptions(include=[]).include is None  # no pattern: no narrowing
    lines = ["Cookie: a=1", "X-Token:  t  ", "Cookie: b=2", "Accept: text/html"]
    expected = (("Cookie", "a=1"), ("X-Token", "t"), ("Cookie", "b=2"), ("Accept", "text/html"))
    assert CrawlOptions(headers=lines).headers == expected
    assert CrawlOptions(headers=list(expected)).headers == expected
    assert CrawlOptions(headers={"X-Token": "t"}).headers == (("X-Token", "t"),)
    assert CrawlOptions(headers="X-Token: t").headers == (("X-Token", "t"),)
    # Headers may hold credentials: not shown in a repr, which may end up in a log.
    assert "secret" not in repr(CrawlOptions(headers={"Authorization": "Bearer secret"}))


def test_options_are_frozen() -> None:
    options = CrawlOptions()
    with pytest.raises(AttributeError):
        options.max_tasks = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("roots", "message"),
    [
        ("example.com", "roots must be a list of URLs, not the string 'example.com'"),
        ([], "roots must name at least one URL to crawl"),
        (["ftp://example.com/"], "roots has 'ftp://example.com/', which is not an http(s) URL"),
        (["http://[::1"], "roots has 'http://[::1', which is not a valid URL"),
        (["example.com:http"], "roots has 'example.com:http', which is not a valid URL"),
    ],
)
def test_unusable_roots(roots: object, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        normalize_roots(roots)  # type: ignore[arg-type]
    # The roots are the first argument, and the first error reported.
    with pytest.raises(ConfigError, match=r"^roots "):
        CrawlConfig.create(roots, max_tasks=0)  # type: ignore[arg-type]


def test_an_option_named_in_a_message_is_spelt_as_in_the_api() -> None:
    """The API's message names options as keywords; the command line spells the same
    error with flags (test_cli_args.py)."""
    with pytest.raises(ConfigError, match=r"^recrawl needs state: it crawls again the crawl "):
        CrawlOptions(recrawl=True)
    with pytest.raises(ConfigError, match=r"^frontier and state cannot go together: "):
        CrawlOptions(state="x.db", frontier="redis://h/")


def test_config_normalises_roots_and_makes_the_scope() -> None:
    config = CrawlConfig.create(
        ["xkcd.com", "http://xkcd.com/", "https://what-if.xkcd.com/"], strict=False
    )
    assert config.roots == ("http://xkcd.com/", "https://what-if.xkcd.com/")
    assert config.scope.strict is False
    assert config.scope.host_okay("blag.xkcd.com")
    # Made directly, a config is checked the same way.
    with pytest.raises(ConfigError, match=r"^roots "):
        CrawlConfig(roots=("ftp://x/",))


def test_config_create_shows_every_option_in_its_signature() -> None:
    names = list(inspect.signature(CrawlConfig.create).parameters)
    assert names == ["roots", *(f.name for f, _ in declared_options(CrawlOptions))]


# --- the Crawler -------------------------------------------------------------------------


def test_crawler_signature_is_the_chapters_with_every_option() -> None:
    from trio_crawler import engine_anyio, engine_asyncio, engine_trio

    for module in (engine_trio, engine_anyio, engine_asyncio):
        assert plain(inspect.signature(module.Crawler)) == SIGNATURE


def test_usage_shows_the_crawler_signature() -> None:
    text = " ".join(USAGE.read_text(encoding="utf-8").split())
    assert f"`Crawler{SIGNATURE}`" in text


def test_crawler_docs_list_every_option() -> None:
    doc = inspect.getdoc(trio_crawler.Crawler.__init__) or ""
    for f, _ in declared_options(CrawlOptions):
        assert re.search(rf"^    {f.name}: \S", doc, re.MULTILINE), f.name


def test_a_misspelt_option_is_a_type_error_naming_the_crawler() -> None:
    with pytest.raises(
        TypeError, match=r"^Crawler\.__init__\(\) got an unexpected keyword argument 'max_task'$"
    ):
        trio_crawler.Crawler(["example.com"], max_task=3)  # type: ignore[call-arg]


async def save(value: object) -> None:
    """An async callback: what a user might pass for on_record, and what is refused."""


class AsyncCallable:
    async def __call__(self, value: object) -> None: ...


@pytest.mark.parametrize("name", ["on_record", "on_exchange", "on_progress"])
def test_an_async_callback_is_refused_when_the_crawler_is_made(engine: Engine, name: str) -> None:
    """The callbacks are called without awaiting: an async one would never run. It is a
    ConfigError naming the callback, on every engine, before any crawl."""
    for callback in (save, functools.partial(save), AsyncCallable()):
        with pytest.raises(
            ConfigError,
            match=rf"^{name} must be a plain function, not the async function .+: the "
            "crawler calls it without awaiting, so its body would never run$",
        ):
            engine.crawler(["example.com"], **{name: callback})
    with pytest.raises(ConfigError, match=rf"^{name} must be a function, not 3$"):
        engine.crawler(["example.com"], **{name: 3})
    crawler = engine.crawler(["example.com"], **{name: print})  # a plain function is taken
    assert crawler.config.roots == ("http://example.com/",)


def test_crawler_passes_every_option_to_its_config(tmp_path: Path) -> None:
    common = {
        "exclude": "x",
        "strict": False,
        "max_redirect": 1,
        "max_tries": 2,
        "max_tasks": 3,
        "sitemaps": True,
        "include": ("/a", "/b"),
        "no_parent": True,
        "timeout": 4.0,
        "max_time": 5.0,
        "max_pages": 6,
        "max_depth": 7,
        "max_size": 8,
        "max_url_length": 9,
        "obey_robots": False,
        "user_agent": "ua",
        "headers": (("X-A", "1"), ("X-B", "2")),
        "max_per_host": 10,
        "delay": 11.0,
        "max_retry_after": 12.0,
        "adapt": False,
    }
    # A crawl is kept in a state file or on a shared frontier, never both: two crawlers.
    stored = CrawlOptions(**common, state=str(tmp_path / "crawl.db"), recrawl=True)
    shared = CrawlOptions(**common, frontier="redis://127.0.0.1:1/0", crawl_id="other", lease=12.0)
    assert all(
        getattr(stored, f.name) != f.default or getattr(shared, f.name) != f.default
        for f, _ in declared_options(CrawlOptions)
    ), "every option set to a value that is not its default"
    for options in (stored, shared):
        crawler = trio_crawler.Crawler(["example.com"], **options.keywords())
        for f, _ in declared_options(CrawlOptions):
            assert getattr(crawler.config, f.name) == getattr(options, f.name), f.name


def test_the_typed_dict_agrees_with_the_declarations() -> None:
    """CrawlKeywords is the one second spelling of the options (for type checkers)."""
    declared = typing.get_type_hints(CrawlOptions)
    expected = {f.name: declared[f.name] for f, _ in declared_options(CrawlOptions)}
    typed = typing.get_type_hints(CrawlKeywords)
    assert list(typed) == list(expected)
    assert typed == expected
    assert CrawlKeywords.__required_keys__ == frozenset()


# --- the command line --------------------------------------------------------------------


def test_every_flag_is_declared_once() -> None:
    flags = [flag for _, _, spec, _ in all_declarations() for flag in spec.flags + spec.off_flags]
    assert len(flags) == len(set(flags))
    for name, _, spec, _ in all_declarations():
        assert spec.flags or spec.off_flags, f"{name} has no flag"


# --- docs/usage.md ----------------------------------------------------------------------


def usage_option_rows() -> dict[str, str]:
    """Each flag in docs/usage.md's options tables ("Options"), with its row's default cell."""
    text = USAGE.read_text(encoding="utf-8")
    section = text[text.index("\n## Options\n") : text.index("\n## Exit status and signals\n")]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if not line.startswith("| `-"):
            continue
        flags_cell, default_cell, _ = (cell.strip() for cell in line.strip().strip("|").split("|"))
        for flag in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", flags_cell):
            rows[flag] = default_cell.replace("`", "").strip()
    return rows


def test_usage_tables_list_every_flag_with_its_default() -> None:
    rows = usage_option_rows()
    for name, f, spec, kind in all_declarations():
        for flag in (*spec.flags[:1], *spec.off_flags[:1]):
            assert flag in rows, f"{flag} is not in docs/usage.md's options tables"
        if spec.counted or kind is bool:
            continue  # a switch's row says what it does when absent, in words
        cell = rows[spec.flags[0]]
        default = f.default if spec.cli_default is SAME else spec.cli_default
        if default is None:
            assert cell.startswith("none") or cell in spec.help, (name, cell)
        else:
            shown = f"{default:g}" if isinstance(default, float) else str(default)
            assert cell.split()[0] == shown, (name, cell, shown)


def test_usage_tables_name_no_undeclared_flag() -> None:
    declared = {
        flag for _, _, spec, _ in all_declarations() for flag in spec.flags + spec.off_flags
    }
    assert set(usage_option_rows()) - declared == {"--help", "--version"}


def test_usage_names_the_chapters_spellings() -> None:
    text = USAGE.read_text(encoding="utf-8")
    aliases = [flag for _, _, spec, _ in all_declarations() for flag in spec.flags if "_" in flag]
    assert aliases == ["--max_redirect", "--max_tries", "--max_tasks"]
    for alias in aliases:
        assert f"`{alias}`" in text

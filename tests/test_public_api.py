"""The names users import, and the purity of the core."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import trio_crawler

from support import RECORD_KEYS

ROOT = Path(__file__).resolve().parent.parent


def test_public_names() -> None:
    assert sorted(trio_crawler.__all__) == [
        "ConfigError",
        "Crawler",
        "FetchStatistic",
        "Page",
        "__version__",
    ]
    from trio_crawler.engine_trio import Crawler

    assert trio_crawler.Crawler is Crawler
    for name in trio_crawler.__all__:
        assert getattr(trio_crawler, name) is not None


def test_every_engine_has_the_same_crawler() -> None:
    from trio_crawler import engine_anyio, engine_asyncio, engine_trio

    signatures = {
        module.__name__: inspect.signature(module.Crawler)
        for module in (engine_trio, engine_anyio, engine_asyncio)
    }
    assert len(set(signatures.values())) == 1, signatures
    for module in (engine_trio, engine_anyio, engine_asyncio):
        crawler = module.Crawler(["example.com"], max_tasks=3)
        assert (crawler.seen_urls, crawler.done, crawler.max_tasks) == (
            {"http://example.com/"},
            [],
            3,
        )
        assert callable(crawler.crawl)
        assert callable(crawler.stop)


def test_fetch_statistic_fields_are_the_contract() -> None:
    fields = list(trio_crawler.FetchStatistic.__dataclass_fields__)
    assert fields == RECORD_KEYS


def test_crawler_signature_is_the_contract() -> None:
    crawler = trio_crawler.Crawler(
        ["example.com"], exclude=None, strict=True, max_redirect=10, max_tries=4, max_tasks=10
    )
    assert crawler.seen_urls == {"http://example.com/"}
    assert crawler.done == []
    assert crawler.roots == ("http://example.com/",)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_tasks": 0}, "max_tasks must be >= 1, not 0"),
        ({"max_tries": 2.5}, "max_tries must be a whole number, not 2.5"),
        ({"exclude": "["}, "exclude is not a valid regular expression"),
        ({"timeout": 0}, "timeout must be a positive number of seconds, not 0"),
    ],
)
def test_bad_options_raise_config_error(options: dict[str, object], message: str) -> None:
    with pytest.raises(trio_crawler.ConfigError, match=message):
        trio_crawler.Crawler(["example.com"], **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("roots", ["example.com", [], ["ftp://example.com/"]])
def test_bad_roots_raise_config_error(roots: object) -> None:
    with pytest.raises(trio_crawler.ConfigError, match=r"^roots "):
        trio_crawler.Crawler(roots)  # type: ignore[arg-type]


def test_core_modules_import_no_async_or_network_library() -> None:
    """The sans-I/O core must be usable (and testable) without an event loop; so must the
    frontier room (the stores' interfaces and the per-origin scheduler), the factory, and
    the page handler's machinery (a handler is awaited on whatever loop runs it)."""
    code = (
        "import sys\n"
        "import trio_crawler._state, trio_crawler._report, trio_crawler._output\n"
        "import trio_crawler._frontier, trio_crawler._scheduler, trio_crawler._stores\n"
        "import trio_crawler._handler\n"
        "bad = {'trio', 'anyio', 'asyncio', 'httpx', 'httpcore', 'socket', 'sniffio'}\n"
        "print(sorted(bad & set(sys.modules)))\n"
    )
    # Importing a submodule runs trio_crawler/__init__.py, which imports the engine, so
    # the core modules are loaded from a stand-in package that has no __init__ side effects.
    package_dir = str(ROOT / "trio_crawler")
    loader = (
        "import sys, types\n"
        "package = types.ModuleType('trio_crawler')\n"
        f"package.__path__ = [{package_dir!r}]\n"
        "sys.modules['trio_crawler'] = package\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", loader + code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_package_ships_type_information() -> None:
    assert (ROOT / "trio_crawler" / "py.typed").exists()


def test_the_installed_version_is_the_packages_own() -> None:
    """pyproject.toml reads the version from ``_version.py``: the metadata pip installed
    and the constant the crawler sends in its User-Agent are one."""
    import importlib.metadata

    assert importlib.metadata.version("trio-crawler") == trio_crawler.__version__

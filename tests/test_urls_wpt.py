"""Link resolution against the Web Platform Tests' URL cases: the URL a browser follows.

``tests/data/wpt_urltestdata.json`` (see ``tests/data/README.md``) is the browser vendors'
own list of hrefs, bases and the ``href`` a browser makes of them, or ``failure``. Every case
whose base is null or an http(s) URL is a link the crawler could meet; for each one,
:func:`normalize_url` and (where there is a base) :class:`LinkResolver` must follow the URL
the browser follows, in the crawler's spelling (:func:`crawler_spelling`), or give None
where the browser fails or lands on another scheme.

The resolver's string fast path must agree with the parser behind :func:`normalize_url`:
the WPT cases run through both, and a property test draws hrefs and bases near the fast
path's edges (dot segments spelled with ``%2e``, quotes in a query, hosts that are numbers,
``xn--`` labels, ports, upper case).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trio_crawler._urls import LinkResolver, normalize_url

_DATA = Path(__file__).parent / "data" / "wpt_urltestdata.json"


def _load_cases() -> list[dict[str, Any]]:
    entries = json.loads(_DATA.read_text(encoding="utf-8"))
    return [
        entry
        for entry in entries
        if isinstance(entry, dict)  # the strings are comments
        and (entry["base"] is None or entry["base"].lower().startswith(("http:", "https:")))
    ]


CASES = _load_cases()
CASES_WITH_BASE = [case for case in CASES if case["base"] is not None]


def crawler_spelling(case: dict[str, Any]) -> str | None:
    """What the crawler must make of a case: the browser's URL without its fragment.

    None where the browser fails or follows something other than http(s): the crawler
    skips those links. The fragment is the one normalisation the crawler adds.
    """
    if case.get("failure"):
        return None
    href: str = case["href"]
    if not href.startswith(("http://", "https://")):
        return None
    return href.partition("#")[0]


def _case_id(case: dict[str, Any]) -> str:
    return f"{case['input']!r} on {case['base']!r}"[:80]


def test_the_data_holds_the_cases_this_module_is_about() -> None:
    # A truncated or replaced data file must not pass by running nothing.
    assert len(CASES) > 700
    assert len(CASES_WITH_BASE) > 150
    assert sum(crawler_spelling(case) is None for case in CASES) > 400
    assert sum(crawler_spelling(case) is not None for case in CASES) > 200


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_normalize_url_follows_the_browser(case: dict[str, Any]) -> None:
    assert normalize_url(case["input"], case["base"]) == crawler_spelling(case)


@pytest.mark.parametrize("case", CASES_WITH_BASE, ids=_case_id)
def test_link_resolver_follows_the_browser(case: dict[str, Any]) -> None:
    # A page's URL reaches the resolver in the crawler's spelling, as every URL it keeps.
    base = normalize_url(case["base"])
    assert base is not None
    assert LinkResolver(base).resolve(case["input"]) == crawler_spelling(case)


@pytest.mark.parametrize(
    ("href", "base", "expected"),
    [
        # The examples that made this module: each one followed elsewhere before.
        ("http://example.com/foo/bar/../ton", None, "http://example.com/foo/ton"),
        ("%2e%2e/x", "http://example.org/a/b/c", "http://example.org/a/x"),
        ("\\x", "http://example.org/foo/bar", "http://example.org/x"),
        ("http://256", None, "http://0.0.1.0/"),
        ("http://1.2.3.4./", None, "http://1.2.3.4/"),
        ("http://0x7f.1/", None, "http://127.0.0.1/"),
        ("https://faß.ExAmPlE/", None, "https://xn--fa-hia.example/"),
        ("///test", "http://example.org/", "http://test/"),
        ("https:/example.com/", None, "https://example.com/"),
        ("http://192.168.0.257", None, None),
        ("http://1.2.3.08", None, None),
        # The one normalisation on top: no fragment. An empty query stays, as in a browser.
        ("http://a/b?#c", None, "http://a/b?"),
    ],
)
def test_examples(href: str, base: str | None, expected: str | None) -> None:
    assert normalize_url(href, base) == expected
    if base is not None:
        assert LinkResolver(base).resolve(href) == expected


# Pieces that steer the fast path: dot segments in every spelling, slashes, "?" and "#",
# quotes (encoded in a query, not in a path), "%" escapes, schemes, characters the
# standard strips, encodes or maps, and absolute prefixes with hosts near the IPv4 and IDNA
# rules and ports near their limits.
_PIECES = st.sampled_from(
    [
        "",
        ".",
        "..",
        "%2e",
        "%2E",
        ".%2e",
        "/",
        "//",
        "?",
        "#",
        ":",
        ";",
        "'",
        "%",
        "%41",
        "%zz",
        "a",
        "b.html",
        "x=1",
        " ",
        "\t",
        "é",
        "\\",
        "A",
        "@",
    ]
)
_PREFIXES = st.sampled_from(
    [
        "",
        "http://",
        "https://",
        "HTTP://",
        "http:",
        "https:/",
        "mailto:",
        "a:",
        "1a:",
        "http://example.com",
        "http://example.com:80",
        "https://example.com:443",
        "http://example.com:8080",
        "http://example.com:65536",
        "http://example.com:0",
        "http://a.1",
        "http://a.0x1f",
        "http://a.b1",
        "http://xn--nxasmq6b.com",
        "http://xn--a.com",
        "http://a-.com",
        "http://u@h",
        "http://example.com.",
        "http://[::1]",
    ]
)
_BASES = st.sampled_from(
    [
        "http://example.com/",
        "http://example.com/a/b/c.html?q=1",
        "https://example.com:8443/dir/",
        "http://[::1]/x/y",
        "http://user:pw@example.com/p",
        "http://127.0.0.1:8000/a//b/",
        "http://xn--nxasmq6b.com/a;p/b;q?r",
    ]
)


@settings(max_examples=1500, deadline=None)
@given(prefix=_PREFIXES, pieces=st.lists(_PIECES, max_size=8), base=_BASES)
@example(prefix="", pieces=["%2e", "%2E", "/", "x"], base="http://example.com/a/b/c.html?q=1")
@example(prefix="", pieces=["?", "'"], base="http://example.com/")
@example(prefix="http://a.1", pieces=["/"], base="http://example.com/")
@example(prefix="", pieces=["/", "..", "//", "a"], base="http://example.com/")
def test_link_resolver_fast_path_agrees_with_the_parser(
    prefix: str, pieces: list[str], base: str
) -> None:
    href = prefix + "".join(pieces)
    assert LinkResolver(base).resolve(href) == normalize_url(href, base)

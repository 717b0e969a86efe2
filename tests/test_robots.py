"""robots.txt read as RFC 9309 says, against Google's parser tests and the crawler's own needs.

``tests/data/robotstxt/cases.json`` (see the README there) is every allow/disallow
expectation of Google's robots.txt parser tests. Each case runs through the crawler's own
reading: the body's bytes as :func:`robots_text` reads them, then :func:`parse` for the
case's agent. Every case not marked ``google_specific`` must give the expected answer. A
Google-specific case may differ, and then it is in :data:`GOOGLE_DIFFERENCES` with the
reason; the table is checked both ways, so a case that starts to agree, or to differ,
fails until the table says so.

The rest pins what the crawler itself relies on: the three readings the RFC requires and
protego missed, the rules as a store keeps and rebuilds them, ``Crawl-delay``, ``Sitemap``,
the statuses, the 500 KiB limit and the one spelling rules and URLs are compared in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trio_crawler._robots import MAX_PARSED_SIZE, PRODUCT_TOKEN, RobotsRules, robots_text
from trio_crawler._robots_parser import normalize, parse, path_of

_DATA = Path(__file__).parent / "data" / "robotstxt" / "cases.json"
CASES: list[dict[str, Any]] = json.loads(_DATA.read_text(encoding="utf-8"))

# The Google-specific cases the crawler answers otherwise, and why: RFC 9309 is the rule.
_RAW_URL = (
    "Google matches the URL as the caller gives it and leaves percent-encoding to the "
    "caller, so a raw 'ツ' does not match the rule's; RFC 9309 2.2.2 percent-encodes the "
    "URL's non-ASCII characters before comparing, so it matches (and the crawler's URLs "
    "are always encoded already)"
)
_LINE_TOO_LONG = (
    "Google cuts lines at 16,664 bytes (2,083 x 8) and matches what is left of the rule; "
    "RFC 9309 sets no such limit, and a rule cut short is another rule (a cut Allow allows "
    "URLs the file never named): the rule is matched whole"
)
GOOGLE_DIFFERENCES = {
    "ID_Encoding#03": _RAW_URL,
    "ID_Encoding#05": _RAW_URL,
    "ID_Encoding#06": (
        "Google compares '%62%61%7A' and 'baz' as strings; RFC 9309 2.2.2 decodes an "
        "escaped unreserved character before comparing (its own example: a rule "
        "/foo/bar/%62%61%7A matches /foo/bar/baz)"
    ),
    "GoogleOnly_IndexHTMLisDirectory#01": (
        "Google reads 'Allow: /dir/index.html' as also allowing /dir/; RFC 9309 matches a "
        "rule as written, so under 'Disallow: /' the URL /dir/ stays disallowed"
    ),
    "GoogleOnly_LineTooLong#02": _LINE_TOO_LONG,
    "GoogleOnly_LineTooLong#05": _LINE_TOO_LONG,
}


def _body(case: dict[str, Any]) -> bytes:
    if "robots_bytes_hex" in case:
        return bytes.fromhex(case["robots_bytes_hex"])
    return str(case["robots"]).encode("utf-8")


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_google_parser_case(case: dict[str, Any]) -> None:
    rules = parse(robots_text(_body(case)), case["agent"])
    expected = case["allowed"]
    if case["name"] in GOOGLE_DIFFERENCES:
        expected = not expected
    assert rules.allowed(case["url"]) is expected, case["note"]


def test_only_google_specific_cases_may_differ() -> None:
    specific = {case["name"] for case in CASES if case["google_specific"]}
    assert set(GOOGLE_DIFFERENCES) <= specific
    assert len(specific) == 88  # 83 expectations and 5 derived: the file is the one described
    assert len(CASES) - len(specific) == 79  # 62 and 17


# -- the readings protego missed, which fetched pages a site disallows ---------------------


@pytest.mark.parametrize(
    ("body", "url", "allowed"),
    [
        # A UTF-8 byte-order mark before the first group: the group still counts.
        (b"\xef\xbb\xbfUser-agent: *\nDisallow: /private\n", "/private/a", False),
        (b"\xef\xbb\xbfUser-agent: *\nDisallow: /private\n", "/public", True),
        # Google's parser skips a truncated mark too (not UTF-8 either way).
        (b"\xef\xbbUser-agent: *\nDisallow: /private\n", "/private/a", False),
        # Lines other than user-agent, allow and disallow never end or split a group (2.2.4).
        (
            b"User-agent: other\nCrawl-delay: 1\nUser-agent: trio-crawler\nDisallow: /x\n",
            "/x",
            False,
        ),
        (b"User-agent: trio-crawler\nSitemap: /s.xml\nUser-agent: *\nDisallow: /x\n", "/x", False),
        # A group written for the full User-Agent value: the token is cut at "/" (2.2.1).
        (b"User-agent: *\nDisallow: /\nUser-agent: trio-crawler/0.1\nAllow: /\n", "/a", True),
        (b"User-agent: Trio-Crawler/0.2 (+https://x)\nDisallow: /a\n", "/a", False),
        # ... but only at a character outside the token: another crawler's name is another.
        (b"User-agent: trio-crawler-beta\nDisallow: /\n", "/a", True),
        (b"User-agent: trio\nDisallow: /\n", "/a", True),
    ],
)
def test_rfc_readings_protego_missed(body: bytes, url: str, allowed: bool) -> None:
    assert RobotsRules.from_response(200, body).allowed("http://example.com" + url) is allowed


# -- what a store keeps -------------------------------------------------------------------

FILES = [
    b"",
    b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\nSitemap: http://example.com/s.xml\n",
    b"\xef\xbb\xbfUser-agent: trio-crawler\r\nDisallow: /*.pdf$\r\n",
    b"User-agent: *\nDisallow: /\xff\xfe\n",  # not UTF-8: U+FFFD, kept as such
]


@pytest.mark.parametrize("body", FILES)
def test_rules_survive_the_store_round_trip(body: bytes) -> None:
    rules = RobotsRules.from_response(200, body)
    again = RobotsRules.from_text(rules.as_text())
    assert again == rules
    assert (again.crawl_delay, again.sitemaps) == (rules.crawl_delay, rules.sitemaps)
    for path in ("/", "/private", "/a.pdf", "/\ufffd"):
        url = "http://example.com" + path
        assert again.allowed(url) is rules.allowed(url)


@pytest.mark.parametrize("body", [b"allow", b"deny"])
def test_a_file_that_is_a_stored_word_allows_everything_after_a_reload_too(body: bytes) -> None:
    # One bare word is no record, so the file allows everything, as an empty one does;
    # kept as the file it is, "deny" would read back as a 5xx's deny-all.
    rules = RobotsRules.from_response(200, body)
    again = RobotsRules.from_text(rules.as_text())
    assert rules.allowed("http://example.com/a")
    assert again.allowed("http://example.com/a")


@pytest.mark.parametrize(
    ("status", "allowed", "text"),
    [
        (200, False, "User-agent: *\nDisallow: /\n"),
        (204, False, "User-agent: *\nDisallow: /\n"),
        (302, True, "allow"),  # a redirect the core could not follow: unavailable
        (404, True, "allow"),  # 4xx: unavailable, everything allowed (RFC 9309 2.3.1.3)
        (429, False, "deny"),  # rate-limited: as a 5xx, until a later fetch succeeds
        (500, False, "deny"),  # 5xx: unreachable, everything disallowed (2.3.1.4)
        (503, False, "deny"),
    ],
)
def test_the_status_decides_whether_the_body_counts(status: int, allowed: bool, text: str) -> None:
    rules = RobotsRules.from_response(status, b"User-agent: *\nDisallow: /\n")
    assert rules.allowed("http://example.com/a") is allowed
    assert rules.as_text() == text
    assert RobotsRules.from_text(text) == rules


@pytest.mark.parametrize(
    ("text", "may_refuse"),
    [
        ("", False),
        ("User-agent: *\nDisallow:\n", False),  # the classic "crawl everything"
        ("User-agent: *\nAllow: /\n", False),
        ("User-agent: *\nAllow: /a\nAllow: /*.html$\nCrawl-delay: 1\n", False),
        ("User-agent: other\nDisallow: /\n", False),  # rules for another crawler alone
        ("User-agent: other\nDisallow: /\nUser-agent: *\nDisallow:\n", False),
        ("User-agent: *\nDisallow: /x\n", True),
        ("User-agent: *\nAllow: /\nDisallow: /*.pdf$\n", True),
        ("User-agent: other\nAllow: /\nUser-agent: trio-crawler\nDisallow: /\n", True),
        ("deny", True),  # a store's word for a 5xx
        ("allow", False),  # and for a 4xx
    ],
)
def test_rules_know_whether_they_can_refuse_anything(text: str, may_refuse: bool) -> None:
    rules = RobotsRules.from_text(text)
    assert rules.may_refuse is may_refuse
    urls = ["http://example.com/", "http://example.com/x", "http://example.com/a/b.pdf"]
    # Rules that cannot refuse allow every URL; the others refuse at least one of these.
    assert all(rules.allowed(url) for url in urls) is not may_refuse


def test_the_status_alone_decides_whether_rules_can_refuse() -> None:
    assert not RobotsRules.from_response(404, b"User-agent: *\nDisallow: /\n").may_refuse
    assert RobotsRules.from_response(503, b"").may_refuse
    assert RobotsRules.from_response(200, b"User-agent: *\nDisallow: /\n").may_refuse
    assert not RobotsRules().may_refuse


def test_the_default_rules_allow_everything_and_say_nothing_else() -> None:
    rules = RobotsRules()
    assert rules.allowed("http://example.com/a")
    assert (rules.crawl_delay, rules.sitemaps, rules.as_text()) == (None, (), "allow")


# -- Crawl-delay and Sitemap ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "delay"),
    [
        ("User-agent: *\nCrawl-delay: 2\n", 2.0),
        ("User-agent: *\nCrawl-delay: 0.5\nDisallow: /x\n", 0.5),
        # Our group's delay, not another's; with a group of our own, not the "*" one.
        ("User-agent: other\nCrawl-delay: 9\nAllow: /\nUser-agent: *\nCrawl-delay: 1\n", 1),
        ("User-agent: *\nCrawl-delay: 9\nAllow: /\nUser-agent: trio-crawler\nAllow: /\n", None),
        # Without a rule between them, the user-agent lines are one group (2.2.4).
        ("User-agent: other\nCrawl-delay: 9\nUser-agent: *\nCrawl-delay: 1\n", 9),
        # Groups that both apply are one group: the larger delay holds.
        ("User-agent: trio-crawler\nCrawl-delay: 3\nUser-agent: trio-crawler\nCrawl-delay: 5\n", 5),
        # Before any user-agent line, a delay belongs to no group.
        ("Crawl-delay: 4\nUser-agent: *\nDisallow: /x\n", None),
        ("User-agent: *\nCrawl-delay: -1\n", None),
        ("User-agent: *\nCrawl-delay: nan\n", None),
        ("User-agent: *\nCrawl-delay: inf\n", None),
        ("User-agent: *\nCrawl-delay: soon\n", None),
        ("User-agent: *\nCrawl-delay: \u0663\n", None),  # an Arabic-Indic three is no number here
    ],
)
def test_crawl_delay_is_the_groups_own(text: str, delay: float | None) -> None:
    assert RobotsRules.from_text(text).crawl_delay == delay


def test_sitemaps_are_every_sitemap_line_in_order_as_written() -> None:
    text = (
        "Sitemap: http://example.com/a.xml\n"
        "User-agent: other\nDisallow: /\nsitemap:/b.xml # a comment\n"
        "User-agent: *\nSitemap:\nSITEMAP http://example.com/c.xml\n"
    )
    assert RobotsRules.from_text(text).sitemaps == (
        "http://example.com/a.xml",
        "/b.xml",
        "http://example.com/c.xml",
    )


# -- parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "path", "allowed"),
    [
        # Google's leniency, where it obeys the file more faithfully: a missing colon, the
        # common misspellings of the keys, "* anything" as the "*" group.
        ("User-agent: *\nDisallow /x\n", "/x", False),
        ("User-agent: *\nDisallow /x:y\n", "/x:y", False),
        ("useragent: *\ndissallow: /x\n", "/x", False),
        ("User-agent: * (everyone)\nDisallow: /x\n", "/x", False),
        # A "*" inside a user-agent value is not a wildcard.
        ("User-agent: trio*\nDisallow: /x\n", "/x", True),
        # Three words without a colon are no record.
        ("User-agent: *\nDisallow /x /y\n", "/x", True),
        # Empty values: "Disallow:" disallows nothing, and still ends the user-agent lines.
        ("User-agent: *\nDisallow:\n", "/x", True),
        ("User-agent: other\nDisallow:\nUser-agent: trio-crawler\nDisallow: /x\n", "/x", False),
        ("User-agent: other\nDisallow:\nUser-agent: *\nDisallow: /x\n", "/x", False),
        ("User-agent: trio-crawler\nDisallow:\nUser-agent: *\nDisallow: /x\n", "/x", True),
        # Comments, blanks, and no line end at the end.
        ("  User-agent :\t*  # us\n\tDisallow : /x # not /x #y", "/x", False),
        ("User-agent: *\nDisallow: /x # /y\n", "/y", True),
        # /robots.txt itself is always allowed (2.2.2).
        ("User-agent: *\nDisallow: /\n", "/robots.txt", True),
        ("User-agent: *\nDisallow: /\n", "/robots.txt?x", False),
        # A form feed or U+2028 is not a line end (only CR, LF and CR LF are).
        ("User-agent: *\nDisallow: /x\x0cDisallow: /y\n", "/y", True),
        ("User-agent: *\nDisallow: /x\u2028y\n", "/x", True),
    ],
)
def test_parsing(text: str, path: str, allowed: bool) -> None:
    rules = RobotsRules.from_text(text)
    assert rules.allowed("http://example.com" + path) is allowed


@pytest.mark.parametrize(
    ("rule", "path", "matches"),
    [
        ("/fish", "/fish.html", True),
        ("/fish", "/Fish", False),
        ("/fish$", "/fish", True),
        ("/fish$", "/fish?x", False),
        ("/a$b", "/a$b", True),  # "$" anchors only at the end
        ("/*.php$", "/x/y.php", True),
        ("/*.php$", "/x/y.php5", False),
        ("/a*b*c", "/a-c-b-c", True),
        ("/a*b*c", "/a-c-b", False),
        ("/a**b", "/axb", True),
        ("*.pdf", "/x.pdf", True),
        ("/*b*$", "/ab", True),
        ("/*bc$", "/abcbc", True),
        ("/*bc$", "/ab", False),
        ("x", "/x", False),  # a rule is a path: it starts at the path's "/"
    ],
)
def test_wildcards_and_anchors(rule: str, path: str, matches: bool) -> None:
    rules = parse(f"User-agent: *\nDisallow: {rule}\n", PRODUCT_TOKEN)
    assert rules.allowed("http://example.com" + path) is not matches


# -- the one spelling rules and URLs are compared in ------------------------------------------


@pytest.mark.parametrize(
    ("path", "spelled"),
    [
        # RFC 9309 2.2.2's own table (its reserved characters are left as written: both
        # sides get the same spelling, and "/" must stay a separator).
        ("/foo/bar?baz=quz", "/foo/bar?baz=quz"),
        ("/foo/bar/\u30c4", "/foo/bar/%E3%83%84"),
        ("/foo/bar/%E3%83%84", "/foo/bar/%E3%83%84"),
        ("/foo/bar/%62%61%7A", "/foo/bar/baz"),
        # Hex in upper case; escaped reserved characters stay escaped.
        ("/a%e3%83%84", "/a%E3%83%84"),
        ("/a%2Fb%2fc", "/a%2Fb%2Fc"),
        ("/a%7e%2D%5f%2e", "/a~-_."),
        # What a URI cannot hold as it is is escaped; a "%" that escapes nothing stays.
        ('/a b"c{d}', "/a%20b%22c%7Bd%7D"),
        ("/100%", "/100%"),
        ("/%zz", "/%zz"),
        ("/*$", "/*$"),
    ],
)
def test_normalize(path: str, spelled: str) -> None:
    assert normalize(path) == spelled


def test_rules_and_urls_meet_in_one_spelling() -> None:
    rules = RobotsRules.from_text(
        "User-agent: *\nDisallow: /caf\u00e9\nDisallow: /%7Euser\nDisallow: /a b\n"
    )
    for path in ("/caf%C3%A9/menu", "/caf%c3%a9", "/~user/x", "/%7euser", "/a%20b"):
        assert not rules.allowed("http://example.com" + path), path
    assert rules.allowed("http://example.com/%2Fcaf%C3%A9")


# The expectations of robots_test.cc's TestGetPathParamsQuery (Apache-2.0: see
# tests/data/robotstxt/README.md).
@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("", "/"),
        ("http://www.example.com", "/"),
        ("http://www.example.com/", "/"),
        ("http://www.example.com/a", "/a"),
        ("http://www.example.com/a/", "/a/"),
        ("http://www.example.com/a/b?c=http://d.e/", "/a/b?c=http://d.e/"),
        ("http://www.example.com/a/b?c=d&e=f#fragment", "/a/b?c=d&e=f"),
        ("example.com", "/"),
        ("example.com/", "/"),
        ("example.com/a", "/a"),
        ("example.com/a/", "/a/"),
        ("example.com/a/b?c=d&e=f#fragment", "/a/b?c=d&e=f"),
        ("a", "/"),
        ("a/", "/"),
        ("/a", "/a"),
        ("a/b", "/b"),
        ("example.com?a", "/?a"),
        ("example.com/a;b#c", "/a;b"),
        ("//a/b/c", "/b/c"),
        ("http://example.com:8080?q", "/?q"),
    ],
)
def test_path_of(url: str, path: str) -> None:
    assert path_of(url) == path


# -- how much of a body is read ---------------------------------------------------------------


def test_at_most_500_kib_is_parsed_up_to_the_last_whole_line() -> None:
    # RFC 9309 2.5. The limit falls inside the second rule: its start ("Disallow: /cu")
    # is no rule, and nothing after it is read.
    head, early, cut_rule = b"User-agent: *\n", b"Disallow: /early\n", b"Disallow: /cut-in-half\n"
    padding = MAX_PARSED_SIZE - len(b"Disallow: /cu") - len(head) - len(early)
    comment = b"#" + b"x" * (padding - 2) + b"\n"
    body = head + comment + early + cut_rule + b"Disallow: /late\n"
    assert body.index(cut_rule) + len(b"Disallow: /cu") == MAX_PARSED_SIZE
    rules = RobotsRules.from_response(200, body)
    assert [rules.allowed(f"http://example.com/{path}") for path in ("early", "cu", "late")] == [
        False,
        True,
        True,
    ]
    assert len(rules.as_text()) == body.index(cut_rule)


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b"User-agent: *", "User-agent: *"),
        (b"\xef\xbb\xbfa", "a"),
        (b"\xefa", "a"),
        (b"\xef\x11\xbfa", "\x11\ufffda"),  # a mark's first byte, then garbage
        (b"a\xef\xbb\xbf", "a\ufeff"),  # a mark later on is no mark
        (b"a\xffb", "a\ufffdb"),
        (b"x" * MAX_PARSED_SIZE, "x" * MAX_PARSED_SIZE),  # exactly at the limit: whole
        (b"x" * (MAX_PARSED_SIZE + 1), ""),  # past it without a line end: nothing
        (b"x\r" + b"y" * MAX_PARSED_SIZE, "x\r"),
    ],
)
def test_robots_text(body: bytes, text: str) -> None:
    assert robots_text(body) == text

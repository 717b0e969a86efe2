"""URL normalisation and crawl scope (trio_crawler._urls): pure functions, no event loop.

Each table row is one behaviour a crawl depends on: the seen-set only works if every spelling
of a page normalises to one string, and a bad href must give None rather than raise.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_crawler._robots import origin_of
from trio_crawler._urls import LinkResolver, Scope, normalize_root, normalize_url, url_host

PAGE = "http://example.com/dir/page.html"


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        # Scheme and host case, default ports, empty path.
        pytest.param("HTTP://EXAMPLE.COM", "http://example.com/", id="scheme-host-case"),
        pytest.param("http://example.com/Path/A", "http://example.com/Path/A", id="path-case"),
        pytest.param("http://example.com:80/", "http://example.com/", id="default-http-port"),
        pytest.param("https://example.com:443/", "https://example.com/", id="default-https-port"),
        pytest.param("http://example.com:443/", "http://example.com:443/", id="https-port-on-http"),
        pytest.param("https://example.com:80/", "https://example.com:80/", id="http-port-on-https"),
        pytest.param("http://example.com:8080", "http://example.com:8080/", id="other-port"),
        pytest.param("http://example.com:0080/", "http://example.com/", id="port-leading-zeros"),
        pytest.param("http://example.com:/", "http://example.com/", id="empty-port"),
        pytest.param("http://example.com?q=1", "http://example.com/?q=1", id="empty-path-query"),
        # Fragments go; the query stays as written.
        pytest.param("http://example.com/a#top", "http://example.com/a", id="fragment"),
        pytest.param("http://example.com/#", "http://example.com/", id="empty-fragment"),
        pytest.param("http://example.com/a?b=2&a=1", "http://example.com/a?b=2&a=1", id="query"),
        # Dot segments are removed, as a browser does before it sends the request.
        pytest.param("http://example.com/a/../b", "http://example.com/b", id="dot-segments"),
        # Nothing else that could change the resource is touched.
        pytest.param("http://example.com/%7e", "http://example.com/%7e", id="escape-kept"),
        # Percent-encoding of what may not appear raw; existing escapes not doubled.
        pytest.param("http://example.com/a b", "http://example.com/a%20b", id="space-in-path"),
        pytest.param(
            "http://example.com/café?q=é",
            "http://example.com/caf%C3%A9?q=%C3%A9",
            id="non-ascii-utf8",
        ),
        pytest.param("http://example.com/%41%zz", "http://example.com/%41%zz", id="bad-escape"),
        pytest.param("http://example.com/\x01a", "http://example.com/%01a", id="control-in-path"),
        pytest.param("http://example.com/?q=a b", "http://example.com/?q=a%20b", id="space-query"),
        # WHATWG: strip leading/trailing C0 and space, remove tabs and newlines anywhere.
        pytest.param(" \t http://example.com/a \n", "http://example.com/a", id="outer-space"),
        pytest.param("http://exa\tmple.com/a\nb\r", "http://example.com/ab", id="inner-tabs"),
        pytest.param("\x00http://example.com/\x1f", "http://example.com/", id="outer-controls"),
        # IDN hosts become punycode, so the root and its links agree.
        pytest.param("http://München.de/", "http://xn--mnchen-3ya.de/", id="idn"),
        pytest.param("http://xn--mnchen-3ya.de/", "http://xn--mnchen-3ya.de/", id="punycode"),
        pytest.param("http://☃.com/", "http://xn--n3h.com/", id="idn-symbol"),
        # IP hosts: IPv6 in brackets, written canonically (RFC 5952).
        pytest.param("http://127.0.0.1:8000", "http://127.0.0.1:8000/", id="ipv4"),
        pytest.param("http://[::1]:80/a", "http://[::1]/a", id="ipv6"),
        pytest.param("http://[0:0:0:0:0:0:0:1]/", "http://[::1]/", id="ipv6-canonical"),
        pytest.param("http://[2001:DB8::A]:8080/", "http://[2001:db8::a]:8080/", id="ipv6-case"),
        # Userinfo is kept (percent-encoded where needed).
        pytest.param("http://u:p@example.com/", "http://u:p@example.com/", id="userinfo"),
        pytest.param("http://a@b@example.com/", "http://a%40b@example.com/", id="at-in-user"),
        # Invalid: not http(s), no host, bad port, bad host, unencodable.
        pytest.param("ftp://example.com/", None, id="ftp"),
        pytest.param("mailto:someone@example.com", None, id="mailto"),
        pytest.param("javascript:alert(1)", None, id="javascript"),
        pytest.param("data:text/html,hi", None, id="data"),
        pytest.param("example.com/a", None, id="no-scheme"),
        pytest.param("http://", None, id="no-host"),
        # WHATWG: an http(s) URL skips any number of slashes before its host.
        pytest.param("http:///path", "http://path/", id="empty-host"),
        pytest.param("http://[::1", None, id="unclosed-ipv6"),
        pytest.param("http://[::1]x/", None, id="text-after-ipv6"),
        pytest.param("http://[v1.x]/", None, id="ipvfuture"),
        pytest.param("http://[1.2.3.4]/", None, id="ipv4-in-brackets"),
        pytest.param("http://[fe80::1%25eth0]/", None, id="ipv6-zone-id"),
        pytest.param("http://[not-ip]/", None, id="brackets-not-ip"),
        pytest.param("http://example.com:99999/", None, id="port-out-of-range"),
        pytest.param("http://example.com:-1/", None, id="negative-port"),
        pytest.param("http://example.com:http/", None, id="port-not-number"),
        pytest.param("http://example.com:\uff18\uff10/", None, id="port-fullwidth-digits"),
        pytest.param("http://example.com:80:80/", None, id="two-ports"),
        pytest.param("http://exa mple.com/", None, id="space-in-host"),
        # WHATWG: a host is percent-decoded before it is checked.
        pytest.param("http://exa%41mple.com/", "http://exaample.com/", id="percent-in-host"),
        pytest.param("http://exa\x01mple.com/", None, id="control-in-host"),
        pytest.param("http://exa\x7fmple.com/", None, id="del-in-host"),
        pytest.param("http://exa|mple.com/", None, id="pipe-in-host"),
        # WHATWG (UTS-46 without DNS length checks): browsers follow these, DNS decides.
        pytest.param("http://example..com/", "http://example..com/", id="empty-label"),
        pytest.param(
            "http://" + "a" * 64 + ".com/", "http://" + "a" * 64 + ".com/", id="long-label"
        ),
        pytest.param("http://example.com/\ud800", None, id="lone-surrogate"),
        pytest.param("", None, id="empty"),
    ],
)
def test_normalize_url_absolute(href: str, expected: str | None) -> None:
    assert normalize_url(href) == expected


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        pytest.param("other.html", "http://example.com/dir/other.html", id="sibling"),
        pytest.param("../up.html", "http://example.com/up.html", id="parent"),
        pytest.param("/root.html", "http://example.com/root.html", id="absolute-path"),
        pytest.param("?q=1", "http://example.com/dir/page.html?q=1", id="query-only"),
        pytest.param("#frag", PAGE, id="fragment-only-is-the-page"),
        pytest.param("", PAGE, id="empty-is-the-page"),
        pytest.param("  ", PAGE, id="blank-is-the-page"),
        pytest.param("//other.org/x", "http://other.org/x", id="scheme-relative"),
        pytest.param("https://other.org", "https://other.org/", id="absolute"),
        pytest.param("mailto:a@b.c", None, id="mailto"),
        pytest.param("javascript:void(0)", None, id="javascript"),
        pytest.param("tel:+100", None, id="tel"),
    ],
)
def test_normalize_url_resolves_against_base(href: str, expected: str | None) -> None:
    assert normalize_url(href, PAGE) == expected


@pytest.mark.parametrize("base", ["", "not a url", "mailto:x@y.z", "/relative/base"])
def test_normalize_url_absolute_href_needs_no_base(base: str) -> None:
    assert normalize_url("http://example.com/a", base) == "http://example.com/a"


@pytest.mark.parametrize(
    "base", ["", "http://[::1", "http://example.com:99999/", "not a url", "mailto:x@y.z", "\ud800"]
)
def test_normalize_url_relative_href_with_a_bad_base_is_none(base: str) -> None:
    assert normalize_url("relative/page.html", base) is None


def test_normalize_url_keeps_a_very_long_url() -> None:
    href = "http://example.com/" + "a" * 10_000
    assert normalize_url(href) == href


# Parametrize tables in this file share a shape by design: one table per rule.
@pytest.mark.parametrize(
    "url",
    [
        "HTTP://Example.COM:80/a b?q=é#f",
        "http://[0::1]:8080/x",
        "http://München.de/ü",
        "https://u:p@example.com:443/%7e?x",
    ],
)
def test_normalize_url_is_idempotent(url: str) -> None:
    once = normalize_url(url)
    assert once is not None
    assert normalize_url(once) == once


@pytest.mark.parametrize(
    ("root", "expected"),
    [
        pytest.param("xkcd.com", "http://xkcd.com/", id="scheme-default"),
        pytest.param("localhost:8000", "http://localhost:8000/", id="host-port"),
        pytest.param("127.0.0.1:8000/a", "http://127.0.0.1:8000/a", id="ip-port-path"),
        pytest.param("https://Example.com", "https://example.com/", id="https-kept"),
        pytest.param("  example.com/a#frag  ", "http://example.com/a", id="strip-and-fragment"),
        pytest.param("München.de", "http://xn--mnchen-3ya.de/", id="idn"),
        pytest.param("[::1]:8000", "http://[::1]:8000/", id="ipv6"),
        pytest.param("ftp://example.com/", None, id="other-scheme"),
        pytest.param("", None, id="empty"),
        pytest.param("http://", None, id="no-host"),
        pytest.param("xkcd.com:80", "http://xkcd.com/", id="default-port"),
        pytest.param("https:/example.com/", "https://example.com/", id="one-slash"),
        pytest.param("HTTP:example.com", "http://example.com/", id="no-slashes"),
        pytest.param("0x7f.1:8000", "http://127.0.0.1:8000/", id="ipv4-number-form"),
        pytest.param("faß.example", "http://xn--fa-hia.example/", id="uts46"),
        pytest.param("192.168.0.257", None, id="bad-ipv4"),
    ],
)
def test_normalize_root(root: str, expected: str | None) -> None:
    assert normalize_root(root) == expected


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://example.com/", "example.com"),
        ("http://u:p@example.com:8080/", "example.com"),
        ("http://[::1]:8000/", "::1"),
        ("not a url", ""),
    ],
)
def test_url_host(url: str, host: str) -> None:
    assert url_host(url) == host


# Scope: (roots, strict, url, allowed). The roots' hosts are what links are matched against.
SCOPE_CASES = [
    # Strict: equal, or equal modulo one leading "www." either way.
    pytest.param(["http://example.com/"], True, "http://example.com/x", True, id="strict-equal"),
    pytest.param(["http://example.com/"], True, "http://www.example.com/", True, id="strict-www"),
    pytest.param(
        ["http://www.example.com/"], True, "http://example.com/", True, id="strict-no-www"
    ),
    pytest.param(["http://example.com/"], True, "http://foo.example.com/", False, id="strict-sub"),
    pytest.param(["http://example.com/"], True, "http://www.www.example.com/", False, id="two-www"),
    pytest.param(["http://foo.example.com/"], True, "http://example.com/", False, id="strict-up"),
    pytest.param(["http://example.com/"], True, "http://example.org/", False, id="strict-other"),
    pytest.param(
        ["http://example.com/"], True, "http://notexample.com/", False, id="strict-prefix"
    ),
    # Lenient: the last two labels, with the dot kept.
    pytest.param(["http://example.com/"], False, "http://foo.example.com/", True, id="lenient-sub"),
    pytest.param(["http://a.example.com/"], False, "http://b.example.com/", True, id="lenient-sib"),
    pytest.param(["http://example.com/"], False, "http://example.org/", False, id="lenient-other"),
    pytest.param(["http://x.a.bc/"], False, "http://x.ab.c/", False, id="lenient-dot-kept"),
    pytest.param(["http://x.ab.c/"], False, "http://x.a.bc/", False, id="lenient-dot-kept-2"),
    pytest.param(
        ["http://example.com./"], False, "http://evil.com./", False, id="lenient-root-dot"
    ),
    pytest.param(["http://localhost/"], False, "http://localhost:8000/", True, id="lenient-single"),
    # IP hosts match only themselves, in either mode, whatever the port.
    pytest.param(["http://127.0.0.1:8000/"], True, "http://127.0.0.1:9/", True, id="ip-same"),
    pytest.param(["http://127.0.0.1/"], False, "http://127.0.0.2/", False, id="ip-lenient"),
    pytest.param(["http://10.0.0.1/"], False, "http://x.0.1/", False, id="ip-labels"),
    pytest.param(["http://1.2.3.4/"], True, "http://www.1.2.3.4/", False, id="ip-www"),
    pytest.param(["http://[::1]:8000/"], True, "http://[::1]/a", True, id="ipv6-same"),
    pytest.param(["http://[::1]/"], False, "http://[::2]/", False, id="ipv6-other"),
    pytest.param(["http://[0:0::1]/"], True, "http://[::1]/", True, id="ipv6-spelling"),
    # Host case does not matter; the port is not part of host matching.
    pytest.param(["http://EXAMPLE.com/"], True, "http://example.COM/", True, id="host-case"),
    pytest.param(["http://example.com:8000/"], True, "https://example.com/", True, id="port"),
    # Only http(s).
    pytest.param(["http://example.com/"], True, "ftp://example.com/", False, id="ftp"),
    pytest.param(["http://example.com/"], False, "mailto:x@example.com", False, id="mailto"),
    # Every root contributes its host, including one written with a fragment, without a
    # scheme, or with an IDN host.
    pytest.param(["http://a.com/", "http://b.com/x#frag"], True, "http://b.com/", True, id="frag"),
    pytest.param(["http://a.com/", "http://b.com/"], True, "http://a.com/", True, id="first-root"),
    pytest.param(["xkcd.com"], True, "http://xkcd.com/1/", True, id="root-no-scheme"),
    pytest.param(["http://München.de/"], True, "http://xn--mnchen-3ya.de/", True, id="root-idn"),
]


@pytest.mark.parametrize(("roots", "strict", "url", "allowed"), SCOPE_CASES)
def test_scope_host_matching(roots: list[str], strict: bool, url: str, allowed: bool) -> None:
    assert Scope(roots, strict=strict).allows(url) is allowed


@pytest.mark.parametrize(
    ("pattern", "url", "allowed"),
    [
        # re.search, not re.match: the pattern may match anywhere in the URL.
        pytest.param(r"private", "http://example.com/a/private/b", False, id="search-middle"),
        pytest.param(r"^/private", "http://example.com/private", True, id="anchored-to-url"),
        pytest.param(r"\.pdf$", "http://example.com/doc.pdf", False, id="suffix"),
        pytest.param(r"\.pdf$", "http://example.com/doc.pdf?x=1", True, id="suffix-with-query"),
        pytest.param(r"www\.", "http://www.example.com/", False, id="host-part"),
        pytest.param(r"nomatch", "http://example.com/", True, id="no-match"),
    ],
)
def test_scope_exclude_uses_re_search(pattern: str, url: str, allowed: bool) -> None:
    scope = Scope(["http://example.com/"], exclude=re.compile(pattern))
    assert scope.allows(url) is allowed


def test_scope_exclude_only_narrows() -> None:
    # A URL out of scope by host stays out even if the pattern does not match it.
    scope = Scope(["http://example.com/"], exclude=re.compile("nothing"))
    assert not scope.allows("http://other.org/")


@pytest.mark.parametrize(
    ("patterns", "url", "allowed"),
    [
        pytest.param([r"/blog/"], "http://example.com/blog/1", True, id="one-matches"),
        pytest.param([r"/blog/"], "http://example.com/shop/1", False, id="none-matches"),
        pytest.param([r"/blog/", r"\.pdf$"], "http://example.com/a.pdf", True, id="either"),
        pytest.param([r"^http://example"], "http://example.com/x", True, id="whole-url"),
        # Only narrows: a URL out of scope by host stays out, whatever matches it.
        pytest.param([r"other"], "http://other.org/", False, id="host-first"),
    ],
)
def test_scope_include_needs_one_pattern_to_match(
    patterns: list[str], url: str, allowed: bool
) -> None:
    scope = Scope(["http://example.com/"], include=[re.compile(p) for p in patterns])
    assert scope.allows(url) is allowed


@pytest.mark.parametrize(
    ("roots", "url", "allowed"),
    [
        # As wget -np: the root's directory and below, on its host.
        pytest.param(["http://h/a/b.html"], "http://h/a/c.html", True, id="sibling"),
        pytest.param(["http://h/a/b.html"], "http://h/a/x/y", True, id="below"),
        pytest.param(["http://h/a/b.html"], "http://h/a/", True, id="the-directory"),
        pytest.param(["http://h/a/b.html"], "http://h/a", False, id="no-slash-is-a-file"),
        pytest.param(["http://h/a/b.html"], "http://h/c", False, id="elsewhere"),
        pytest.param(["http://h/a/b.html"], "http://h/ab/", False, id="prefix-not-directory"),
        pytest.param(["http://h/a/b.html"], "http://h/", False, id="parent"),
        pytest.param(["http://h/a/"], "http://h/c?next=/a/", False, id="slash-in-query"),
        pytest.param(["http://h/a/"], "https://h:8443/a/x", True, id="scheme-port-aside"),
        # A root without a trailing slash names a file at the top: the whole host.
        pytest.param(["http://h/a"], "http://h/c/d", True, id="file-at-top"),
        # On that root's host: another root host is held to its own roots' directories.
        pytest.param(["http://h/a/", "http://g/b/"], "http://g/a/x", False, id="other-host"),
        pytest.param(["http://h/a/", "http://h/b/c"], "http://h/b/x", True, id="second-root"),
        pytest.param(
            ["http://example.com/a/"], "http://www.example.com/a/x", False, id="www-is-another"
        ),
    ],
)
def test_scope_no_parent_is_wgets(roots: list[str], url: str, allowed: bool) -> None:
    assert Scope(roots, strict=False, no_parent=True).allows(url) is allowed
    assert Scope(roots, strict=False).allows(url), "in scope without --no-parent"


def test_sitemaps_are_not_narrowed_by_include_or_no_parent() -> None:
    """/sitemap.xml is rarely under a root's directory or like the pages wanted: a
    sitemap is held to the host rule and --exclude only, its pages to everything."""
    scope = Scope(
        ["http://h/docs/"],
        exclude=re.compile("private"),
        include=[re.compile("/docs/")],
        no_parent=True,
    )
    assert scope.allows("http://h/sitemap.xml", as_page=False)
    assert not scope.allows("http://h/sitemap.xml")
    assert not scope.allows("http://h/private.xml", as_page=False)
    assert not scope.allows("http://other/sitemap.xml", as_page=False)


def test_scope_of_normalized_roots_takes_them_as_they_are() -> None:
    """A CrawlConfig's roots are normalised already: not again (3 us each, and -i gives
    hundreds of thousands)."""
    roots = [f"http://h{n % 7}.example/d{n % 3}/p{n}" for n in range(1000)]
    scope = Scope(roots, normalized=True, no_parent=True)
    assert scope.root_hosts == {f"h{n}.example" for n in range(7)}
    assert scope.allows("http://h3.example/d2/new")
    assert not scope.allows("http://h3.example/elsewhere")


@pytest.mark.parametrize(
    ("roots", "hosts"),
    [
        pytest.param(["http://a/a#frag", "http://b:81/"], {"a", "b"}, id="fragment-and-port"),
        pytest.param(["http://A.example.com/"], {"a.example.com"}, id="lower-cased"),
        pytest.param(["http://[::1]:8000/"], {"::1"}, id="ipv6-no-brackets"),
        pytest.param(["ftp://x/", "http://"], set(), id="unusable-roots-dropped"),
    ],
)
def test_scope_root_hosts(roots: list[str], hosts: set[str]) -> None:
    assert Scope(roots).root_hosts == hosts


@pytest.mark.parametrize(
    ("strict", "host", "allowed"),
    [
        (True, "WWW.Example.COM", True),
        (True, "sub.example.com", False),
        (False, "SUB.EXAMPLE.COM", True),
        (False, "", False),
        (True, "", False),
    ],
)
def test_scope_host_okay(strict: bool, host: str, allowed: bool) -> None:
    assert Scope(["http://example.com/"], strict=strict).host_okay(host) is allowed


# The link resolver's fast path must give exactly normalize_url's answer. Hrefs are drawn
# from the characters that steer it: dots and slashes (dot segments), "?" and "#", ":"
# (schemes), "%" and characters that need encoding (the general path).
_HREF_PIECES = st.sampled_from(
    ["", ".", "..", "/", "//", "?", "#", ":", ";", "%", "%41", "a", "b.html", "x=1", " ", "é", "\\"]
)
_BASES = [
    "http://example.com/",
    "http://example.com/a/b/c.html?q=1",
    "https://example.com:8443/dir/",
    "http://[::1]/x/y",
    "http://user@example.com/p",
    "http://example.com/a;p/b;q?r",
]


@settings(max_examples=500, deadline=None)
@given(pieces=st.lists(_HREF_PIECES, max_size=8), base=st.sampled_from(_BASES))
def test_link_resolver_agrees_with_normalize_url(pieces: list[str], base: str) -> None:
    href = "".join(pieces)
    assert LinkResolver(base).resolve(href) == normalize_url(href, base)


# Absolute hrefs: the fast path takes those already in normalize_url's spelling, so hosts
# and ports are drawn near its edges (upper case, empty and 63/64-character labels, a
# trailing dot, IDNA, default and out-of-range ports, leading zeros, userinfo).
_ABSOLUTE_SCHEMES = st.sampled_from(["http://", "https://", "HTTP://", "http:", "ftp://"])
_HOST_PIECES = st.sampled_from(
    ["a", "example", "com", ".", "-", "_", "xn--nxasmq6b", "E", "é", "1", "127.0.0.1", "@"]
) | st.sampled_from(["user:pw@", "[::1]", "%41", "a" * 63, "b" * 64])
_PORTS = st.sampled_from(["", ":", ":80", ":443", ":8080", ":0080", ":65535", ":65536", ":0"])


@settings(max_examples=1000, deadline=None)
@given(
    scheme=_ABSOLUTE_SCHEMES,
    host=st.lists(_HOST_PIECES, max_size=5),
    port=_PORTS,
    pieces=st.lists(_HREF_PIECES, max_size=6),
    base=st.sampled_from(_BASES),
)
def test_link_resolver_agrees_with_normalize_url_on_absolute_hrefs(
    scheme: str, host: list[str], port: str, pieces: list[str], base: str
) -> None:
    href = scheme + "".join(host) + port + "".join(pieces)
    assert LinkResolver(base).resolve(href) == normalize_url(href, base)


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("http://example.com", "http://example.com/"),
        ("https://docs.python.org/3/?q#x", "https://docs.python.org/3/?q"),
        ("http://h:8080?x", "http://h:8080/?x"),
        ("http://h/a?", "http://h/a?"),  # WHATWG keeps an empty query: "GET /a?" is sent
        ("http://h:80/./x", "http://h/x"),
        ("http://Example.com/", "http://example.com/"),
        ("http://a..b/", "http://a..b/"),
        ("https://h:99999/", None),
        ("http://" + "b" * 64 + ".com/", "http://" + "b" * 64 + ".com/"),  # no DNS length check
        ("http://" + "b" * 63 + ".com/", "http://" + "b" * 63 + ".com/"),
    ],
)
def test_link_resolver_absolute_examples(href: str, expected: str | None) -> None:
    assert LinkResolver("http://example.com/a/").resolve(href) == expected


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("p/1.html", "http://example.com/a/b/p/1.html"),
        ("../up", "http://example.com/a/up"),
        ("../../../../g", "http://example.com/g"),
        ("/x/./y/../z", "http://example.com/x/z"),
        ("?page=2#top", "http://example.com/a/b/c.html?page=2"),
        ("", "http://example.com/a/b/c.html?q=1"),
        ("mailto:x@example.com", None),
        ("//other.org/p", "http://other.org/p"),
    ],
)
def test_link_resolver_examples(href: str, expected: str | None) -> None:
    assert LinkResolver("http://example.com/a/b/c.html?q=1").resolve(href) == expected


# -- the URL Standard's spelling: origins, hosts, roots and scope -------------------------
# The seen set, the scope check and robots.txt all read normalize_url's output, so each must
# read that spelling right. (Case tables shaped like the ones above, on purpose.)


@pytest.mark.parametrize(
    ("href", "origin", "host"),
    [
        ("http://u:p@Host:8080/x", "http://host:8080", "host"),
        # "@" and ":" in userinfo are percent-encoded, so the last "@" ends it.
        ("http://a@b:c@d@h/", "http://h", "h"),
        ("https://user@example.com:443/robots.txt", "https://example.com", "example.com"),
        ("http://0x7f.1:8000/a", "http://127.0.0.1:8000", "127.0.0.1"),
        ("http://[0::1]:80/", "http://[::1]", "::1"),
        ("http://user:pw@[::1]:81/", "http://[::1]:81", "::1"),
        ("https://faß.ExAmPlE/", "https://xn--fa-hia.example", "xn--fa-hia.example"),
        ("http://example.com./a?b", "http://example.com.", "example.com."),
    ],
)
def test_origin_and_host_of_the_standards_spelling(href: str, origin: str, host: str) -> None:
    url = normalize_url(href)
    assert url is not None
    assert origin_of(url) == origin
    assert url_host(url) == host


@pytest.mark.parametrize(
    ("roots", "strict", "url", "allowed"),
    [
        # Every spelling of an IPv4 address is one host, and it matches only itself.
        pytest.param(["http://0x7f.1/"], True, "http://2130706433/x", True, id="ipv4-forms"),
        pytest.param(["http://127.0.0.1/"], True, "http://0177.0.0.1:8/", True, id="octal"),
        pytest.param(["http://127.0.0.1/"], False, "http://127.0.0.2/", False, id="ipv4-other"),
        # IDNA per UTS-46: "ß" is kept (IDNA 2003 made it "ss", another host).
        pytest.param(["https://faß.example/"], True, "https://www.xn--fa-hia.example/", True),
        pytest.param(["https://faß.example/"], True, "https://fass.example/", False, id="ss"),
        pytest.param(["http://example.com/"], False, "http://A.B.EXAMPLE.COM/", True, id="case"),
    ],
)
def test_scope_on_the_standards_hosts(
    roots: list[str], strict: bool, url: str, allowed: bool
) -> None:
    normalized = normalize_url(url)
    assert normalized is not None
    assert Scope(roots, strict=strict).allows(normalized) is allowed


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.1", True),
        ("0x7F.0.0.1", True),
        ("2130706433", True),
        ("127.0.0.2", False),
        ("www.127.0.0.1", False),  # no host at all: its last label is a number
        ("127.0.0.1/x", False),  # not a host: "/" would end it
        ("u@127.0.0.1", False),
    ],
)
def test_host_okay_reads_any_spelling_of_a_host(host: str, allowed: bool) -> None:
    assert Scope(["http://127.0.0.1:8000/"]).host_okay(host) is allowed

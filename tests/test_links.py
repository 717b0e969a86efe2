"""Charset choice and link extraction (trio_crawler._links): pure functions, no event loop.

The web sends anything, so besides the normal cases these tests feed the extractor bad
charsets, undecodable bytes and malformed hrefs, and a hypothesis property checks that
arbitrary input never raises and only ever yields absolute http(s) URLs.
"""

from __future__ import annotations

import encodings.aliases
import html
from urllib.parse import quote, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_crawler._links import (
    PARSED_MEDIA_TYPES,
    choose_encoding,
    extract_links,
    parse_content_type,
)
from trio_crawler._urls import normalize_url

PAGE = "http://example.com/dir/page.html"


def links_of(markup: str, page_url: str = PAGE, encoding: str = "utf-8") -> set[str]:
    """The links of a page written as text and sent as ``encoding``."""
    return extract_links(markup.encode(encoding), page_url, encoding)


def test_parsed_media_types() -> None:
    assert {
        "text/html",
        "application/xhtml+xml",
        "application/xml",
        "text/xml",
    } == PARSED_MEDIA_TYPES


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param(None, (None, None), id="missing"),
        pytest.param("", (None, None), id="empty"),
        pytest.param("   ", (None, None), id="blank"),
        pytest.param("text/html", ("text/html", None), id="no-params"),
        pytest.param("Text/HTML; Charset=UTF-8", ("text/html", "utf-8"), id="case"),
        pytest.param('text/html; charset="ISO-8859-1"', ("text/html", "iso-8859-1"), id="dquote"),
        pytest.param("text/html;charset='utf-8'", ("text/html", "utf-8"), id="squote-no-space"),
        pytest.param(
            " text/html ; boundary=x ;  charset = Shift_JIS ; q=1",
            ("text/html", "shift_jis"),
            id="whitespace-and-other-params",
        ),
        pytest.param("application/xhtml+xml; q=1", ("application/xhtml+xml", None), id="other"),
        pytest.param("text/html; charset=", ("text/html", None), id="empty-charset"),
        pytest.param('text/html; charset=""', ("text/html", None), id="empty-quoted-charset"),
        pytest.param("text/html; charset", ("text/html", None), id="charset-without-value"),
        pytest.param("text/html; notcharset=utf-8", ("text/html", None), id="similar-name"),
        pytest.param("; charset=utf-8", (None, "utf-8"), id="params-only"),
        pytest.param("text/html; charset=foobar", ("text/html", "foobar"), id="unknown-kept"),
    ],
)
def test_parse_content_type(header: str | None, expected: tuple[str | None, str | None]) -> None:
    assert parse_content_type(header) == expected


PADDING = b"<!doctype html><title>x</title>" + b" " * 1100  # pushes a <meta> past 1024 bytes


@pytest.mark.parametrize(
    ("body", "header_charset", "expected"),
    [
        # The header charset wins when Python can decode with it.
        pytest.param(b'<meta charset="iso-8859-1">', "utf-8", "utf-8", id="header-wins"),
        pytest.param(b"", "ISO-8859-1", "iso-8859-1", id="header-lower-cased"),
        pytest.param(b"", "latin1", "latin1", id="header-name-as-found"),
        pytest.param(b"", " 'Shift_JIS' ", "shift_jis", id="header-stripped"),
        pytest.param(b"", "ascii", "ascii", id="header-ascii"),
        pytest.param(b"", "utf-16", "utf-16", id="header-utf16-trusted"),
        # An unknown or unusable header charset falls back to the meta, then UTF-8.
        pytest.param(b"<meta charset=windows-1251>", "foobar", "windows-1251", id="bogus-meta"),
        pytest.param(b"<p>hi", "foobar", "utf-8", id="bogus-utf8"),
        pytest.param(b"<meta charset=koi8-r>", "", "koi8-r", id="empty-header-charset"),
        pytest.param(b"", "", "utf-8", id="empty-everything"),
        pytest.param(b"<meta charset=koi8-r>", "rot13", "koi8-r", id="bytes-codec-rot13"),
        pytest.param(b"", "base64", "utf-8", id="bytes-codec-base64"),
        pytest.param(b"", "idna", "utf-8", id="idna-not-a-charset"),
        pytest.param(b"", "undefined", "utf-8", id="undefined-codec"),
        pytest.param(b"", "unicode_escape", "utf-8", id="escape-codec"),
        pytest.param(b"", "utf\x00-8", "utf-8", id="nul-in-label"),
        pytest.param(b"", "x" * 10_000, "utf-8", id="huge-label"),
        # Both meta forms, any case and quoting.
        pytest.param(b'<meta charset="ISO-8859-1">', None, "iso-8859-1", id="meta-charset"),
        pytest.param(b"<META CharSet='KOI8-R'>", None, "koi8-r", id="meta-charset-case"),
        pytest.param(b"<meta charset=latin1 />", None, "latin1", id="meta-unquoted"),
        pytest.param(b"<meta/charset=latin1>", None, "latin1", id="meta-slash"),
        pytest.param(
            b'<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">',
            None,
            "windows-1251",
            id="meta-http-equiv",
        ),
        pytest.param(
            b"<meta content='text/html;charset=\"Shift_JIS\"' HTTP-EQUIV=content-type>",
            None,
            "shift_jis",
            id="meta-http-equiv-reversed-quoted",
        ),
        pytest.param(
            b'<meta name="description" content="text/html; charset=koi8-r">',
            None,
            "utf-8",
            id="content-without-http-equiv",
        ),
        pytest.param(b"<metadata charset=koi8-r>", None, "utf-8", id="not-a-meta"),
        pytest.param(b"<!-- <meta charset=koi8-r> -->", None, "utf-8", id="meta-in-comment"),
        pytest.param(b"<!-- unterminated <meta charset=koi8-r>", None, "utf-8", id="open-comment"),
        # The first usable meta counts; unknown labels are skipped, as in the HTML standard.
        pytest.param(
            b"<meta charset=koi8-r><meta charset=latin1>", None, "koi8-r", id="first-meta"
        ),
        pytest.param(
            b"<meta charset=foobar><meta charset=latin1>", None, "latin1", id="skip-unknown"
        ),
        pytest.param(b'<meta charset="">', None, "utf-8", id="meta-empty"),
        # A <meta> read as ASCII cannot be UTF-16: the standard says UTF-8.
        pytest.param(b"<meta charset=utf-16le>", None, "utf-8", id="meta-utf16"),
        # Only the first 1024 bytes are scanned.
        pytest.param(PADDING + b"<meta charset=koi8-r>", None, "utf-8", id="meta-too-late"),
        pytest.param(
            b" " * (1024 - len(b"<meta charset=koi8-r>")) + b"<meta charset=koi8-r>",
            None,
            "koi8-r",
            id="meta-ends-at-1024",
        ),
        pytest.param(b"", None, "utf-8", id="default"),
        pytest.param(b"\xff\xfe\x00<garbage", None, "utf-8", id="garbage-body"),
    ],
)
def test_choose_encoding(body: bytes, header_charset: str | None, expected: str) -> None:
    assert choose_encoding(body, header_charset) == expected


def test_extract_collects_a_area_and_link_only() -> None:
    markup = """
        <link rel="stylesheet" href="/style.css">
        <a href="/a">a</a>
        <map><area href="/area" shape="rect"></map>
        <img src="/img.png"><script src="/s.js"></script><iframe src="/frame"></iframe>
        <form action="/form"></form><div href="/div"></div><a name="anchor">no href</a>
    """
    assert links_of(markup) == {
        "http://example.com/style.css",
        "http://example.com/a",
        "http://example.com/area",
    }


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        pytest.param(
            '<base href="http://other.org/x/"><a href="y">',
            {"http://other.org/x/y"},
            id="absolute-base",
        ),
        pytest.param('<base href="sub/"><a href="y">', {"http://example.com/dir/sub/y"}, id="rel"),
        pytest.param('<base href="/"><a href="y">', {"http://example.com/y"}, id="root-base"),
        pytest.param(
            '<base href="/first/"><base href="/second/"><a href="y">',
            {"http://example.com/first/y"},
            id="first-base-wins",
        ),
        pytest.param(
            '<base target="_blank"><base href="/b/"><a href="y">',
            {"http://example.com/b/y"},
            id="first-base-with-href",
        ),
        pytest.param(
            '<a href="y"></a><base href="/late/">',
            {"http://example.com/late/y"},
            id="base-after-links-still-applies",
        ),
        pytest.param(
            '<base href="javascript:x"><a href="y">',
            {"http://example.com/dir/y"},
            id="unusable-base-ignored",
        ),
        pytest.param('<base href="/b/#f"><a href="">', {"http://example.com/b/"}, id="base-frag"),
    ],
)
def test_extract_honours_base_href(markup: str, expected: set[str]) -> None:
    assert links_of(markup) == expected


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        # Resolution against the page URL.
        pytest.param("other.html", {"http://example.com/dir/other.html"}, id="sibling"),
        pytest.param("../up.html", {"http://example.com/up.html"}, id="parent"),
        pytest.param("/root", {"http://example.com/root"}, id="absolute-path"),
        pytest.param("?q=1", {PAGE + "?q=1"}, id="query"),
        pytest.param("//cdn.example.net/x", {"http://cdn.example.net/x"}, id="scheme-relative"),
        pytest.param("https://other.org", {"https://other.org/"}, id="absolute"),
        # The empty href and a bare fragment are the page itself.
        pytest.param("", {PAGE}, id="empty"),
        pytest.param("#top", {PAGE}, id="fragment-only"),
        pytest.param("/a#b", {"http://example.com/a"}, id="fragment-dropped"),
        # The parser decodes character references.
        pytest.param("a?x=1&amp;y=2", {"http://example.com/dir/a?x=1&y=2"}, id="amp"),
        pytest.param("&#47;slash", {"http://example.com/slash"}, id="numeric-ref"),
        # Other schemes are skipped.
        pytest.param("mailto:someone@example.com", set(), id="mailto"),
        pytest.param("javascript:void(0)", set(), id="javascript"),
        pytest.param("ftp://example.com/file", set(), id="ftp"),
        pytest.param("tel:+100", set(), id="tel"),
        pytest.param("data:text/html,<p>", set(), id="data"),
        # Malformed hrefs are dropped or repaired, never raised.
        pytest.param("http://[::1", set(), id="unclosed-ipv6"),
        pytest.param("http://example.com:99999/", set(), id="bad-port"),
        pytest.param("http://exa\x01mple.com/", set(), id="control-in-host"),
        pytest.param("/a\x01b", {"http://example.com/a%01b"}, id="control-in-path"),
        pytest.param("/a b c", {"http://example.com/a%20b%20c"}, id="spaces"),
        pytest.param("  /padded\n", {"http://example.com/padded"}, id="outer-whitespace"),
        pytest.param("/%zz", {"http://example.com/%zz"}, id="bad-percent-escape"),
        pytest.param("http://bücher.de/", {"http://xn--bcher-kva.de/"}, id="idn"),
        pytest.param(
            "http://" + "a" * 64 + ".com/", {"http://" + "a" * 64 + ".com/"}, id="long-label"
        ),
    ],
)
def test_extract_resolves_hrefs(href: str, expected: set[str]) -> None:
    assert links_of(f'<a href="{href}">x</a>') == expected


def test_extract_valueless_href_is_the_page() -> None:
    # <a href> has the empty string as its value in HTML.
    assert links_of("<a href>x</a>") == {PAGE}


def test_extract_collapses_duplicates() -> None:
    markup = """
        <a href="/a">1</a><a href="/a#x">2</a><a href="http://example.com/a">3</a>
        <a href="../a">4</a><a href="HTTP://EXAMPLE.COM:80/a">5</a><link href="/a">
    """
    assert links_of(markup) == {"http://example.com/a"}


def test_extract_keeps_a_very_long_url() -> None:
    url = "http://example.com/" + "a" * 10_000
    assert links_of(f'<a href="{url}">x</a>') == {url}


# Same shape as test_urls.py's tables by design: one parametrized table per rule.
@pytest.mark.parametrize(
    ("encoding", "path"),
    [
        pytest.param("iso-8859-1", "café", id="latin1"),
        pytest.param("windows-1251", "привет", id="cyrillic"),
        pytest.param("shift_jis", "日本語", id="japanese"),
        pytest.param("koi8-r", "мир", id="koi8"),
    ],
)
def test_extract_decodes_non_utf8_pages(encoding: str, path: str) -> None:
    # Bytes in the page's charset are decoded, then the path is percent-encoded as UTF-8.
    body = f'<a href="/{path}">x</a>'.encode(encoding)
    assert body != f'<a href="/{path}">x</a>'.encode()  # really not UTF-8
    expected = "http://example.com/" + quote(path, encoding="utf-8")
    assert "%" in expected
    assert extract_links(body, PAGE, encoding) == {expected}


def test_extract_with_the_wrong_charset_still_finds_the_link() -> None:
    # windows-1251 bytes read as UTF-8 become U+FFFD: a wrong link, but no exception.
    body = '<a href="/привет">x</a>'.encode("windows-1251")
    links = extract_links(body, PAGE, "utf-8")
    assert len(links) == 1
    assert links.pop().startswith("http://example.com/%EF%BF%BD")


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        pytest.param(b'\xff\xfe<a href="/ok">\x80\xc3(</a>', "utf-8", id="invalid-utf8"),
        pytest.param(b'<a href="/ok">\x81\xff\xa0</a>', "shift_jis", id="invalid-shift-jis"),
        pytest.param(b'<a href="/ok">\xd8\x00</a>', "ascii", id="non-ascii-in-ascii"),
        pytest.param(b'<a href="/ok"></a>', "foobar", id="unknown-codec-means-utf8"),
        pytest.param(b'<a href="/ok"></a>', "rot13", id="bytes-codec-means-utf8"),
        pytest.param(b'<a href="/ok"></a>', "idna", id="idna-means-utf8"),
        pytest.param(b'<a href="/ok">\\q\\u12</a>', "unicode_escape", id="escape-codec"),
        pytest.param(b'<a href="/ok"></a>', "", id="empty-encoding"),
        pytest.param(b'<a href="/ok"></a>', "utf\x00", id="nul-in-encoding"),
    ],
)
def test_extract_survives_bytes_invalid_in_the_charset(body: bytes, encoding: str) -> None:
    assert extract_links(body, PAGE, encoding) == {"http://example.com/ok"}


def test_extract_from_utf16_page_declared_in_header() -> None:
    body = '<a href="/ütf16">x</a>'.encode("utf-16")
    assert extract_links(body, PAGE, "utf-16") == {"http://example.com/%C3%BCtf16"}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(b"", set(), id="empty"),
        pytest.param(b"\x00" * 100, set(), id="nuls"),
        # A tag cut off by the end of the body is dropped, as by a browser.
        pytest.param(b"<a href=", set(), id="truncated-tag"),
        pytest.param(b'<a href="/unterminated', set(), id="unterminated-value"),
        pytest.param(b"<" * 10_000, set(), id="many-lt"),
        pytest.param(b"<div>" * 5_000 + b'<a href="/deep">', {"/deep"}, id="deep-nesting"),
        pytest.param(b"<svg><a href='/in-svg'/></svg>", {"/in-svg"}, id="svg"),
        pytest.param(b'<a href="/x"><a href="/y">', {"/x", "/y"}, id="unclosed-a"),
        pytest.param(b"<table><a href=/t></table>", {"/t"}, id="misnested"),
    ],
)
def test_extract_from_broken_markup(body: bytes, expected: set[str]) -> None:
    assert extract_links(body, PAGE, "utf-8") == {"http://example.com" + p for p in expected}


@pytest.mark.parametrize(
    ("page_url", "expected"),
    [
        # Relative links cannot be resolved without a usable page URL; absolute ones can...
        ("", {"http://other.org/abs"}),
        ("not a url", {"http://other.org/abs"}),
        ("mailto:x@y.z", {"http://other.org/abs"}),
        ("\ud800", {"http://other.org/abs"}),
        ("http://[::1", {"http://other.org/abs"}),
    ],
)
def test_extract_with_a_bad_page_url(page_url: str, expected: set[str]) -> None:
    body = b'<a href="/relative"></a><a href="http://other.org/abs"></a>'
    assert extract_links(body, page_url, "utf-8") == expected


def test_extract_from_xml_documents() -> None:
    body = b"""<?xml version="1.0" encoding="utf-8"?>
        <rss version="2.0"><channel>
          <link href="http://example.com/feed-link"/>
          <item><a href="/item">x</a><link>http://example.com/text-link</link></item>
        </channel></rss>"""
    # Element names are matched as HTML would; <link>text</link> has no href, so no link.
    assert extract_links(body, PAGE, "utf-8") == {
        "http://example.com/feed-link",
        "http://example.com/item",
    }


def test_extract_from_xhtml() -> None:
    body = b"""<?xml version="1.0"?>
        <html xmlns="http://www.w3.org/1999/xhtml"><head><base href="/x/"/></head>
        <body><a href="y"/><area href="z"/></body></html>"""
    assert extract_links(body, PAGE, "utf-8") == {
        "http://example.com/x/y",
        "http://example.com/x/z",
    }


def test_extract_a_page_of_100_000_links() -> None:
    count = 100_000
    body = "".join(f'<li><a href="/p/{n}?q={n}&amp;r=1">{n}</a></li>' for n in range(count))
    links = extract_links(f"<ul>{body}</ul>".encode(), PAGE, "utf-8")
    assert len(links) == count
    assert "http://example.com/p/99999?q=99999&r=1" in links


def is_absolute_http_url_without_fragment(link: str) -> bool:
    parts = urlsplit(link)
    return parts.scheme in {"http", "https"} and bool(parts.hostname) and "#" not in link


# Every codec name Python knows, plus a few it does not: what a server might declare.
ENCODINGS = [
    *sorted({*encodings.aliases.aliases, *encodings.aliases.aliases.values()}),
    "foobar",
    "",
    "utf-8",
]


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.binary(max_size=200),
    href=st.text(max_size=100),
    suffix=st.binary(max_size=200),
    encoding=st.sampled_from(ENCODINGS) | st.text(max_size=20),
)
def test_property_arbitrary_input_never_raises(
    prefix: bytes, href: str, suffix: bytes, encoding: str
) -> None:
    quoted = html.escape(href, quote=True).encode("utf-8", "surrogatepass")
    body = prefix + b'<a href="' + quoted + b'">x</a>' + suffix
    links = extract_links(body, PAGE, encoding)
    assert all(is_absolute_http_url_without_fragment(link) for link in links)
    assert isinstance(choose_encoding(body, encoding), str)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=2000), page_url=st.text(max_size=50))
def test_property_arbitrary_bytes_and_page_url_never_raise(body: bytes, page_url: str) -> None:
    links = extract_links(body, page_url, choose_encoding(body, None))
    assert all(is_absolute_http_url_without_fragment(link) for link in links)


# Characters an HTML attribute value carries through unchanged once escaped: no surrogates
# (not encodable) and no NUL or CR (the HTML parser replaces NUL and normalises newlines).
HREF_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00\r"))


@settings(max_examples=300, deadline=None)
@given(href=HREF_TEXT)
def test_property_extract_agrees_with_normalize_url(href: str) -> None:
    # The parser is only a way to get at the href: what it finds is exactly normalize_url's
    # answer for the href as written.
    body = f'<a href="{html.escape(href, quote=True)}">x</a>'.encode()
    expected = normalize_url(href, PAGE)
    assert extract_links(body, PAGE, "utf-8") == (set() if expected is None else {expected})


# Pieces of a UTF-8 page with invalid sequences where they hurt: in hrefs, cut multi-byte
# characters, surrogates and overlong forms, a BOM, NULs.
_UTF8_PIECES = st.sampled_from(
    [
        b'<a href="',
        b'">x</a>',
        b"/",
        b"p",
        b"\xc3\xa9",
        b"\xe2\x82",
        b"\xed\xa0\x80",
        b"\xc0\xaf",
        b"\xf4\x90\x80\x80",
        b"\xff",
        b"\xef\xbb\xbf",
        b"\x00",
        b"\r\n",
        b"<!--",
    ]
) | st.binary(max_size=8)


@settings(max_examples=500, deadline=None)
@given(pieces=st.lists(_UTF8_PIECES, max_size=20))
def test_property_utf8_pages_parse_as_python_decodes_them(pieces: list[bytes]) -> None:
    # Lexbor gets a UTF-8 page's bytes as they are; it must read them as Python's decoder
    # does, invalid sequences and all, or the links would depend on who decoded the page.
    body = b"".join(pieces)
    as_python_reads_it = body.decode("utf-8", "replace").encode("utf-8")
    assert extract_links(body, PAGE, "utf-8") == extract_links(as_python_reads_it, PAGE, "utf-8")

"""Charset detection and link extraction. Pure functions: no I/O, no event loop, no clock.

Theory of operation: the crawl core hands this module a page's body and its Content-Type
header, and gets back the charset it used and the set of absolute links on the page. Two
questions are answered in turn.

*Which charset?* The order is the HTTP header, then a ``<meta>`` declaration, then UTF-8,
as in the HTML standard's "determining the character encoding" (minus the byte-order mark and
the statistical sniffing, which the contract leaves out). The header comes first because the
server knows what it sent, and because a page cannot be decoded in order to find out how to
decode it. The ``<meta>`` prescan reads only the first 1024 bytes, as ASCII: the standard
stops looking there (browsers must not wait for more before they start decoding), the
ASCII-compatible encodings that pages declare this way write ``<meta charset=...>`` in the
same bytes as ASCII does, and a declaration further down would come too late for the text
above it. (UTF-16 is not ASCII-compatible, so a ``<meta>`` that says UTF-16 is taken to
mean UTF-8, as the standard says; a real UTF-16 page needs the header.) UTF-8 is the default
because most of the web is UTF-8 and decoding it with replacement never fails. A label only
counts if Python has a codec that decodes documents with it; anything else (``foobar``,
``rot13``, ``idna``) falls through to the next rule, so the charset we report is always the
one we decoded with.

*Which links?* The body is decoded with that charset (``errors="replace"``: a bad byte costs a
character, not the page) and parsed with selectolax's Lexbor backend, a C implementation of
the HTML standard's tree builder. It is fast enough to run on every page of a large crawl, and
it parses like a browser: ``&amp;`` and other character references in an attribute are
decoded, and unclosed and misnested tags are repaired. The chapter ran a regex for ``href=`` over
the page instead, which also found hrefs in comments, scripts and plain text. XML documents
(``application/xml``, ``text/xml``) go through the same parser; it keeps unknown elements, so
``<link href>`` and ``<a href>`` there are found too. Each ``href`` of an ``a``, ``area`` or
``link`` element is resolved against the first ``<base href>`` (itself resolved against the
page URL) or else the page URL, by :func:`trio_crawler._urls.normalize_url`: by the WHATWG URL
Standard, as a browser resolves ``a.href``, dropping anything that is not an absolute
http(s) URL.

*Which directives?* A page can ask crawlers not to follow its links with ``<meta name="robots"
content="nofollow">`` (or ``name="trio-crawler"``, our product token). Reading those takes a
second query over the tree the links came from, so :func:`extract_links` hands their
``content`` back on request instead of making its caller parse the page again; what the words
mean is the page reader's business (:mod:`trio_crawler._page`).

*For the page handler.* A crawl with a page handler gives it the same parse the links came
from, so :func:`extract_links` fills a :class:`ParsedDocument` on request: the tree, the URL
hrefs resolve against (for ``Page.follow``), and the links in the order the page gives them
(a crawl without a handler keeps only the set, which is cheaper to build).

Nothing here raises on what a server sends: an unknown charset, undecodable bytes, a broken
tag or a malformed href makes a page yield fewer links, never an exception.
"""

from __future__ import annotations

import codecs
import functools
import re
from typing import TYPE_CHECKING

from selectolax.lexbor import LexborHTMLParser, SelectolaxError

from ._robots import PRODUCT_TOKEN
from ._urls import LinkResolver, normalize_url

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from selectolax.lexbor import LexborNode as Node

__all__ = [
    "PARSED_MEDIA_TYPES",
    "ROBOTS_META_NAMES",
    "ParsedDocument",
    "choose_encoding",
    "decode_text",
    "extract_links",
    "parse_content_type",
    "parse_document",
]

PARSED_MEDIA_TYPES: frozenset[str] = frozenset(
    {"text/html", "application/xhtml+xml", "application/xml", "text/xml"}
)

# The HTML standard's prescan looks at no more than the first 1024 bytes ("prescan a byte
# stream to determine its encoding").
_PRESCAN_BYTES = 1024
_DEFAULT_ENCODING = "utf-8"

# One CSS query for every element that can carry a link. Parse plus collecting the hrefs,
# timeit (best of 9, process time, on a loaded 2-CPU VM, so +-30%):
#   css("a[href], area[href], link[href]"): 20 links 0.11-0.22 ms, 100 000 links 0.27-0.43 s
#   tags("a") + tags("area") + tags("link"):  20 links 0.08-0.13 ms, 100 000 links 0.36-0.46 s
# tags() is a few hundredths of a millisecond ahead on small pages and css() up to a third
# ahead on huge ones; the single query is kept (one pass over the tree, attribute test in C).
# Resolving the links (LinkResolver: 1-2 us for a plain href, 6-8 us through the WHATWG
# parser) costs about as much as the parse: a whole extract_links takes 0.4 ms for 50 links.
_LINK_SELECTOR = "a[href], area[href], link[href]"
_BASE_SELECTOR = "base[href]"
# The <meta> names whose content is a crawl directive for us: every robot's, and ours. Other
# robots' (<meta name="googlebot">) are theirs alone. Compared lower-cased, as HTML names are
# matched ASCII case-insensitively.
ROBOTS_META_NAMES: frozenset[str] = frozenset({"robots", PRODUCT_TOKEN})
# Every named <meta>, filtered in Python: a page has a handful, and a CSS attribute test for
# two values case-insensitively would be a longer query for the same walk.
_META_SELECTOR = "meta[name]"

# Python codecs that decode bytes to text but are not character encodings of documents: a
# page labelled with one is treated as if the label were unknown. idna and undefined raise
# even with errors="replace"; punycode raises on non-ASCII; the escape codecs emit
# DeprecationWarning on bad escapes and can produce lone surrogates.
_NOT_DOCUMENT_CODECS = frozenset(
    {"idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape"}
)

# Markup comments are skipped by the prescan, so a commented-out <meta> does not count. An
# unterminated comment hides the rest of the prefix, as it would in the tokenizer.
_COMMENT = re.compile(rb"<!--.*?(?:-->|\Z)", re.DOTALL)
_META_TAG = re.compile(rb"<meta[\s/]([^>]*)", re.IGNORECASE)
# One attribute inside a tag: name, then an optional value that is double-quoted,
# single-quoted or bare (a value cut off by the 1024-byte limit keeps what is there).
_ATTRIBUTE = re.compile(rb"""([^\s/>=]+)(?:\s*=\s*(?:"([^"]*)"?|'([^']*)'?|([^\s>]*)))?""")
# The standard's "extracting a character encoding from a meta element" for the content
# attribute of <meta http-equiv="Content-Type" content="text/html; charset=...">.
_CHARSET_IN_CONTENT = re.compile(
    rb"""charset\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s;"']+))""", re.IGNORECASE
)


def parse_content_type(header: str | None) -> tuple[str | None, str | None]:
    """Split a Content-Type header into its media type and charset.

    The core needs the media type to decide whether a page is parsed for links, and the
    charset to decode it. Parameters other than ``charset`` are ignored.

    Args:
        header: The header value as received, or None when the response had none.

    Returns:
        ``(media_type, charset)``: the media type lower-cased without parameters, or None when
        the header is missing or empty; the ``charset`` parameter lower-cased with quotes and
        whitespace stripped, or None when there is none (or it is empty).
    """
    if not header:
        return None, None
    media_type, _, parameters = header.partition(";")
    charset = None
    for parameter in parameters.split(";"):
        name, equals, value = parameter.partition("=")
        if equals and name.strip().lower() == "charset":
            charset = _clean_label(value) or None
            break
    return media_type.strip().lower() or None, charset


def choose_encoding(body: bytes, header_charset: str | None) -> str:
    """Choose the charset a page is decoded with, and reported as in its record.

    The header charset wins when Python can decode documents with it; else the first
    ``<meta charset>`` or ``<meta http-equiv="Content-Type" content="...; charset=...">`` in
    the first 1024 bytes that names such a codec; else UTF-8. See the module docstring for
    why this order and why 1024 bytes.

    Args:
        body: The page's bytes, after any Content-Encoding is undone.
        header_charset: The Content-Type charset parameter, or None.

    Returns:
        The label as found, lower-cased (``"iso-8859-1"``, ``"ascii"``, ``"utf-8"``), not
        Python's canonical codec name, so the record shows what the site declared.
    """
    if header_charset is not None:
        label = _clean_label(header_charset)
        if _document_codec(label) is not None:
            return label
    meta_label = _prescan_meta_charset(body[:_PRESCAN_BYTES])
    if meta_label is not None:
        return meta_label
    return _DEFAULT_ENCODING


class ParsedDocument:
    """What a page's parse leaves for the page handler (see :func:`extract_links`).

    Attributes:
        tree: The document as selectolax's Lexbor parser built it; None until parsed.
        base: The URL the page's hrefs resolve against: its first usable ``<base href>``,
            else the page's URL.
        links: The distinct links, resolved, in the order the page first gives them (the
            page reader narrows them to the in-scope ones).
    """

    __slots__ = ("base", "links", "tree")

    def __init__(self) -> None:
        self.tree: LexborHTMLParser | None = None
        self.base = ""
        self.links: tuple[str, ...] = ()


def parse_document(body: bytes, encoding: str) -> LexborHTMLParser:
    """Parse a page's bytes, decoded with ``encoding``, as :func:`extract_links` does.

    Raises:
        SelectolaxError, ValueError: Lexbor failed (out of memory, input over 2.5 GB).
    """
    return LexborHTMLParser(_parser_input(body, encoding))


def decode_text(body: bytes, encoding: str) -> str:
    """A page's text: ``body`` decoded with ``encoding`` (UTF-8 when Python has no codec
    for documents by that name), bad bytes replaced."""
    codec = _document_codec(_clean_label(encoding)) or _DEFAULT_ENCODING
    try:
        return body.decode(codec, "replace")
    except (LookupError, ValueError):
        return body.decode(_DEFAULT_ENCODING, "replace")


def extract_links(
    body: bytes,
    page_url: str,
    encoding: str,
    *,
    normalized: bool = False,
    robots_meta: list[str] | None = None,
    parsed: ParsedDocument | None = None,
) -> AbstractSet[str]:
    """Find the links on a page, as absolute http(s) URLs without fragments.

    Links are the ``href`` of every ``a``, ``area`` and ``link`` element, resolved against
    the document's first ``<base href>`` (itself resolved against ``page_url``) or else
    ``page_url``. An empty ``href`` is the page itself, as in a browser. Links are not
    scope-filtered: that is the core's decision.

    Args:
        body: The page's bytes.
        page_url: The URL the page was fetched from (the crawler does not let the HTTP client
            follow redirects, so this is the URL whose response this body is).
        encoding: The charset from :func:`choose_encoding`. Any string is accepted; one that
            Python cannot decode documents with means UTF-8.
        normalized: ``page_url`` is known to be ``normalize_url``'s output (the crawler's
            own URLs are), which saves checking it.
        robots_meta: A list to which the ``content`` of each ``<meta>`` named in
            :data:`ROBOTS_META_NAMES` is appended, in document order, read from the same
            parse as the links (an out-parameter, so that the return value, and every
            stand-in for this function, stays a set of links). None, the default, skips
            the lookup.
        parsed: A :class:`ParsedDocument` to fill with the tree, the base and the links in
            page order, for a page handler (an out-parameter too). None, the default, keeps
            only the set.

    Returns:
        The distinct links (with ``parsed``, a set-like view in page order). Never raises:
        malformed pages and hrefs give fewer links.
    """
    try:
        document = parse_document(body, encoding)
        base_nodes = document.css(_BASE_SELECTOR)
        link_nodes = document.css(_LINK_SELECTOR)
        meta_nodes = document.css(_META_SELECTOR) if robots_meta is not None else []
    except (SelectolaxError, ValueError):
        # Lexbor failing to allocate or parse, or selectolax's input size limit (2.5 GB).
        return set()

    if robots_meta is not None:
        for node in meta_nodes:
            name = (node.attrs.get("name") or "").strip().lower()
            content = node.attrs.get("content")
            if name in ROBOTS_META_NAMES and content:
                robots_meta.append(content)

    base = page_url
    if base_nodes:
        # An absent value (<base href>) is the empty string, as for <a href> below.
        resolved_base = normalize_url(base_nodes[0].attrs.get("href") or "", page_url)
        if resolved_base is not None:
            base = resolved_base

    general = base is page_url and not normalized and normalize_url(page_url) != page_url
    if parsed is not None:
        return _in_page_order(parsed, document, base, link_nodes, general=general)
    # Pages repeat links (navigation, pagination), so each distinct href is resolved once.
    hrefs = {node.attrs.get("href") or "" for node in link_nodes}
    if general:
        # Not a URL the crawler made (a caller's own): resolve each href the general way.
        links = {normalize_url(href, base) for href in hrefs}
    else:
        resolve = LinkResolver(base).resolve
        links = {resolve(href) for href in hrefs}
    links.discard(None)
    return links  # type: ignore[return-value]  # None was discarded


def _in_page_order(
    parsed: ParsedDocument,
    document: LexborHTMLParser,
    base: str,
    link_nodes: list[Node],
    *,
    general: bool,
) -> AbstractSet[str]:
    """:func:`extract_links`' links, with ``parsed`` filled: the same links, resolved the
    same way, kept in page order (a dict where the crawl alone keeps a set)."""
    parsed.tree, parsed.base = document, base
    hrefs = dict.fromkeys([node.attrs.get("href") or "" for node in link_nodes])
    resolve = functools.partial(normalize_url, base=base) if general else LinkResolver(base).resolve
    in_order = dict.fromkeys([resolve(href) for href in hrefs])
    in_order.pop(None, None)
    parsed.links = tuple(in_order)  # type: ignore[arg-type]  # None was popped
    return in_order.keys()  # type: ignore[return-value]  # None was popped


def _clean_label(label: str) -> str:
    """A charset label as compared and reported: no quotes or whitespace, lower case."""
    return label.strip().strip("\"'").strip().lower()


def _document_codec(label: str) -> str | None:
    """Python's codec name for ``label`` if it decodes documents, else None."""
    if not label:
        return None
    try:
        codec = codecs.lookup(label)
        # lookup() also finds bytes-to-bytes codecs such as rot13 and hex; decoding one byte
        # raises LookupError for those. (An empty input would skip the check.)
        b"a".decode(codec.name, "replace")
    except (LookupError, ValueError):
        # ValueError: a NUL in the label; UnicodeError (a ValueError): idna and undefined
        # refuse errors="replace".
        return None
    if codec.name in _NOT_DOCUMENT_CODECS:
        return None
    return codec.name


def _prescan_meta_charset(prefix: bytes) -> str | None:
    """The first usable charset label declared by a ``<meta>`` in ``prefix``, or None."""
    for meta in _META_TAG.finditer(_COMMENT.sub(b"", prefix)):
        attributes: dict[bytes, bytes] = {}
        for attribute in _ATTRIBUTE.finditer(meta.group(1)):
            name = attribute.group(1).lower()
            value = attribute.group(2) or attribute.group(3) or attribute.group(4) or b""
            # The first occurrence of an attribute wins, as in the tokenizer.
            attributes.setdefault(name, value)
        raw_label = attributes.get(b"charset")
        if raw_label is None and attributes.get(b"http-equiv", b"").lower() == b"content-type":
            found = _CHARSET_IN_CONTENT.search(attributes.get(b"content", b""))
            if found is not None:
                raw_label = found.group(1) or found.group(2) or found.group(3)
        if raw_label is None:
            continue
        label = _clean_label(raw_label.decode("ascii", "replace"))
        codec = _document_codec(label)
        if codec is None:
            # The standard skips a <meta> with an unknown label and keeps scanning.
            continue
        if codec.startswith(("utf-16", "utf-32")):
            # A declaration we could read as ASCII is not in a 16- or 32-bit encoding: the
            # standard says to use UTF-8 instead.
            return _DEFAULT_ENCODING
        return label
    return None


def _parser_input(body: bytes, encoding: str) -> str | bytes:
    """What Lexbor should parse: ``body`` decoded with ``encoding``, or as it is for UTF-8.

    Lexbor reads bytes as UTF-8, with no sniffing of its own, and replaces invalid
    sequences as Python's decoder does (a property test holds the two together). Handing
    a UTF-8 page over undecoded spares decoding it here only for selectolax to encode it
    back to UTF-8: 15% of the parse of a large page. An encoding Python cannot decode
    documents with means UTF-8 too.
    """
    codec = _document_codec(_clean_label(encoding)) or _DEFAULT_ENCODING
    if codec == _DEFAULT_ENCODING:
        return body
    try:
        return body.decode(codec, "replace")
    except (LookupError, ValueError):
        # A codec that still fails with errors="replace" on some input: UTF-8 then.
        return body

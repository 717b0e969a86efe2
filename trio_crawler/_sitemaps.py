"""Sitemaps (sitemaps.org protocol 0.9): the URLs a site lists for crawlers, read safely.

A sitemap is fetched like any URL; this module reads its body. Three forms are read:

* XML: a ``<urlset>`` of ``<url><loc>`` entries (pages), or a ``<sitemapindex>`` of
  ``<sitemap><loc>`` entries (more sitemaps);
* the same, gzip-compressed: recognised by its first bytes, whatever the URL or the
  Content-Type say, since servers label ``sitemap.xml.gz`` every way there is;
* plain text: one URL a line.

Sitemaps come from the web, so they are read as hostile input. The XML parser is
defusedxml's: a document with a DTD is refused before anything in it is expanded or
fetched (no entity expansion, no external entities, so no billion laughs and no file or
network access), and the plain ``<loc>`` entries read before the refusal are kept.
Decompression is bounded by the same decoder as HTTP bodies, so a gzip bomb stops at the
limit; at most :data:`MAX_LOCS` entries are read from one file, as the protocol allows.

Nothing here resolves or scopes URLs: :class:`SitemapContent` holds the ``<loc>`` texts as
written, and the core resolves them like links.
"""

from __future__ import annotations

import dataclasses
import io
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass

import defusedxml.ElementTree
from defusedxml import DefusedXmlException

from ._decoders import BodyDecoder, DecodingError, ResponseTooLarge

# The protocol's limits for one sitemap file (sitemaps.org, "Sitemap file location"): 50 000
# URLs and 50 MB uncompressed. Larger files are read up to the limit.
MAX_LOCS = 50_000
MAX_SITEMAP_BYTES = 50 * 1000 * 1000
# Index files may name index files; the crawler follows this many levels from the
# sitemaps robots.txt names (a sitemap is level 1, one it names level 2, ...), so that a
# loop or a deep chain of indexes ends.
MAX_SITEMAP_LEVELS = 3
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True, kw_only=True)
class SitemapContent:
    """What one sitemap file lists.

    Attributes:
        pages: ``<loc>`` texts of ``<url>`` entries (or the lines of a text sitemap).
        sitemaps: ``<loc>`` texts of ``<sitemap>`` entries (an index file).
        problem: Why the file was not read to its end (``"Name: message"``), or None.
    """

    pages: tuple[str, ...] = ()
    sitemaps: tuple[str, ...] = ()
    problem: str | None = None


def read_sitemap(body: bytes, *, max_size: int) -> SitemapContent:
    """Read a sitemap's body (as received, Content-Encoding already undone).

    Args:
        body: The body.
        max_size: Most bytes a gzip sitemap may inflate to (the crawl's ``--max-size``,
            and never more than :data:`MAX_SITEMAP_BYTES`).
    """
    problem = None
    if body.startswith(_GZIP_MAGIC):
        body, problem = _gunzip(body, min(max_size, MAX_SITEMAP_BYTES))
    xml = body.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<")
    content = _read_xml(body) if xml else _read_text(body)
    if problem is not None:  # the cut is why the rest could not be read
        return dataclasses.replace(content, problem=problem)
    return content


def _gunzip(body: bytes, limit: int) -> tuple[bytes, str | None]:
    """The inflated body, cut at ``limit``, and what went wrong (None if nothing)."""
    decoder = BodyDecoder("gzip", limit)
    try:
        decoder.feed(body)
        return decoder.finish(), None
    except ResponseTooLarge as exc:
        return decoder.prefix(), f"ResponseTooLarge: {exc}"
    except DecodingError as exc:
        return decoder.prefix(), f"DecodingError: {exc}"


def _read_text(body: bytes) -> SitemapContent:
    lines = body.decode("utf-8-sig", errors="replace").splitlines()
    pages = [line.strip() for line in lines if line.strip()]
    return SitemapContent(pages=tuple(pages[:MAX_LOCS]))


def _local_name(tag: str) -> str:
    """``{namespace}loc`` -> ``loc``: sitemaps in the wild use the namespace or not."""
    return tag.rpartition("}")[2]


def _read_xml(body: bytes) -> SitemapContent:
    pages: list[str] = []
    sitemaps: list[str] = []
    parents: list[str] = []
    problem = None
    try:
        events = defusedxml.ElementTree.iterparse(
            io.BytesIO(body), events=("start", "end"), forbid_dtd=True
        )
        for event, element in events:
            name = _local_name(element.tag)
            if event == "start":
                parents.append(name)
                continue
            parents.pop()
            if name == "loc" and parents:
                text = (element.text or "").strip()
                listed = pages if parents[-1] == "url" else sitemaps
                if text and parents[-1] in ("url", "sitemap"):
                    listed.append(text)
                    if len(pages) + len(sitemaps) >= MAX_LOCS:
                        break
            elif name in ("url", "sitemap"):
                element.clear()  # keep memory flat however long the file is
    except DefusedXmlException as exc:
        problem = f"{type(exc).__name__}: {exc}"
    except ElementTree.ParseError as exc:
        problem = f"ParseError: {exc}"
    return SitemapContent(pages=tuple(pages), sitemaps=tuple(sitemaps), problem=problem)

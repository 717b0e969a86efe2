"""robots.txt as data: what one origin's file allows, from its status and body (RFC 9309).

The core asks for ``/robots.txt`` once per origin (scheme, host, port) before the first URL
there, and turns the outcome into :class:`RobotsRules` with :meth:`RobotsRules.from_response`.
Fetching is the engines' business, reading the file is :mod:`._robots_parser`'s; what this
module adds is the RFC's reading of statuses and of the body's bytes:

==============  ============================================================================
2xx             the file's rules apply, for the group matching our product token
3xx             followed by the core (up to :data:`MAX_ROBOTS_REDIRECTS`), then as below
4xx             "unavailable": everything is allowed (RFC 9309, section 2.3.1.3)
5xx             "unreachable": everything is disallowed (section 2.3.1.4)
network error   decided by the core: the origin's URLs fail with that error
==============  ============================================================================

A body is read as :func:`robots_text` says: at most :data:`MAX_PARSED_SIZE` of it, a
byte-order mark skipped, UTF-8 with a replacement character for each stray byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._robots_parser import AgentRules, parse

# The product token robots.txt groups are matched on (RFC 9309, section 2.2.1): the user
# agent's name without its version, so that "User-agent: trio-crawler" matches every release.
PRODUCT_TOKEN = "trio-crawler"
# RFC 9309, section 2.3.1.2: crawlers SHOULD follow at least five consecutive redirects.
MAX_ROBOTS_REDIRECTS = 5
# RFC 9309, section 2.5: crawlers MUST parse at least 500 KiB of a robots.txt and MAY
# ignore the rest. (The fetch already stops reading there; this holds for any body.)
MAX_PARSED_SIZE = 500 * 1024
# RFC 9309 section 2.4: a crawler SHOULD NOT use a cached robots.txt for more than 24
# hours. An origin whose rules are older is asked again before its next URL goes out, in a
# long crawl, a resumed one and a shared one alike (its time is kept with its rules).
ROBOTS_MAX_AGE = 24 * 3600.0
_UTF8_BOM = b"\xef\xbb\xbf"


def robots_text(body: bytes) -> str:
    """The text of a robots.txt body, as far as it is parsed.

    At most :data:`MAX_PARSED_SIZE` bytes, up to the end of the last whole line within
    them (a rule cut in half is no rule: ``Disallow: /private`` cut to ``Disallow: /pri``
    would disallow too much). A UTF-8 byte-order mark at the start is skipped, as is a
    truncated one (Google's parser does the same: robots.cc skips any prefix of the mark),
    which would otherwise void the first line and with it a group. The RFC's files are
    UTF-8; a stray byte becomes U+FFFD rather than voiding the rest of the file.
    """
    if len(body) > MAX_PARSED_SIZE:
        cut = max(body.rfind(b"\n", 0, MAX_PARSED_SIZE), body.rfind(b"\r", 0, MAX_PARSED_SIZE))
        body = body[: cut + 1]
    for length in (3, 2, 1):
        if body[:length] == _UTF8_BOM[:length]:
            body = body[length:]
            break
    return body.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class RobotsRules:
    """What one origin's robots.txt says to this crawler.

    Attributes:
        parsed: The file's rules for :data:`PRODUCT_TOKEN`, or None when the status alone
            decided (``allow_all``).
        allow_all: With no ``parsed`` rules: True allows every URL, False none.
        text: The file ``parsed`` came from, for a store to keep (:meth:`as_text`).
    """

    parsed: AgentRules | None = None
    allow_all: bool = True
    text: str | None = None

    @classmethod
    def from_response(cls, status: int, body: bytes) -> RobotsRules:
        """The rules for a robots.txt answered with ``status`` and ``body``."""
        if 200 <= status < 300:
            text = robots_text(body)
            # A file that is just one of as_text()'s two words holds no record: it allows
            # everything, as an empty file does, and is kept as one so as not to read back
            # as "deny".
            return cls.from_text("" if text in ("allow", "deny") else text)
        if 500 <= status < 600 or status == 429:
            # 429 too (RFC 9309 leaves it open; the contract counts it as a server error):
            # a robots.txt rate-limited away is no licence to crawl.
            return cls(allow_all=False)
        # 4xx, and anything else the RFC does not name (1xx, a 3xx that ended the chain):
        # the file is unavailable, which allows everything.
        return cls(allow_all=True)

    def as_text(self) -> str:
        """The rules as a store keeps them: the file, or ``allow``/``deny`` when the
        status alone decided (:meth:`from_response` never keeps a file that is one of
        those words, so the two cannot clash)."""
        if self.parsed is not None and self.text is not None:
            return self.text
        return "allow" if self.allow_all else "deny"

    @classmethod
    def from_text(cls, text: str) -> RobotsRules:
        """The rules :meth:`as_text` kept (or a file's text, from :func:`robots_text`)."""
        if text == "allow":
            return cls(allow_all=True)
        if text == "deny":
            return cls(allow_all=False)
        return cls(parsed=parse(text, PRODUCT_TOKEN), text=text)

    @property
    def may_refuse(self) -> bool:
        """Whether these rules could refuse any URL (see :attr:`AgentRules.may_refuse`)."""
        return self.parsed.may_refuse if self.parsed is not None else not self.allow_all

    def allowed(self, url: str) -> bool:
        """True if ``url`` may be fetched."""
        if self.parsed is None:
            return self.allow_all
        return self.parsed.allowed(url)

    @property
    def sitemaps(self) -> tuple[str, ...]:
        """The URLs of the file's ``Sitemap:`` lines, as written (they apply to every agent)."""
        if self.parsed is None:
            return ()
        return self.parsed.sitemaps

    @property
    def crawl_delay(self) -> float | None:
        """Seconds between requests the file asks of this crawler, if any."""
        if self.parsed is None:
            return None
        return self.parsed.crawl_delay


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL that ``normalize_url`` produced.

    The unit robots.txt and the per-host limits apply to (RFC 9309 section 2.3: scheme, host
    and port). Normalised URLs are in the WHATWG URL Standard's spelling: no default port,
    the host lower-case and canonical (IDNA, IPv4 in four decimals, IPv6 compressed), so the
    prefix before the path is already the canonical origin; only a userinfo part is dropped
    (the standard percent-encodes "@" and "/" inside it, so the last "@" ends it). This runs
    once per queued URL, so it slices rather than parses.
    """
    start = url.index("://") + 3
    end = url.find("/", start)
    netloc = url[start:] if end == -1 else url[start:end]
    return url[:start] + netloc.rpartition("@")[2]


def robots_url(origin: str) -> str:
    """The robots.txt URL for an origin from :func:`origin_of`."""
    return origin + "/robots.txt"

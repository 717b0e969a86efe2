"""URL normalisation and crawl scope. Pure functions: no I/O, no event loop.

Theory of operation: every URL the crawler keeps (a root, a link, a redirect target) passes
through :func:`normalize_url` once, and the seen-set, the records and the requests all use
that one spelling. Normalising before the seen-set test is what makes ``http://Example.com:80/``
and ``http://example.com/`` one page rather than two fetches. The rules are the small, safe
subset that every server treats as equivalent (RFC 3986 section 6.2.2 and 6.2.3): lower-case
scheme and host, IDNA host, no default port, ``/`` for an empty path, percent-encoding of
characters that may not appear raw, and no fragment. Nothing that could change which resource
a server returns (dot segments inside the query, case of the path) is touched.

Anything that cannot be made into an absolute http(s) URL with a valid host and port gives
None: a bad link on a page is the web's problem, so it is skipped, never raised.

:class:`Scope` answers the chapter's question "should this link be crawled?": scheme, the
``--exclude`` regex, and host matching against the roots' hosts (strict or lenient).
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, quote, urljoin, urlsplit, urlunsplit

if TYPE_CHECKING:
    from collections.abc import Iterable

_SCHEMES = frozenset({"http", "https"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
# WHATWG URL parsing strips leading and trailing C0 controls and spaces, and removes tabs and
# newlines anywhere; browsers do this before following an href, so a link that works in a
# browser works here.
_STRIP = "".join(chr(code) for code in range(0x21))
_TAB_OR_NEWLINE = re.compile(r"[\t\n\r]")
# Characters left as they are when percent-encoding a path or query: RFC 3986 reserved and
# unreserved characters, plus "%" so that existing escapes are not encoded twice.
_SAFE_PATH = "/%:@!$&'()*+,;=-._~"
_SAFE_QUERY = _SAFE_PATH + "?"
# Characters that may not appear in a host after IDNA: WHATWG's forbidden domain code points
# that urlsplit lets through (C0 controls, space, DEL, "%", "<", ">", "^", "|", "\\") plus
# the other characters RFC 3986 does not allow in a reg-name.
_FORBIDDEN_HOST_CHARS = frozenset(_STRIP + '%<>"\\^`{|}\x7f')
# A bracketed host with an optional port, the whole host-and-port part of a netloc.
_BRACKETED_HOST = re.compile(r"\[[^\]]*\](?::[0-9]*)?")


def normalize_url(href: str, base: str | None = None) -> str | None:
    """Resolve ``href`` against ``base`` and normalise it.

    Returns:
        The absolute http(s) URL without a fragment, or None when ``href`` cannot be one
        (another scheme, no host, a bad port, an unencodable character, a malformed IPv6 host).
    """
    href = _TAB_OR_NEWLINE.sub("", href.strip(_STRIP))
    try:
        absolute = urljoin(base, href) if base else href
        parts = urlsplit(absolute)
        scheme = parts.scheme.lower()
        if scheme not in _SCHEMES:
            return None
        netloc = _normalize_netloc(parts, scheme)
        if netloc is None:
            return None
        path = quote(parts.path, safe=_SAFE_PATH) or "/"
        query = quote(parts.query, safe=_SAFE_QUERY)
    except (ValueError, UnicodeError):
        # urlsplit raises ValueError for "http://[::1"; .port for "99999"; quote raises
        # UnicodeEncodeError for lone surrogates.
        return None
    return urlunsplit((scheme, netloc, path, query, ""))


def normalize_root(root: str) -> str | None:
    """Normalise a root as given on the command line: no ``://`` means ``http://``."""
    root = root.strip()
    if "://" not in root:
        root = "http://" + root
    return normalize_url(root)


def url_host(url: str) -> str:
    """The host of a URL that :func:`normalize_url` produced (lower-case, no brackets)."""
    return urlsplit(url).hostname or ""


def _normalize_netloc(parts: SplitResult, scheme: str) -> str | None:
    host = parts.hostname  # lower-cased, brackets removed
    if not host:
        return None
    port = parts.port  # raises ValueError when out of range or not a number
    if parts.netloc.rpartition("@")[2].startswith("["):
        host_text = _ipv6_literal(parts, host)
        if host_text is None:
            return None
    elif _is_ip(host):
        host_text = host
    else:
        try:
            host_text = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
        if not host_text or not _FORBIDDEN_HOST_CHARS.isdisjoint(host_text):
            return None
    netloc = host_text
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        netloc = f"{quote(userinfo, safe=':%!$&()*+,;=-._~')}@{netloc}"
    return netloc


def _ipv6_literal(parts: SplitResult, host: str) -> str | None:
    """The bracketed host of ``parts`` in RFC 5952's canonical form, or None if it is not one.

    RFC 3986 allows only an IP literal in brackets, followed by nothing but ``:port``.
    urlsplit also takes IPvFuture (``[v1.x]``, whose brackets ``hostname`` drops, leaving an
    ordinary-looking host) and ignores text after the ``]`` (``[::1]x``), so both are checked
    here. Writing the canonical form makes ``[0:0::1]`` and ``[::1]`` one host.
    """
    if not _BRACKETED_HOST.fullmatch(parts.netloc.rpartition("@")[2]):
        return None
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        return None
    if address.scope_id is not None:
        # A zone ID ("%eth0") names an interface of the machine that wrote the URL.
        return None
    return f"[{address.compressed}]"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _lenient_key(host: str) -> str:
    # The last two labels with the dot kept: the chapter joined them without one, so that
    # "a.bc" and "ab.c" collided. A trailing dot (the DNS root, "example.com.") is dropped
    # first, or every host ending in "com." would share the key "com.".
    return ".".join(host.rstrip(".").split(".")[-2:])


class Scope:
    """Which URLs a crawl may follow.

    A URL is in scope when its scheme is http or https, the exclude pattern does not match it
    (``re.search``), and its host matches a root host: equal, or (strict) equal but for one
    leading ``www.``, or (lenient) equal in the last two labels. An IP address matches only
    itself. Ports are ignored, as in the chapter.
    """

    def __init__(
        self, roots: Iterable[str], *, strict: bool = True, exclude: re.Pattern[str] | None = None
    ) -> None:
        self.strict = strict
        self.exclude = exclude
        # Roots are normalised again here (a no-op for normalised ones) so that a root given
        # as "xkcd.com" or "http://München.de/" yields the host that links will carry.
        normalized = (normalize_root(root) for root in roots)
        self.root_hosts = frozenset(url_host(url) for url in normalized if url) - {""}
        self._lenient_keys = frozenset(
            _lenient_key(host) for host in self.root_hosts if not _is_ip(host)
        )

    def host_okay(self, host: str) -> bool:
        """Whether ``host`` (any case) matches a root host under this scope's rule."""
        host = host.lower()
        if host in self.root_hosts:
            return True
        if _is_ip(host):
            return False
        if self.strict:
            other = host[4:] if host.startswith("www.") else "www." + host
            # "www.1.2.3.4" is not an IP, but must not match the IP root host "1.2.3.4".
            return other in self.root_hosts and not _is_ip(other)
        return _lenient_key(host) in self._lenient_keys

    def allows(self, url: str) -> bool:
        """Whether a normalised absolute URL may be crawled."""
        if self.exclude is not None and self.exclude.search(url):
            return False
        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES:
            return False
        return self.host_okay(parts.hostname or "")

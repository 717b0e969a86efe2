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
_FORBIDDEN_HOST_CHARS = frozenset(_STRIP + '%<>"\\^`{|}\x7f:[]')
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
        # Joined even without a base: urljoin also drops an empty ";params" part, so a URL
        # must pass through it either way to have one spelling.
        absolute = urljoin(base or href, href)
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


# An href that needs none of normalize_url's repairs once its fragment is cut: only
# characters that percent-encoding leaves alone in a path or query, and no whitespace,
# backslash or non-ASCII character. Nor ";": urljoin still splits RFC 2396 "parameters"
# off the last segment, with rules of their own.
_PLAIN_HREF = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,=:@/?%]*")
# What urlsplit takes for a scheme (RFC 3986, section 3.1).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
# A plain href that is an absolute URL already in normalize_url's spelling, but for an empty
# path or query: lower-case scheme, a host of lower-case ASCII labels of 1 to 63 characters
# (which IDNA leaves as they are), a port without leading zeros, then the path and query.
# Anything else (upper case, userinfo, a trailing dot, brackets) takes the general path.
_PLAIN_ABSOLUTE = re.compile(
    r"(https?)://(?:[a-z0-9\-]{1,63}\.)*[a-z0-9\-]{1,63}(?::([1-9][0-9]{0,4}))?([/?].*)?"
)


class LinkResolver:
    """``normalize_url(href, base)`` for many hrefs on one page, with a fast path.

    Nearly every link on a real page is a plain relative reference (``page.html``,
    ``/about``, ``../up``, ``?page=2``) or an absolute URL already spelled the way
    :func:`normalize_url` would spell it (``https://docs.python.org/3/``). For those,
    resolving against the already normalised page URL is string concatenation plus, where
    ``.`` segments appear, RFC 3986's remove_dot_segments; ``urljoin``, ``urlsplit``,
    ``quote`` and IDNA (20 to 40 µs per link) would only confirm that nothing changes.
    Anything else (another scheme's link that must be parsed, ``//host``, upper case, a
    character that needs encoding) takes the general path, so the result is always exactly
    :func:`normalize_url`'s; property tests hold the two together.

    Args:
        base: A URL that :func:`normalize_url` produced (the page's URL or its ``<base>``).
    """

    __slots__ = ("_base", "_directory", "_general", "_origin", "_path")

    def __init__(self, base: str) -> None:
        self._base = base
        path_start = base.find("/", base.find("://") + 3)
        query_start = base.find("?", path_start)
        self._origin = base[:path_start]
        self._path = base[path_start:] if query_start < 0 else base[path_start:query_start]
        self._directory = self._origin + self._path[: self._path.rfind("/") + 1]
        # urljoin folds empty segments of the base's path too: leave such bases to it.
        self._general = "//" in self._path

    def resolve(self, href: str) -> str | None:
        """The absolute, normalised URL ``href`` refers to, or None (see normalize_url)."""
        fragment = href.find("#")
        plain = href if fragment < 0 else href[:fragment]
        if not _PLAIN_HREF.fullmatch(plain):
            return normalize_url(href, self._base)
        if plain.startswith(("http://", "https://")):
            return _plain_absolute(plain) or normalize_url(href, self._base)
        if self._general or "//" in plain:
            return normalize_url(href, self._base)
        if not plain or plain == "?":
            return self._base  # urljoin keeps the base's query for an empty reference
        plain = _without_empty_query(plain)
        first = plain[0]
        if first == "?":
            return self._origin + self._path + plain
        if first == "/":
            url = self._origin + plain
        elif ":" in (first_segment := plain.partition("/")[0].partition("?")[0]):
            scheme = first_segment.partition(":")[0]
            if _SCHEME.fullmatch(scheme) and scheme.lower() not in _SCHEMES:
                return None  # "mailto:", "javascript:", "tel:": never crawled
            return normalize_url(href, self._base)  # "http:...", or a path with a colon
        else:
            url = self._directory + plain
        if "/." in url or url.endswith("/."):
            return _without_dot_segments(url, len(self._origin))
        return url


def _plain_absolute(plain: str) -> str | None:
    """``normalize_url(plain)`` for an absolute URL it would barely change, else None.

    ``plain`` has passed ``_PLAIN_HREF``, so its path and query need no percent-encoding,
    and ``urljoin`` leaves a URL with a host as it is (dot segments and all). What is left
    to do is what ``urlunsplit`` does: ``/`` for an empty path and no empty query. None
    means "ask normalize_url", not "not a URL".
    """
    match = _PLAIN_ABSOLUTE.fullmatch(plain)
    if match is None:
        return None
    scheme, port, rest = match.groups()
    if port is not None and (int(port) > 65535 or int(port) == _DEFAULT_PORTS[scheme]):
        return None
    if rest is None:
        return plain + "/"
    if rest[0] == "?":
        plain = plain[: match.start(3)] + "/" + rest
    return _without_empty_query(plain)


def _without_empty_query(url: str) -> str:
    """``url`` without a lone trailing ``?``: urlunsplit drops an empty query."""
    if url.endswith("?") and url.find("?") == len(url) - 1:
        return url[:-1]
    return url


def _without_dot_segments(url: str, path_start: int) -> str:
    """``url`` with ``.`` and ``..`` path segments resolved, exactly as ``urljoin`` does.

    That is RFC 3986's remove_dot_segments but for one detail of CPython's: ``..`` above
    the root is dropped. Callers send no path with ``//`` (which ``urljoin`` also folds).
    """
    path, question, query = url[path_start:].partition("?")
    segments = path.split("/")
    resolved: list[str] = []
    for segment in segments:
        if segment == "..":
            if resolved:
                resolved.pop()
        elif segment != ".":
            resolved.append(segment)
    if segments[-1] in (".", ".."):
        resolved.append("")
    joined = "/".join(resolved)
    if not joined.startswith("/"):
        joined = "/" + joined
    return url[:path_start] + joined + question + query


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
    hostport = parts.netloc.rpartition("@")[2]
    if not hostport.startswith("[") and ("[" in hostport or "]" in hostport):
        # urlsplit reads "a[::1]" as the host "::1": brackets belong only around a whole host.
        return None
    if hostport.startswith("["):
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


# Hosts whose scope answer Scope.allows remembers: a site links to a few hosts, over and
# over; a page of links to ten thousand hosts just clears the memo.
_MAX_REMEMBERED_HOSTS = 4096


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
        self._host_answers: dict[str, bool] = {}

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
        """Whether a normalised absolute URL may be crawled.

        This runs for every link on every page, so it slices the host out of the URL
        (normalised URLs have a lower-case scheme and host and no fragment) and remembers
        each host's answer, rather than parsing the URL.
        """
        if self.exclude is not None and self.exclude.search(url):
            return False
        scheme_end = url.find("://")
        if url[:scheme_end] not in _SCHEMES:
            return False
        start = scheme_end + 3
        end = url.find("/", start)
        netloc = url[start:] if end < 0 else url[start:end]
        host = netloc.rpartition("@")[2]
        host = host[1 : host.find("]")] if host.startswith("[") else host.partition(":")[0]
        answer = self._host_answers.get(host)
        if answer is None:
            if len(self._host_answers) >= _MAX_REMEMBERED_HOSTS:
                self._host_answers.clear()  # a link farm's hosts must not grow it forever
            answer = self._host_answers[host] = self.host_okay(host)
        return answer

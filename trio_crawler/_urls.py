"""URL resolution, normalisation and crawl scope. Pure functions: no I/O, no event loop.

Theory of operation: every URL the crawler keeps (a root, a link, a ``<base href>``, a
redirect target) passes through :func:`normalize_url` once, and the seen-set, the scope
check, robots.txt and the requests all use that one spelling.

*Resolution and spelling are the browser's.* A link is resolved and serialised by the WHATWG
URL Standard, the algorithm behind a browser's ``a.href``, through ada-url (the C++ parser
Node.js uses, which agrees with every case of the Web Platform Tests' URL suite). So the
crawler follows the URL a browser would follow, tricky hrefs included: dot segments are
removed (``/a/../b`` and ``/a/%2e%2e/b`` are ``/b``), ``\\`` is ``/`` in http(s) URLs, a host
is lower-cased and mapped by UTS-46 (``faß.ExAmPlE`` is ``xn--fa-hia.example``), an IPv4
host in any of its number forms is written as four decimals (``0x7f.1`` and ``2130706433``
are ``127.0.0.1``; ``192.168.0.257`` is refused), an IPv6 host is compressed, the default
port goes, an empty path is ``/``, and characters that may not appear raw are
percent-encoded. It also makes the seen-set work: ``http://Example.com:80/`` and
``http://example.com/`` are one page, not two fetches.

*What the crawler adds on top* is one equivalence that every server honours: the fragment is
dropped, always. It never reaches the server (a browser does not send it), so ``/a#x`` and
``/a#y`` are one request. Nothing else is changed: an empty query stays (``/b?`` is
requested as ``GET /b?``, which a server may answer differently from ``GET /b``, and the
browser keeps it), as do the path's case and percent-escapes.

Anything that is not an absolute http or https URL after resolution (another scheme, or a
string the standard calls a failure) gives None: a bad link on a page is the web's problem,
so it is skipped, never raised.

:class:`Scope` answers the chapter's question "should this link be crawled?": scheme, the
``--exclude`` regex, and host matching against the roots' hosts (strict or lenient), on the
hosts as the standard spells them; and, when asked, the ``--include`` regexes and wget's
``--no-parent`` (a link must be at or below the directory of a root on its host).
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING

from ada_url import join_url, parse_url

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

_SCHEMES = frozenset({"http", "https"})
_HTTP_PREFIXES = ("http://", "https://")
_DEFAULT_PORTS = {"http": "80", "https": "443"}
# parse_url returns only the attributes asked for; the serialisation is all we need.
_HREF_ONLY = ("href",)


def normalize_url(href: str, base: str | None = None) -> str | None:
    """Resolve ``href`` against ``base`` as a browser does, and drop the fragment.

    Args:
        href: The link as written (an attribute value, a Location header, a root).
        base: The URL it is relative to, or None for an absolute ``href``. A base that is
            not a URL at all resolves nothing, but an absolute ``href`` needs no base.

    Returns:
        The absolute http(s) URL in the WHATWG URL Standard's serialisation, without a
        fragment; or None when ``href`` is not one (another scheme, or a failure).
    """
    try:
        url = join_url(base, href) if base else parse_url(href, _HREF_ONLY)["href"]
    except ValueError:
        # The standard's failure (for instance "http://1.2.3.08/"), a bad base, or a string
        # that cannot be encoded as UTF-8 (a lone surrogate).
        if not base:
            return None
        # An absolute href parses the same with or without a base, so only a base that is
        # not a URL ("", "not a url") changes anything here: a browser's documents always
        # have a valid one, a caller's may not.
        try:
            url = parse_url(href, _HREF_ONLY)["href"]
        except ValueError:
            return None
    if not url.startswith(_HTTP_PREFIXES):
        return None
    # The serialisation percent-encodes "#" everywhere but at the fragment's start.
    fragment = url.find("#")
    return url if fragment < 0 else url[:fragment]


# An href the standard copies into the URL unchanged once its fragment is cut: no character
# that is percent-encoded in a path or in an http(s) query ("'" is, in a query), no
# whitespace or control character (stripped or removed), no "\\" (a "/" in http(s) URLs),
# and no non-ASCII character. Nor "%2e" (a "." when it makes up a dot segment), which
# LinkResolver.resolve tests for apart: a regex alternation for it costs more than the test.
_PLAIN_HREF = re.compile(r"[A-Za-z0-9\-._~!$&()*+,;=:@/?%]*")
# A scheme at the start of an href (the standard's scheme state): an ASCII letter, then
# letters, digits, "+", "-" and ".", then ":". Anything else before a ":" is a path.
_SCHEME_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
# The scheme and authority of a plain absolute URL in the standard's spelling: lower-case
# scheme and host, a host of lower-case ASCII labels whose last label starts with a letter
# (so the host is no IPv4 address in any of its number forms), a port without leading zeros,
# then the end of the authority. Anything else (upper case, userinfo, a trailing dot,
# brackets) takes the general path; so do "xn--" labels, which UTS-46 checks (tested apart).
_PLAIN_AUTHORITY = re.compile(
    r"(https?)://(?:[a-z0-9\-]+\.)*[a-z][a-z0-9\-]*(?::([1-9][0-9]{0,4}))?(?=[/?]|\Z)"
)


class LinkResolver:
    """``normalize_url(href, base)`` for many hrefs on one page, with a fast path.

    Nearly every link on a real page is a plain relative reference (``page.html``,
    ``/about``, ``../up``, ``?page=2``, ``#top``) or an absolute URL already spelled the way
    the standard spells it (``https://docs.python.org/3/``). For those, resolving against
    the page's URL (already in the standard's spelling) is string concatenation plus, where
    ``.`` segments appear, the standard's removal of dot segments: 1 to 2 µs, where a call
    into the parser is about 6 µs. Anything else (``//host``, a scheme in upper case, a
    character the standard encodes, strips or maps) takes the general path, so the result
    is always exactly :func:`normalize_url`'s; a property test and the Web Platform Tests'
    URL cases hold the two together.

    Args:
        base: A URL that :func:`normalize_url` produced (the page's URL or its ``<base>``).
    """

    __slots__ = ("_base", "_directory", "_origin", "_path")

    def __init__(self, base: str) -> None:
        self._base = base
        # The standard's http(s) serialisation: "scheme://[userinfo@]host[:port]", then a
        # path that starts with "/", then an optional query; userinfo has "/" encoded.
        path_start = base.find("/", base.find("://") + 3)
        query_start = base.find("?", path_start)
        self._origin = base[:path_start]
        self._path = base[path_start:] if query_start < 0 else base[path_start:query_start]
        self._directory = self._origin + self._path[: self._path.rfind("/") + 1]

    def resolve(self, href: str) -> str | None:
        """The absolute URL ``href`` refers to, or None (see :func:`normalize_url`)."""
        fragment = href.find("#")  # "#" always starts the fragment, in any part of an href
        plain = href if fragment < 0 else href[:fragment]
        if not _PLAIN_HREF.fullmatch(plain) or ("%2" in plain and "%2e" in plain.lower()):
            return normalize_url(href, self._base)
        if not plain:
            return self._base
        if plain.startswith(_HTTP_PREFIXES):
            return _plain_absolute(plain) or normalize_url(href, self._base)
        first = plain[0]
        if first == "?":
            return self._origin + self._path + plain
        if first == "/":
            if plain.startswith("//"):
                return normalize_url(href, self._base)  # another host: the parser's job
            url = self._origin + plain
        elif _SCHEME_PREFIX.match(plain) is not None:
            scheme = plain[: plain.find(":")].lower()
            if scheme not in _SCHEMES:
                return None  # "mailto:", "javascript:", "tel:": never crawled
            return normalize_url(href, self._base)  # "HTTP://", "http:path"
        else:
            url = self._directory + plain
        if "/." not in url:
            return url
        path_start = len(self._origin)
        query_start = url.find("?", path_start)
        if query_start < 0:
            query_start = len(url)
        path = url[path_start:query_start]
        if "/." not in path:
            return url  # the "/." was in the query, which keeps its dots
        return self._origin + _without_dot_segments(path) + url[query_start:]


def _plain_absolute(plain: str) -> str | None:
    """``normalize_url(plain)`` for an absolute URL it would barely change, else None.

    ``plain`` has passed ``_PLAIN_HREF``, so its path and query need no percent-encoding.
    What is left to do is the port's and the path's: no default port, ``/`` for an empty
    path. A possible dot segment, a port above 65535 or the default port, and an ``xn--``
    label go to the parser. None means "ask normalize_url", not "not a URL".
    """
    match = _PLAIN_AUTHORITY.match(plain)
    if match is None or "xn--" in plain:
        return None
    end = match.end()
    if "/." in plain[end:]:
        return None
    port = match.group(2)
    if port is not None and (int(port) > 65535 or port == _DEFAULT_PORTS[match.group(1)]):
        return None
    if end == len(plain) or plain[end] == "?":
        return plain[:end] + "/" + plain[end:]
    return plain


def _without_dot_segments(path: str) -> str:
    """``path`` (starting with ``/``) with ``.`` and ``..`` segments resolved by the standard.

    Each ``..`` removes the segment before it, if any (``..`` above the root is dropped);
    ``.`` is dropped; a ``.`` or ``..`` as the last segment leaves the path ending in ``/``.
    Empty segments are segments like any other (``/a//../b`` is ``/a/b``).
    """
    segments = path.split("/")  # the first is the empty string before the leading "/"
    resolved: list[str] = []
    for segment in segments[1:]:
        if segment == "..":
            if resolved:
                resolved.pop()
        elif segment != ".":
            resolved.append(segment)
    if segments[-1] in (".", ".."):
        resolved.append("")
    return "/" + "/".join(resolved)


def normalize_root(root: str) -> str | None:
    """Normalise a root as given on the command line.

    A root that is not already an http(s) URL and has no ``://`` gets ``http://``:
    ``localhost:8000`` is the host and port a person means (to the standard it would be a
    URL of the scheme ``localhost:``), ``xkcd.com`` has no scheme at all.
    """
    root = root.strip()
    if "://" not in root and not root[:6].lower().startswith(("http:", "https:")):
        root = "http://" + root
    return normalize_url(root)


def url_host(url: str) -> str:
    """The host of a URL that :func:`normalize_url` produced (no brackets), or ``""``.

    Sliced rather than parsed: the standard's serialisation puts the host after ``://``
    and any ``userinfo@`` (whose "@", "/" and ":" are encoded) and before ``:port`` or the
    path, and only an IPv6 host, in brackets, has ":" in it.
    """
    scheme_end = url.find("://")
    if scheme_end < 0:
        return ""
    start = scheme_end + 3
    end = url.find("/", start)
    host = (url[start:] if end < 0 else url[start:end]).rpartition("@")[2]
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.partition(":")[0]


# Characters that end a host in a URL, so that a host string holding one is not a host.
_NOT_IN_A_HOST = re.compile(r"[/?#@\\]")


def _canonical_host(host: str) -> str | None:
    """``host`` (any spelling) as the standard writes it in a URL, or None if it is not one."""
    if _NOT_IN_A_HOST.search(host):
        return None  # "a/b" would be read as the host "a" and the path "/b"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address, as url_host gives it
    url = normalize_url(f"http://{host}/")
    return None if url is None else url_host(url)


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


# Origins whose scope answer Scope.allows remembers: a site links to a few, over and over;
# a page of links to ten thousand hosts just clears the memo.
_MAX_REMEMBERED_HOSTS = 4096


class Scope:
    """Which URLs a crawl may follow.

    A URL is in scope when its scheme is http or https, the exclude pattern does not match it
    (``re.search``), and its host matches a root host: equal, or (strict) equal but for one
    leading ``www.``, or (lenient) equal in the last two labels. An IP address matches only
    itself. Ports are ignored, as in the chapter. Hosts are compared as the WHATWG URL
    Standard writes them (:func:`normalize_url`): ``0x7f.1`` is ``127.0.0.1``, and an IDN
    host is its UTS-46 ASCII form.

    Two more rules narrow the pages a crawl follows, not the files it reads to find them
    (sitemaps; see :meth:`allows`): with ``include``, at least one of its patterns
    must match the URL (``re.search``); with ``no_parent``, the URL must be at or below the
    directory of a root on that root's host, as wget's ``--no-parent`` (root
    ``http://h/a/b.html`` admits ``http://h/a/...``, not ``http://h/c``; root
    ``http://h/a``, whose directory is ``/``, admits all of ``h``). The roots' directories
    are kept in a set per host and a URL's own directories are looked up in it, so the cost
    of a link does not grow with the number of roots.

    Args:
        roots: The crawl's roots, as given.
        strict: Strict host matching, else lenient.
        exclude: A URL this matches (``re.search``) is out of scope.
        include: A page must match one of these, when there are any.
        no_parent: A page must be at or below a root's directory on the root's host.
        normalized: The roots are as :func:`normalize_root` returns them already (a
            ``CrawlConfig``'s): they are not normalised again.
    """

    def __init__(
        self,
        roots: Iterable[str],
        *,
        strict: bool = True,
        exclude: re.Pattern[str] | None = None,
        include: Sequence[re.Pattern[str]] = (),
        no_parent: bool = False,
        normalized: bool = False,
    ) -> None:
        self.strict = strict
        self.exclude = exclude
        self.include = tuple(include)
        self.no_parent = no_parent
        # Whether either rule narrows the pages: asked of every link, so asked once here.
        self._narrows = bool(self.include) or no_parent
        # Roots are normalised here, unless the caller says they are (a CrawlConfig's, each
        # of which would cost another 3 us), so that a root given as "xkcd.com" or
        # "http://München.de/" yields the host that links will carry.
        if normalized:
            urls = roots if isinstance(roots, tuple | list) else list(roots)
        else:
            urls = [url for url in map(normalize_root, roots) if url]
        self.root_hosts = frozenset(map(url_host, urls)) - {""}
        self._lenient_keys = frozenset(
            _lenient_key(host) for host in self.root_hosts if not _is_ip(host)
        )
        self._origin_answers: dict[str, bool] = {}
        # no_parent: the directories of the roots, by host (ports and schemes aside, as in
        # host matching).
        self._parents: dict[str, set[str]] = {}
        if no_parent:
            for url in urls:
                path = _path(url)
                self._parents.setdefault(url_host(url), set()).add(path[: path.rfind("/") + 1])

    def host_okay(self, host: str) -> bool:
        """Whether ``host`` (any spelling) matches a root host under this scope's rule.

        The host is first written as the standard writes it in a URL, so every spelling of
        one host gets one answer; a string that is no host at all matches nothing.
        """
        if host not in self.root_hosts:
            canonical = _canonical_host(host)
            if canonical is None:
                return False
            host = canonical
        if host in self.root_hosts:
            return True
        if _is_ip(host):
            return False
        if self.strict:
            # Never an IP address: "www.1.2.3.4" is no host at all to the standard (a host
            # whose last label is a number must be an IPv4 address).
            other = host[4:] if host.startswith("www.") else "www." + host
            return other in self.root_hosts
        return _lenient_key(host) in self._lenient_keys

    def allows(self, url: str, *, as_page: bool = True) -> bool:
        """Whether a normalised absolute URL may be crawled.

        With ``as_page`` false, whether it may be read to find pages (a sitemap): by the
        host rule and ``exclude``, as any URL, but not by ``include`` or ``no_parent``,
        which choose among the pages (``/sitemap.xml`` is rarely under a root's directory).

        This runs for every link on every page, so it slices the URL's origin (scheme,
        userinfo, host and port: everything before the path, which a normalised URL always
        has) and remembers each origin's answer, rather than parsing the URL.
        """
        if self.exclude is not None and self.exclude.search(url):
            return False
        path_start = url.find("/", url.find("://") + 3)
        origin = url if path_start < 0 else url[:path_start]
        answer = self._origin_answers.get(origin)
        if answer is None:
            if len(self._origin_answers) >= _MAX_REMEMBERED_HOSTS:
                self._origin_answers.clear()  # a link farm's hosts must not grow it forever
            scheme_end = url.find("://")
            answer = url[:scheme_end] in _SCHEMES and self.host_okay(url_host(url))
            self._origin_answers[origin] = answer
        if answer and self._narrows and as_page:
            return self._narrowed_to(url)
        return answer

    def _narrowed_to(self, url: str) -> bool:
        """Whether a URL in scope is a page ``include`` and ``no_parent`` let through."""
        if self.include and not any(pattern.search(url) for pattern in self.include):
            return False
        return not self.no_parent or self._below_a_root(url)

    def _below_a_root(self, url: str) -> bool:
        """Whether ``url`` is at or below a root's directory on the root's host: each of
        its own directories (``/``, ``/a/``, ``/a/b/``...) is looked up among them."""
        directories = self._parents.get(url_host(url))
        if directories is None:
            return False
        path = _path(url)
        end = 0
        while end >= 0:
            if path[: end + 1] in directories:
                return True
            end = path.find("/", end + 1)
        return False


def _path(url: str) -> str:
    """The path of a normalised absolute URL (``/`` at least), without its query."""
    start = url.find("/", url.find("://") + 3)
    if start < 0:
        return "/"
    end = url.find("?", start)
    return url[start:] if end < 0 else url[start:end]

"""The checks of the crawl's options that know what one option means.

:mod:`trio_crawler._options` holds the generic checks (a whole number, seconds, a truth
value); the ones here know one option each: a regular expression, the headers sent with
every request, a ``redis://`` URL. :class:`~trio_crawler._config.CrawlOptions` declares
each option with its check (``check=checks.regex``); the checks live apart from the
declarations so that the table of options reads as one page. Each returns the value as the
crawl keeps it, or raises :class:`~trio_crawler._options.ConfigError` with a message that
reads after the option's name, as the generic checks' do.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from ._options import ConfigError


def regex(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(name, f"must be a regular expression string, not {value!r}")
    try:
        re.compile(value)
    except re.error as exc:
        raise ConfigError(
            name, f"is not a valid regular expression: {exc} (in {value!r})"
        ) from None
    return value


def regexes(name: str, value: object) -> tuple[str, ...] | None:
    """One regular expression, or any number of them, kept as a tuple (None for none)."""
    if isinstance(value, str):
        return (regex(name, value),)
    if not isinstance(value, Iterable):
        raise ConfigError(
            name, f"must be a regular expression string or a list of them, not {value!r}"
        )
    return tuple(regex(name, pattern) for pattern in value) or None


# The characters of a header name (RFC 9110 section 5.6.2, "tchar").
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Headers a user may not set, lower-cased, with the reason: they say how HTTP frames the
# request (RFC 9110 section 7.6.1, RFC 9112 sections 6 and 9.6), which the crawler's client
# does for each request and host, or the crawler sets them for a reason of its own (and
# User-Agent has an option of its own).
_FRAMING = "the crawler frames each request itself"
_REFUSED_HEADERS = {
    "host": _FRAMING,
    "content-length": _FRAMING,
    "transfer-encoding": _FRAMING,
    "connection": _FRAMING,
    "keep-alive": _FRAMING,
    "proxy-connection": _FRAMING,
    "te": _FRAMING,
    "trailer": _FRAMING,
    "upgrade": _FRAMING,
    "accept-encoding": "the crawler asks only for the encodings it can undo",
}


def headers(name: str, value: object) -> tuple[tuple[str, str], ...] | None:
    """Headers given as a mapping, as (name, value) pairs, or as ``Name: value`` lines (as
    ``--header`` takes them; a lone string is one line), kept as pairs in the order given."""
    if isinstance(value, str):
        items: list[object] = [value]
    elif isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, Iterable):
        items = list(value)
    else:
        raise ConfigError(
            name, f"must be a mapping or a list of (name, value) pairs, not {value!r}"
        )
    pairs = []
    for item in items:
        if isinstance(item, str):
            header, colon, text = item.partition(":")
            if not colon:
                raise ConfigError(name, f"must be 'Name: value', not {item!r}")
        elif (
            isinstance(item, tuple | list)
            and len(item) == 2
            and all(isinstance(part, str) for part in item)
        ):
            header, text = item
        else:
            raise ConfigError(name, f"must be a (name, value) pair or 'Name: value', not {item!r}")
        text = text.strip(" \t")
        if not _TOKEN.fullmatch(header):
            raise ConfigError(
                name, f"has a name that is no HTTP field name: {header!r} in {item!r}"
            )
        if not (text.isascii() and text.isprintable()):
            raise ConfigError(
                name, f"has a value that is not one line of printable ASCII: {item!r}"
            )
        if header.lower() == "user-agent":
            raise ConfigError(
                name,
                "may not set User-Agent: give it with {user_agent}, which robots.txt rules "
                "are matched on too",
                mentions=("user_agent",),
            )
        reason = _REFUSED_HEADERS.get(header.lower())
        if reason is not None:
            raise ConfigError(name, f"may not set {header} ({item!r}): {reason}")
        pairs.append((header, text))
    return tuple(pairs) or None


def longest_wait(name: str, value: object) -> float:
    # 0 is a usable limit: never wait for a Retry-After beyond "now".
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, f"must be a number of seconds, not {value!r}")
    if not (0 <= value < math.inf):  # NaN fails both comparisons
        raise ConfigError(name, f"must be a finite number of seconds, 0 or more, not {value!r}")
    return float(value)


def user_agent(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(name, f"must be a non-empty string, not {value!r}")
    if not value.isprintable() or not value.isascii():
        # A header value with a newline would smuggle headers; httpx refuses non-ASCII.
        raise ConfigError(name, f"must be printable ASCII (one header line), not {value!r}")
    return value


def state_path(name: str, value: object) -> str:
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ConfigError(name, f"must be a file path, not {value!r}")
    return str(os.fspath(value))


def redacted(url: str) -> str:
    """``url`` without its password: what logs, errors and reports may show."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return "<unreadable URL>"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def frontier_url(name: str, value: object) -> str:
    """A ``redis://`` or ``rediss://`` URL; an error never repeats its password."""
    if not isinstance(value, str):
        raise ConfigError(name, f"must be a redis:// URL, not {type(value).__name__}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises for a port that is no number
    except ValueError:
        raise ConfigError(name, f"is not a URL: {redacted(value)!r}") from None
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ConfigError(
            name, f"must be redis://HOST[:PORT][/DB] or rediss://..., not {redacted(value)!r}"
        )
    check_frontier_query(name, parts.scheme, parse_qsl(parts.query, keep_blank_values=True), value)
    database = parts.path.removeprefix("/")
    # The client reads any path it cannot make a number of as database 0, and a negative
    # one fails deep in the first connection: both are caught here. Redis counts its
    # databases in a C int; whether the server has the one named is asked when connecting.
    if database and not (database.isascii() and database.isdigit() and int(database) < 2**31):
        raise ConfigError(
            name,
            "must name its database by number (redis://HOST[:PORT][/DB], DB from 0), "
            f"not {redacted(value)!r}",
        )
    return value


# What the query of a rediss:// URL may set: the client's TLS options, each with the values
# it reads (trio_crawler/_redis.py, _tls_context). Any other key, or any query on redis://,
# is refused rather than silently ignored.
TLS_QUERY_OPTIONS: dict[str, tuple[str, ...] | None] = {
    "ssl_ca_certs": None,  # a file path
    "ssl_certfile": None,
    "ssl_keyfile": None,
    "ssl_cert_reqs": ("none", "optional", "required"),
    "ssl_check_hostname": ("true", "false", "yes", "no", "1", "0", "t", "f", "y", "n"),
}


def check_frontier_query(name: str, scheme: str, query: list[tuple[str, str]], value: str) -> None:
    """A redis:// URL has no query; a rediss:// one sets only :data:`TLS_QUERY_OPTIONS`."""
    if not query:
        return
    shown = redacted(value)
    if scheme == "redis":
        raise ConfigError(
            name,
            f"takes no query in a redis:// URL (TLS options go with rediss://), not {shown!r}",
        )
    for key, given in query:
        if key not in TLS_QUERY_OPTIONS:
            raise ConfigError(
                name,
                f"may set only {', '.join(TLS_QUERY_OPTIONS)} in its query, "
                f"not {key!r} (in {shown!r})",
            )
        allowed = TLS_QUERY_OPTIONS[key]
        if allowed is not None and given.lower() not in allowed:
            raise ConfigError(
                name, f"{key} must be one of {', '.join(allowed)}, not {given!r} (in {shown!r})"
            )
        if allowed is None and not given:
            raise ConfigError(name, f"{key} must be a file path, not empty (in {shown!r})")


_CRAWL_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")


def crawl_id(name: str, value: object) -> str:
    if not (isinstance(value, str) and _CRAWL_ID.fullmatch(value)):
        raise ConfigError(name, f"must be 1-100 letters, digits, '.', '_' or '-', not {value!r}")
    return value

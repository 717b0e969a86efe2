"""robots.txt text read into the rules for one product token, and URLs matched against them.

Theory of operation (RFC 9309, section 2):

* **Lines.** A file is lines ended by CR, LF or CR LF; ``#`` starts a comment; a line is a
  ``key: value`` record, the key case-insensitive, blanks around both ignored. A UTF-8
  byte-order mark before the first line is skipped. Lines that are not records are ignored.
* **Groups** (2.1, 2.2.1). One or more ``user-agent`` lines start a group; its ``allow`` and
  ``disallow`` lines follow. A ``user-agent`` line after a rule starts the next group; no
  other line ends or splits one (2.2.4: ``Crawl-delay``, ``Sitemap``, blank and unknown
  lines only belong to the group they are in). Rules before the first ``user-agent`` line
  belong to no group.
* **Choosing** (2.2.1). A group's ``user-agent`` value is read as a product token: cut at
  the first character outside letters, ``-`` and ``_`` (so ``trio-crawler/0.2`` and
  ``trio-crawler (+https://...)`` name ``trio-crawler``) and compared case-insensitively.
  Every group naming the crawler's token applies, combined into one; with none, every
  ``*`` group does; with none of those either, everything is allowed.
* **Matching** (2.2.2, 2.2.3). A rule's path matches a URL's path and query when it is a
  prefix of them, ``*`` standing for any characters and a final ``$`` for the end. Both
  sides are first brought to one spelling of RFC 3986 (:func:`normalize`). The longest
  matching rule decides (its octets in that spelling, ``*`` and ``$`` included, as
  Google's parser counts them); between an ``allow`` and a ``disallow`` of the same
  length, ``allow``. No matching rule, or ``/robots.txt`` itself: allowed.

Where RFC 9309 leaves room, Google's open-source parser (published with the RFC's drafts)
is followed when that only obeys a file more faithfully: a missing colon (``Disallow /x``),
the common misspellings of the keys, and ``User-agent: * anything`` read as ``*``. Its
other habits are not copied; ``tests/test_robots.py`` lists each one with the reason.

Speed: a file is parsed once per origin and :meth:`AgentRules.allowed` is asked once per
link, so rules are sorted once, longest first, and one ``str.startswith`` over all the
plain prefixes rules out most of them for a URL that none of them can match.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["AgentRules", "Rule", "normalize", "parse", "path_of"]

# The keys of the records this parser reads, with the misspellings Google's parser takes
# (robots.cc, KeyIsUserAgent/KeyIsDisallow/KeyIsSitemap) and protego's "crawl delay".
# RFC 9309 2.2.4 lets a crawler accept common typos; these only make it obey what the
# file's author evidently meant.
_KEYS = {
    "user-agent": "user-agent",
    "useragent": "user-agent",
    "user agent": "user-agent",
    "allow": "allow",
    "disallow": "disallow",
    "dissallow": "disallow",
    "dissalow": "disallow",
    "disalow": "disallow",
    "diasllow": "disallow",
    "disallaw": "disallow",
    "crawl-delay": "crawl-delay",
    "crawl delay": "crawl-delay",
    "sitemap": "sitemap",
    "sitemaps": "sitemap",
    "site-map": "sitemap",
}

# RFC 9309's grammar: NL = %x0D / %x0A / %x0D.0A, WS = SP / HTAB. (str.splitlines would
# also split at form feeds, U+2028 and more.)
_LINES = re.compile(r"\r\n|\r|\n")
_BLANKS = " \t"
_WORDS = re.compile(r"[^ \t]+")
# A product token (RFC 9309 2.2.1: "identifier = 1*(%x2D / %x41-5A / %x5F / %x61-7A)").
_TOKEN = re.compile(r"[A-Za-z_-]*")
# In a rule, "*" stands for any characters, and so does "**".
_STARS = re.compile(r"\*+")

# Characters RFC 3986 allows in a path and query as they are: unreserved, reserved (gen-
# and sub-delims, which keep their own meaning and their own spelling) and "%".
_URI_CHARS = r"A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;="
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SPELLED_ONE_WAY = re.compile(f"[{_URI_CHARS}]*").fullmatch
_TO_RESPELL = re.compile(f"%[0-9A-Fa-f]{{2}}|[^{_URI_CHARS}%]")

# The path and query of a URL as Google's parser finds them (robots.cc, GetPathParamsQuery):
# after "scheme://host" (or "//host"), from the first "/", "?" or ";" up to a "#".
_PATH_OF = re.compile(r"(?://)?(?:[^/?;#]*://)?[^/?;#]*([/?;][^#]*)?")


def _respell(match: re.Match[str]) -> str:
    text = match.group()
    if text[0] == "%":
        char = chr(int(text[1:], 16))
        return char if char in _UNRESERVED else text.upper()
    return "".join(f"%{byte:02X}" for byte in text.encode("utf-8", "surrogatepass"))


def normalize(path: str) -> str:
    """``path`` in the one spelling rules and URLs are compared in (RFC 9309 2.2.2).

    RFC 3986's equivalences: an escaped unreserved character (``%62`` for ``b``) is the
    character; other escapes are upper-cased (``%e3`` is ``%E3``) and stay escaped (``%2F``
    is not ``/``); a character a URI cannot hold as it is (non-ASCII, space, ``"``, ``{``,
    ...) is escaped as UTF-8. ``*`` and ``$`` are reserved characters, left as they are.
    """
    if _SPELLED_ONE_WAY(path):
        return path
    return _TO_RESPELL.sub(_respell, path)


def path_of(url: str) -> str:
    """The part of ``url`` rules are matched against: its path and query, ``/`` if none."""
    match = _PATH_OF.match(url)
    path = match.group(1) if match is not None else None
    if not path:
        return "/"
    return path if path[0] == "/" else "/" + path


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``allow`` or ``disallow`` line.

    Attributes:
        allow: True for ``allow``.
        path: The rule's path, normalised, without a final ``$``.
        anchored: The rule ended in ``$``: the URL must end where the path does.
    """

    allow: bool
    path: str
    anchored: bool
    # The path cut at its "*"s, or None when it has none.
    parts: tuple[str, ...] | None = field(default=None, compare=False)

    @classmethod
    def from_value(cls, allow: bool, value: str) -> Rule:
        anchored = value.endswith("$")
        path = normalize(value[:-1] if anchored else value)
        parts = tuple(_STARS.split(path)) if "*" in path else None
        return cls(allow=allow, path=path, anchored=anchored, parts=parts)

    @property
    def length(self) -> int:
        """The rule's weight against another rule that also matches: its octets."""
        return len(self.path) + self.anchored

    def matches(self, path: str) -> bool:
        """True if the rule applies to ``path`` (normalised)."""
        parts = self.parts
        if parts is None:
            return path == self.path if self.anchored else path.startswith(self.path)
        # "*" matches any characters: each part at its earliest place after the one before
        # leaves the most room for the rest, so the first fit found is a fit if any is.
        first, *middle, last = parts
        if not path.startswith(first):
            return False
        start = len(first)
        for part in middle:
            found = path.find(part, start)
            if found < 0:
                return False
            start = found + len(part)
        if self.anchored:
            return len(path) - len(last) >= start and path.endswith(last)
        return path.find(last, start) >= 0


@dataclass(frozen=True, slots=True)
class AgentRules:
    """What one robots.txt says to one product token.

    Attributes:
        rules: The rules of the groups that apply, longest first, ``allow`` before a
            ``disallow`` of the same length: the first that matches decides.
        crawl_delay: Seconds between requests those groups ask for (the largest, if they
            say it more than once), or None.
        sitemaps: The URLs of every ``Sitemap:`` line, as written; they apply to every agent.
    """

    rules: tuple[Rule, ...] = ()
    crawl_delay: float | None = None
    sitemaps: tuple[str, ...] = ()
    # Derived from rules, for allowed(): every plain rule's path, the rules with a "*",
    # and whether any rule disallows at all.
    _prefixes: tuple[str, ...] = field(default=(), compare=False, repr=False)
    _wildcards: tuple[Rule, ...] = field(default=(), compare=False, repr=False)
    _refuses: bool = field(default=False, compare=False, repr=False)

    @classmethod
    def build(
        cls, rules: list[Rule], crawl_delay: float | None, sitemaps: tuple[str, ...]
    ) -> AgentRules:
        ordered = tuple(sorted(rules, key=lambda rule: (-rule.length, not rule.allow)))
        return cls(
            rules=ordered,
            crawl_delay=crawl_delay,
            sitemaps=sitemaps,
            _prefixes=tuple(rule.path for rule in ordered if rule.parts is None),
            _wildcards=tuple(rule for rule in ordered if rule.parts is not None),
            _refuses=any(not rule.allow for rule in ordered),
        )

    @property
    def may_refuse(self) -> bool:
        """Whether any URL could be refused: False when no rule that applies disallows.

        Many files refuse nothing: ``Disallow:`` with no path (the classic "crawl
        everything"), only ``Allow`` lines, or rules for other crawlers alone. Knowing it
        lets :meth:`allowed` answer at once, and lets a store skip looking up every link
        it finds (see ``OriginScheduler.turns_away``).
        """
        return self._refuses

    def allowed(self, url: str) -> bool:
        """True if the rules let this agent fetch ``url``."""
        if not self._refuses:
            return True  # only a disallow rule can refuse, and there is none
        path = normalize(path_of(url))
        if path == "/robots.txt":  # RFC 9309 2.2.2: "implicitly allowed"
            return True
        # A path that starts with no plain rule's path can only meet the rules with a "*".
        rules = self.rules if path.startswith(self._prefixes) else self._wildcards
        for rule in rules:
            if rule.matches(path):
                return rule.allow
        return True


@dataclass(slots=True)
class _Group:
    tokens: list[str] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    has_rules: bool = False  # an allow/disallow line was read: a user-agent line starts anew


def _record(line: str) -> tuple[str, str] | None:
    """The key (one of ``_KEYS``' values) and value of a line, or None if it is no record."""
    key, colon, value = line.partition(":")
    if colon:
        name = _KEYS.get(key.strip(_BLANKS).lower())
        if name is not None:
            return name, value.strip(_BLANKS)
    # Google-specific leniency (robots_test.cc, ID_LineSyntax_Line): a key and a value with
    # blanks between them and no colon, as in "Disallow /x"; also "Sitemap http://...",
    # whose only colon is the URL's.
    words = _WORDS.findall(line)
    if len(words) == 2:
        name = _KEYS.get(words[0].lower())
        if name is not None:
            return name, words[1]
    return None


def _product_token(value: str) -> str:
    """The token a ``user-agent`` line names, lower-case: ``*``, or "" for none."""
    # Google: "* anything" is still the global group (robots.cc, HandleUserAgent).
    if value[:1] == "*" and value[1:2] in ("", " ", "\t"):
        return "*"
    match = _TOKEN.match(value)
    return match.group().lower() if match is not None else ""


def _crawl_delay(value: str) -> float | None:
    """A ``Crawl-delay`` value in seconds, or None if it is not a number of them."""
    try:
        seconds = float(value) if value.isascii() else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def parse(text: str, product_token: str) -> AgentRules:
    """The rules ``text`` (a robots.txt file) gives the crawler named ``product_token``.

    Args:
        text: The file, decoded.
        product_token: The crawler's name as robots.txt groups name it (``trio-crawler``),
            compared case-insensitively with each group's token.
    """
    text = text.removeprefix("\ufeff")
    groups: list[_Group] = []
    sitemaps: list[str] = []
    group: _Group | None = None
    for raw_line in _LINES.split(text):
        line = raw_line.partition("#")[0]
        if not line.strip(_BLANKS):
            continue
        record = _record(line)
        if record is None:
            continue
        key, value = record
        if key == "user-agent":
            if group is None or group.has_rules:
                group = _Group()
                groups.append(group)
            token = _product_token(value)
            if token:
                group.tokens.append(token)
        elif key == "sitemap":
            if value:
                sitemaps.append(value)
        elif group is None:
            continue  # a rule or a delay before any user-agent line belongs to no group
        elif key == "crawl-delay":
            delay = _crawl_delay(value)
            if delay is not None:
                group.delays.append(delay)
        else:
            group.has_rules = True
            if value:  # "Disallow:" with no path disallows nothing (RFC 9309 2.2.2)
                group.rules.append(Rule.from_value(key == "allow", value))
    wanted = product_token.lower()
    chosen = [group for group in groups if wanted in group.tokens]
    if not chosen:
        chosen = [group for group in groups if "*" in group.tokens]
    delays = [delay for group in chosen for delay in group.delays]
    return AgentRules.build(
        [rule for group in chosen for rule in group.rules],
        crawl_delay=max(delays, default=None),
        sitemaps=tuple(sitemaps),
    )

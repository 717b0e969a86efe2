"""Scope, robots.txt origins and roots on the WHATWG URL Standard's spelling of a URL.

The seen-set, the scope check and robots.txt all work on :func:`normalize_url`'s output, so
each must read that spelling right: hosts in every number form and IDNA spelling are one
host, userinfo (whose ``@`` the standard encodes) is no part of an origin, and a root
typed on the command line means what a person means by it.
"""

from __future__ import annotations

import pytest

from trio_crawler._robots import origin_of
from trio_crawler._urls import Scope, normalize_root, normalize_url, url_host


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
    ("root", "expected"),
    [
        pytest.param("localhost:8000", "http://localhost:8000/", id="host-port-not-a-scheme"),
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

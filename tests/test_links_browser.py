"""A crawl follows the URLs a browser would: the server sees exactly those requests.

Each href on the page below is one a browser resolves by the WHATWG URL Standard in a way
``urllib.parse`` does not (dot segments, ``%2e%2e``, backslashes, tabs and newlines, a
scheme-relative ``http:`` path, IPv4 number forms, an empty query kept); the crawl must
request exactly what the browser would, on every engine.
"""

from __future__ import annotations

import anyio
import pytest

from conftest import Engine
from httpserver import Reply, open_test_server

pytestmark = pytest.mark.anyio

HANG = 60  # seconds (virtual on Trio) after which the crawl is hung

# href on /dir/page.html -> the request target a browser sends for it
TRICKY = {
    "../dir/./dots": "/dir/dots",
    "sub/%2e%2e/encoded-dots": "/dir/encoded-dots",
    "\\dir\\backslash": "/dir/backslash",
    "tab\tand\nnewline": "/dir/tabandnewline",
    "http:scheme-relative": "/dir/scheme-relative",
    "/query?": "/query?",
    "/Case/%7Esame": "/Case/%7Esame",  # escapes are kept as written
}


async def test_the_server_sees_what_a_browser_would_request(engine: Engine) -> None:
    async with open_test_server() as server:
        port = server.port
        hrefs = {
            **TRICKY,
            f"http://0x7f.1:{port}/ipv4-hex": "/ipv4-hex",
            f"http://2130706433:{port}/ipv4-decimal": "/ipv4-decimal",
            f"http://127.0.0.1.:{port}/trailing-dot": "/trailing-dot",  # the dot goes
            "http://1.2.3.08/": None,  # browsers refuse it
        }
        links = "".join(f'<a href="{href}">x</a>\n' for href in hrefs)
        server.route("/dir/page.html", Reply.html(links))
        crawler = engine.crawler([server.url("/dir/page.html")], obey_robots=False, max_tasks=4)
        with anyio.fail_after(engine.seconds(HANG)):
            await crawler.crawl()
    expected = {target for target in hrefs.values() if target is not None}
    assert set(server.requests) == {"/dir/page.html", *expected}
    assert len(server.requests) == len(set(server.requests))  # each once

"""What the examples share that is not their lesson: where to crawl, and reading a response.

Every example takes an optional root URL. Without one it starts ``python -m trio_crawler
--serve-demo`` in a child process, reads the URL from the line it prints, and stops it
when the example ends, so each example runs offline on its own. (The demo server is a
separate process so that the synchronous examples, which run an event loop of their own,
can crawl it too.)
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, urldefrag, urljoin, urlsplit

# Good enough for the demo's markup; the library uses a real HTML parser instead.
HREF = re.compile(rb"""href=["']([^"']+)["']""", re.IGNORECASE)
# Left as they are when a URL is percent-encoded: RFC 3986 reserved and unreserved, and "%".
URL_SAFE = "/%:@!$&'()*+,;=-._~?#"


@contextmanager
def demo_root(argv: list[str] | None = None) -> Iterator[str]:
    """Yield the root URL to crawl: ``argv[1]`` if given, else a freshly served demo site."""
    argv = sys.argv if argv is None else argv
    if len(argv) > 1:
        yield argv[1]
        return
    server = subprocess.Popen(
        [sys.executable, "-m", "trio_crawler", "--serve-demo"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # "Serving the demo site at http://127.0.0.1:N/ ..."
        if not line:
            raise RuntimeError("the demo server exited before printing its URL")
        yield line.split()[5]
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()


def parse_response(url: str, response: bytes) -> tuple[str, set[str]]:
    """The status code, and for an HTML 200 the same-host http links, without fragments.

    For the hand-made crawlers of examples 01 and 02, which speak HTTP/1.0 over raw sockets.
    """
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *headers = head.decode("latin-1").lower().split("\r\n")
    words = status_line.split()
    status = words[1] if len(words) > 1 else "error"  # No status line: nothing came back.
    if status != "200" or not any(
        h.startswith("content-type:") and "text/html" in h for h in headers
    ):
        return status, set()
    links = set()
    for match in HREF.finditer(body):
        # Latin-1 never fails to decode; quote() then spells non-ASCII as UTF-8 escapes.
        link = quote(urldefrag(urljoin(url, match.group(1).decode("latin-1"))).url, safe=URL_SAFE)
        parts = urlsplit(link)
        if parts.scheme == "http" and parts.netloc == urlsplit(url).netloc:
            links.add(link)
    return status, links

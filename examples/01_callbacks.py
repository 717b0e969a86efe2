"""Stage 1 of the chapter: a crawler made of callbacks on a ``selectors`` event loop.

What it shows: non-blocking sockets, one ``selectors.DefaultSelector``, and a ``Fetcher``
whose steps are callbacks registered on the selector: ``fetch`` starts connecting and
registers ``connected``; ``connected`` sends the request and registers ``read_response``;
``read_response`` runs once per chunk until EOF, then starts a new ``Fetcher`` for every new
link. There is no concurrency cap: every URL gets its socket at once, as in the chapter.

What to notice: the fetch of one URL is smeared across three methods, and everything it
needs later (the socket, the bytes so far) must be saved on ``self`` by hand. The global
``urls_todo`` set and ``stopped`` flag are how the loop learns that the crawl is over.
Nothing needs a lock: a callback is never interrupted by another one.

What it lacks, compared with stage 2 (``02_generator_coroutines.py``): a way to write one
fetch as one function, with local variables that survive each wait. Like the chapter's first
stage it also lacks redirects (a 3xx is just recorded), retries and error reports: a failed
connection or read just ends that URL. Links come from a naive ``href`` regex (in ``_demo``,
shared with stage 2); the library uses a real HTML parser (``trio_crawler._links``), which
also honours ``<base>`` and charsets.

Run it::

    python examples/01_callbacks.py [ROOT_URL]

Without ROOT_URL it serves the bundled demo site itself. It prints ``fetched <url> <status>``
per URL, then ``<N> urls fetched``.
"""

from __future__ import annotations

from _demo import demo_root, parse_response  # first: it explains a missing dependency

import socket
from contextlib import suppress
from selectors import EVENT_READ, EVENT_WRITE, DefaultSelector, SelectorKey
from urllib.parse import urlsplit

# The characters left as they are when a URL is percent-encoded (RFC 3986 reserved and
# unreserved, plus "%" so an already-encoded URL is not encoded twice).
URL_SAFE = "/%:@!$&'()*+,;=-._~?#"

selector = DefaultSelector()
urls_todo: set[str] = set()
seen_urls: set[str] = set()
stopped = False
fetched = 0


class Fetcher:
    """Fetches one URL through three callbacks, then starts fetchers for its new links."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.response = b""
        self.sock: socket.socket | None = None

    def fetch(self) -> None:
        parts = urlsplit(self.url)
        self.sock = socket.socket()
        self.sock.setblocking(False)
        with suppress(BlockingIOError):  # Connecting is under way: "writable" says when done.
            self.sock.connect((parts.hostname, parts.port or 80))
        selector.register(self.sock, EVENT_WRITE, self.connected)

    def connected(self, key: SelectorKey, mask: int) -> None:
        assert self.sock is not None
        selector.unregister(key.fd)
        parts = urlsplit(self.url)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        request = f"GET {target} HTTP/1.0\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
        try:
            # The request is small, so, like the chapter, we assume one send() takes it all.
            self.sock.send(request.encode("ascii"))
        except OSError:  # The connection was refused.
            self.finish()
            return
        selector.register(key.fd, EVENT_READ, self.read_response)

    def read_response(self, key: SelectorKey, mask: int) -> None:
        assert self.sock is not None
        try:
            chunk = self.sock.recv(4096)  # 4k chunk size, as in the chapter.
        except OSError:  # Reset by the server: keep what arrived, like EOF.
            chunk = b""
        if chunk:
            self.response += chunk  # Not done: the loop calls us again when readable.
            return
        selector.unregister(key.fd)
        self.finish()

    def finish(self) -> None:
        """Record this URL, start fetchers for new links, and stop the loop when none is left."""
        global stopped, fetched
        assert self.sock is not None
        self.sock.close()
        status, links = parse_response(self.url, self.response)
        print(f"fetched {self.url} {status}")
        fetched += 1
        for link in links.difference(seen_urls):
            urls_todo.add(link)
            Fetcher(link).fetch()  # <- New Fetcher, no cap.
        seen_urls.update(links)
        urls_todo.remove(self.url)
        if not urls_todo:
            stopped = True


def loop() -> None:
    while not stopped:
        events = selector.select()
        for event_key, event_mask in events:
            callback = event_key.data
            callback(event_key, event_mask)


def main() -> None:
    with demo_root() as root:
        urls_todo.add(root)
        seen_urls.add(root)
        Fetcher(root).fetch()
        loop()
        selector.close()
    print(f"{fetched} urls fetched")


if __name__ == "__main__":
    main()

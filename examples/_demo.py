"""Where the examples crawl: a URL you give them, or the bundled demo site, started here.

Every example takes an optional root URL. Without one it starts ``python -m trio_crawler
--serve-demo`` in a child process, reads the URL from the line it prints, and stops it
when the example ends, so each example runs offline on its own. (The demo server is a
separate process so that the synchronous examples, which run an event loop of their own,
can crawl it too.)
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


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

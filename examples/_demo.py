"""What the examples share that is not their lesson: where to crawl, and reading a response.

Every example takes an optional root URL. Without one it starts ``python -m trio_crawler
--serve-demo`` in a child process, reads the URL from the line it prints, and stops it
when the example ends, so each example runs offline on its own. (The demo server is a
separate process so that the synchronous examples, which run an event loop of their own,
can crawl it too.)

Run with a Python that lacks trio_crawler's dependencies (``python3 examples/...`` in a
fresh shell, rather than the project's ``.venv/bin/python``), an example says so in one
line, naming the missing module: importing this module first installs that explanation
(:func:`_explain_missing_module`), and a demo server that could not start for the same
reason is reported the same way. Each example imports it before anything else for that.
(A handler example loaded by ``trio-crawler --handler`` imports it too; the explanation is
installed only when the script run is an example.)
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from urllib.parse import quote, urldefrag, urljoin, urlsplit

# Good enough for the demo's markup; the library uses a real HTML parser instead.
HREF = re.compile(rb"""href=["']([^"']+)["']""", re.IGNORECASE)
# Left as they are when a URL is percent-encoded: RFC 3986 reserved and unreserved, and "%".
URL_SAFE = "/%:@!$&'()*+,;=-._~?#"


INSTALL = "python3 -m venv .venv && .venv/bin/pip install -e ."


def _explain_missing_module(
    kind: type[BaseException], value: BaseException, traceback: TracebackType | None
) -> None:
    """``sys.excepthook``: a module missing from this Python is one line saying what to do;
    anything else is Python's usual traceback."""
    name = value.name if isinstance(value, ModuleNotFoundError) else None
    if name is None or name.partition(".")[0] in sys.stdlib_module_names:
        _usual_hook(kind, value, traceback)
        return
    script = sys.argv[0] or "the example"
    print(
        f"{script}: no module named {name!r} in this Python ({sys.executable}): the examples "
        f"need trio_crawler's dependencies; run .venv/bin/python {script} after {INSTALL}",
        file=sys.stderr,
    )


_usual_hook = sys.excepthook
# Only for an example run as a script: a handler of examples 07-09 loaded by the command
# line (``--handler examples/08_extract.py:...``) imports this module too, into a process
# whose errors are not an example's to explain.
_main_file = getattr(sys.modules.get("__main__"), "__file__", None) or ""
if Path(_main_file).resolve().parent == Path(__file__).resolve().parent:
    sys.excepthook = _explain_missing_module


@contextmanager
def demo_root(argv: list[str] | None = None) -> Iterator[str]:
    """Yield the root URL to crawl: ``argv[1]`` if given, else a freshly served demo site.

    Raises:
        ModuleNotFoundError: The demo server could not start: this Python lacks one of
            trio_crawler's dependencies (named as the server's own import failed).
    """
    argv = sys.argv if argv is None else argv
    if len(argv) > 1:
        yield argv[1]
        return
    # The server's stderr goes to a file, read if it exits before printing its URL (why it
    # did), else passed on once it is stopped.
    with tempfile.TemporaryFile() as errors:
        server = subprocess.Popen(
            [sys.executable, "-m", "trio_crawler", "--serve-demo"],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        line = ""
        try:
            assert server.stdout is not None
            line = server.stdout.readline()  # "Serving the demo site at http://127.0.0.1:N/ ..."
            if not line:
                server.wait(timeout=10)
                errors.seek(0)
                _why_the_server_exited(errors.read().decode(errors="replace"))
            yield line.split()[5]
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=10)
            if server.stdout is not None:
                server.stdout.close()
            if line:
                errors.seek(0)
                sys.stderr.write(errors.read().decode(errors="replace"))


def _why_the_server_exited(log: str) -> None:
    """Raise what stopped the demo server before it served: a module missing, or else its
    log."""
    missing = re.search(r"^ModuleNotFoundError: No module named '([^']+)'", log, re.MULTILINE)
    if missing is not None:
        raise ModuleNotFoundError(f"No module named {missing[1]!r}", name=missing[1])
    raise RuntimeError(f"the demo server exited before printing its URL:\n{log}")


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

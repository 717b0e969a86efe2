"""Serve a directory with a private nginx on 127.0.0.1, for benchmarks.

Why nginx: a crawl benchmark should measure the crawler. A Python server on the same two
cores would spend as much CPU serving a page as the crawler spends fetching it, and its
cost would vary with the crawler's connection pattern. nginx serves a static file in a few
microseconds of C, so what varies between runs is the client.

Theory of operation
-------------------
:func:`serve_directory` writes its own ``nginx.conf`` into a temporary directory and starts
``nginx -p TMP -c TMP/nginx.conf -e TMP/error.log`` as a child process with ``daemon off``
and ``master_process off``: one process, which is the PID we stop. Nothing of the system's
nginx is used: not its config, its log files, its pid file or its temp directories
(``/var/lib/nginx``), all of which point into the temporary directory instead. With the
master process off nginx never switches user, so it can read a private temporary directory
(``mkdtemp`` makes it mode 0700) even when run as root.

The port is picked by binding port 0 on 127.0.0.1 and closing the socket; another process
could take it before nginx binds, so a start that fails with "Address already in use" is
retried on a fresh port a few times. Readiness is polled: a bounded number of connection
attempts, then one GET of ``/`` that must answer 200. Keep-alive is effectively unlimited
(``keepalive_requests``), so a client's connection pattern, not the server's, decides how
often connections are made.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

# Debian puts nginx in /usr/sbin, which is not on every user's PATH.
_FALLBACK_NGINX = "/usr/sbin/nginx"
INSTALL_HINT = "install it with `apt-get install nginx-light`, or set NGINX=/path/to/nginx"
# Readiness: nginx listens within milliseconds of starting; 200 attempts 25 ms apart give
# a loaded machine five seconds before we give up.
_READY_ATTEMPTS = 200
_READY_INTERVAL = 0.025
# Fresh ports to try when the one we picked was taken before nginx could bind it.
_PORT_ATTEMPTS = 5
# Seconds nginx gets to exit after SIGTERM (it closes its sockets and exits at once) before
# it is killed.
_STOP_TIMEOUT = 5.0
# One request per connection would measure connection setup; this keeps every connection
# open for the whole crawl, whatever the client does.
KEEPALIVE_REQUESTS = 100_000

_CONFIG = """\
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    types {{
        text/html html;
    }}
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests {keepalive_requests};
    keepalive_timeout 300s;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;

    server {{
        listen 127.0.0.1:{port};
        root {root};
        index index.html;
    }}
}}
"""


class NginxError(RuntimeError):
    """nginx is missing, or did not start and answer."""


def find_program(variable: str, name: str, fallback: str) -> str | None:
    """A server the harness starts: ``$variable``, else ``name`` on PATH, else Debian's
    ``fallback`` path (for when /usr/sbin is not on PATH); None if none is executable."""
    candidate = os.environ.get(variable) or shutil.which(name)
    if candidate is None and os.access(fallback, os.X_OK):
        candidate = fallback
    if candidate is None or not os.access(candidate, os.X_OK):
        return None
    return candidate


def find_nginx() -> str:
    """The nginx binary: ``$NGINX``, else ``nginx`` on PATH, else Debian's /usr/sbin/nginx.

    Raises:
        NginxError: If none of them exists, with the command that installs it.
    """
    candidate = find_program("NGINX", "nginx", _FALLBACK_NGINX)
    if candidate is None:
        raise NginxError(f"nginx not found: {INSTALL_HINT}")
    return candidate


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def serve_directory(root: str | Path) -> Iterator[str]:
    """Serve ``root`` over HTTP on 127.0.0.1 and yield its base URL (``http://127.0.0.1:N/``).

    nginx is stopped by its PID when the block exits, however it exits.

    Raises:
        NginxError: If nginx is missing, or exits or stays silent instead of serving.
    """
    nginx = find_nginx()
    root = Path(root).resolve()
    with tempfile.TemporaryDirectory(prefix="bench-nginx-") as tmp:
        for _ in range(_PORT_ATTEMPTS):
            port = free_port()
            config = Path(tmp, "nginx.conf")
            config.write_text(
                _CONFIG.format(tmp=tmp, port=port, root=root, keepalive_requests=KEEPALIVE_REQUESTS)
            )
            process = start_nginx(nginx, tmp, config)
            try:
                if _wait_ready(process, port):
                    yield f"http://127.0.0.1:{port}/"
                    return
                log = _error_log(tmp)
                if "Address already in use" not in log:
                    raise NginxError(f"nginx did not start on 127.0.0.1:{port}:\n{log}")
            finally:
                stop_process(process)
        raise NginxError(f"nginx found no free port in {_PORT_ATTEMPTS} attempts")


def start_nginx(nginx: str, tmp: str, config: Path) -> subprocess.Popen[bytes]:
    """Start ``nginx`` with ``config``, its prefix and error log in ``tmp``; its stderr goes
    to ``tmp/stderr.log``, a file, not a pipe that nobody reads while it runs."""
    with Path(tmp, "stderr.log").open("wb") as stderr:
        return subprocess.Popen(
            [nginx, "-p", tmp, "-c", str(config), "-e", f"{tmp}/error.log"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def _wait_ready(process: subprocess.Popen[bytes], port: int) -> bool:
    """Poll until nginx accepts connections and serves ``/``; False if it exited first."""
    for _ in range(_READY_ATTEMPTS):
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(_READY_INTERVAL)
    else:
        raise NginxError(
            f"nginx did not accept connections on 127.0.0.1:{port} in "
            f"{_READY_ATTEMPTS * _READY_INTERVAL:g} s"
        )
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
        if response.status != 200:
            raise NginxError(f"nginx answered / with {response.status}, not 200")
    return True


def _error_log(tmp: str) -> str:
    parts = []
    for name in ("stderr.log", "error.log"):
        with contextlib.suppress(OSError):
            parts.append(Path(tmp, name).read_text(errors="replace"))
    return "".join(parts)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Stop a server the harness started, by its PID: SIGTERM (nginx's fast shutdown, and
    redis-server's), then SIGKILL if it is still there after a few seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

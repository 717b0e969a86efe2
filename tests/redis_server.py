"""A real ``redis-server`` for a test: its own port on 127.0.0.1, its own directory, no
persistence, stopped by its PID.

The server is ready when it says so on its log ("Ready to accept connections"), read as it
comes: no sleep decides it. Debian's package ``redis-server`` provides the binary; CI
installs it when it is missing. On a machine without it, a test that needs a server fails
with one line saying what to install (:func:`find_redis_server`), not with a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

MISSING = (
    "redis-server is not on PATH: the tests of --frontier need a real Redis server "
    "(Debian/Ubuntu: apt-get install redis-server)"
)
READY = "Ready to accept connections"
START_LIMIT = 30.0


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[str]
    scheme: str = "redis"
    password: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def url(self, db: int = 0, *, password: str | None = None, query: str = "") -> str:
        secret = password if password is not None else self.password
        auth = f":{secret}@" if secret else ""
        return f"{self.scheme}://{auth}127.0.0.1:{self.port}/{db}{query}"

    def kill(self) -> None:
        """SIGKILL the server (a lost server, for the crawl)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.process.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def find_redis_server() -> str:
    """The ``redis-server`` on PATH; without one, the test fails with :data:`MISSING`.

    Looked up when a server is started, not when this module is imported, so that a missing
    binary fails the tests that need it, one line each, and no other.
    """
    found = shutil.which("redis-server")
    if found is None:
        pytest.fail(MISSING, pytrace=False)
    return found


@contextlib.contextmanager
def running_redis(
    directory: Path, *extra: str, password: str | None = None, port: int | None = None
) -> Iterator[RedisServer]:
    """Start a server in ``directory``; stop it by its PID on the way out.

    ``extra`` are more ``redis-server`` arguments (TLS, for one); with ``password`` the
    server requires it. ``port`` is a free one unless given: the port of a server that was
    stopped, to start it again (it loads the ``dump.rdb`` that ``SHUTDOWN SAVE`` left in
    ``directory``).
    """
    binary = find_redis_server()
    directory.mkdir(parents=True, exist_ok=True)
    tls = "--tls-port" in extra
    port = free_port() if port is None else port
    ports = ["--port", "0", "--tls-port", str(port)] if tls else ["--port", str(port)]
    args = [
        binary,
        *ports,
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(directory),
        *(arg for arg in extra if arg != "--tls-port"),
    ]
    if password is not None:
        args += ["--requirepass", password]
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    drain: threading.Thread | None = None
    server = RedisServer(port, process, scheme="rediss" if tls else "redis", password=password)
    try:
        assert process.stdout is not None
        log = []
        deadline = time.monotonic() + START_LIMIT
        for line in process.stdout:  # blocks until the server writes, or exits
            log.append(line)
            if READY in line:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start:\n" + "".join(log))
        else:
            raise RuntimeError("redis-server exited:\n" + "".join(log))
        # Keep reading its log, so that a full pipe never blocks the server.
        drain = threading.Thread(target=process.stdout.read, daemon=True)
        drain.start()
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        if process.stdout is not None:
            if drain is not None:
                drain.join(timeout=10)  # it ends at the log's end, once the server exited
            process.stdout.close()


def create_args(
    prefix: str,
    clock: str,
    roots: list[str],
    options: str,
    *,
    obey: str,
    delay: str,
    per_host: str,
    redirects: str = "10",
) -> list[str]:
    """The arguments of ``create.lua`` that create the crawl of ``roots`` (see the script's
    header), as a process sends them once the crawl is found absent: the roots' digest,
    the settings, the roots' JSON, and each root with its origin."""
    from trio_crawler._robots import origin_of

    listed = json.dumps(roots, separators=(",", ":"))
    digest = hashlib.sha1(listed.encode()).hexdigest()
    args = [prefix, clock, digest, options, obey, delay, per_host, redirects, listed]
    return args + [item for root in roots for item in (root, origin_of(root))]

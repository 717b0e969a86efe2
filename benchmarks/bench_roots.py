"""Hundreds of thousands of roots with ``-i``: the time to the first request, and memory.

The question: a crawl started from a long list of URLs (``-i FILE``) must not pay a
quadratic step or a copy of the list per URL. How long after the command starts does the
first request arrive, and what does the process peak at?

How it measures: a file of ``--roots`` URLs is written, spread round-robin over
``--hosts`` loopback addresses (127.0.0.1, 127.0.0.2, ...: one origin each, interleaved, the
worst case for the frontier's batches, which hold a run of roots on one origin), and the
command runs against a small threaded server on all of them, with ``--max-pages 200`` so
that only the start is measured. The server notes when the first request arrives; the
process's peak RSS and CPU come from ``os.wait4``. ``--store`` adds ``--state FILE`` or a
``--frontier URL`` given with it.

From the repository root::

    python benchmarks/bench_roots.py [--roots 200000 | --roots 25000,50000,100000,200000]
        [--hosts 1] [--state FILE | --frontier URL]

With several counts, each is crawled in turn and the slope of peak memory against the
number of roots is printed: the bytes one more root costs.
"""

from __future__ import annotations

import argparse
import http.server
import os
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


class _Page(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    first: float | None = None

    def do_GET(self) -> None:  # http.server calls it by this name
        if _Page.first is None:
            _Page.first = time.perf_counter()
        body = b"<html><body>ok</body></html>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def crawl_roots(count: int, options: argparse.Namespace, port: int) -> tuple[str, float]:
    """One crawl of ``count`` roots; its line for the output and its peak RSS in bytes."""
    _Page.first = None
    with tempfile.TemporaryDirectory() as directory:
        roots = Path(directory) / "roots.txt"
        with roots.open("w", encoding="utf-8") as file:
            for number in range(count):
                host = f"127.0.0.{1 + number % options.hosts}"
                file.write(f"http://{host}:{port}/d{number % 13}/page{number}.html\n")
        command = [sys.executable, "-m", "trio_crawler", "-i", str(roots), "--max-pages", "200"]
        command += ["-q", "--no-progress", "--ignore-robots", "-o", str(Path(directory) / "o")]
        if options.state:
            state = Path(f"{options.state}-{count}")
            state.unlink(missing_ok=True)
            command += ["--state", str(state)]
        if options.frontier:
            command += ["--frontier", options.frontier, "--crawl-id", f"roots-{count}"]
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        end = time.perf_counter()
    first = "never" if _Page.first is None else f"{_Page.first - start:.2f} s"
    line = (
        f"{count} roots on {options.hosts} hosts: first request after {first}, "
        f"exit {os.waitstatus_to_exitcode(status)} after {end - start:.2f} s, "
        f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB, CPU {usage.ru_utime + usage.ru_stime:.2f} s"
    )
    return line, usage.ru_maxrss * 1024.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--roots",
        default="200000",
        help="how many roots; several, comma-separated, also give the bytes per root",
    )
    parser.add_argument("--hosts", type=int, default=1, help="loopback addresses, 1 to 254")
    parser.add_argument("--state", help="crawl with --state FILE-N (a new file per count)")
    parser.add_argument("--frontier", help="crawl with --frontier URL")
    options = parser.parse_args()
    counts = sorted(int(part) for part in options.roots.split(","))
    server = _Server(("0.0.0.0", 0), _Page)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    peaks = []
    for count in counts:
        line, peak = crawl_roots(count, options, port)
        print(line, flush=True)
        peaks.append(peak)
    server.shutdown()
    if len(counts) > 1:
        # The least-squares slope of peak memory against roots: what one more root costs.
        mean_n = sum(counts) / len(counts)
        mean_m = sum(peaks) / len(peaks)
        slope = sum((n - mean_n) * (m - mean_m) for n, m in zip(counts, peaks, strict=True))
        slope /= sum((n - mean_n) ** 2 for n in counts)
        print(f"peak memory grows by {slope:.0f} bytes per root ({counts[0]} to {counts[-1]})")


if __name__ == "__main__":
    main()

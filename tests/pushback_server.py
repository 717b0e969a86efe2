"""Web sites that push back: rate limits, an in-flight cap and latency that grows with load.

Why: a polite crawler slows down when a server says it is overloaded (429, 503,
``Retry-After``) and speeds up again when it stops saying so. Checking that needs a server
that says so the way real ones do, and that keeps a log from which "how polite, and how
fast" can be computed the same way for every client: the crawler's tests (in their own task
group, on Trio, on asyncio and on Trio's virtual clock) and ``benchmarks/bench_pushback.py``
(which runs this file as a process and crawls it with several tools in turn).

Theory of operation
-------------------
:func:`open_pushback_server` starts one :class:`~httpserver.TestServer` per host, each on
a loopback address of its own (127.0.0.2, 127.0.0.3, ...: Linux routes all of 127/8 to
``lo``, so they are distinct hosts with no DNS) and a free port. Each host serves a site
of ``pages`` pages: the index ``/`` links to every page ``/page/N``, and each page links
back to the index and on to the next page, so a crawler learns the whole site from its
first answer and is tempted to fetch it all at once. ``/robots.txt`` allows everything.

Every request other than ``/robots.txt`` goes through the host's gate, in this order:

1. *in-flight cap*: if ``cap`` requests of this host are being served, the answer is 503;
2. *token bucket*: ``rate`` tokens a second, at most ``burst`` saved up (the bucket starts
   full); a request that finds no token gets 429;
3. otherwise it is served (the page, or 404 for a path outside the site) after
   ``base_latency + latency_per_request * n`` seconds, ``n`` being the requests this host
   is serving, this one included: an overloaded server answers slower.

Pushback answers (429 and 503) are sent at once, as a rate limiter in front of a site
sends them, and neither take a token nor count as in flight. On the hosts of even index
(the first, the third, ...) they carry ``Retry-After``: the whole seconds until the bucket
has a token again, rounded up, at least 1; on the others none, so a client must find its
own pace. ``/robots.txt`` is answered after ``base_latency`` without passing the gate: it
says nothing about pace, and a robots.txt that failed would measure the client's robots
rules instead.

Time is read with ``anyio.current_time()``, the event loop's clock, so on Trio's
``MockClock`` the bucket fills and the latency passes in virtual time. Every request is
logged as a :class:`LogEntry` (host, path, arrival, status, ``Retry-After``, client,
requests in flight); :func:`compute_metrics` turns a log into the figures the tests and
the benchmark judge (:class:`Metrics`).

Run alone, it serves until SIGTERM or Ctrl-C, printing each host's root URL on a line of
its own, then writes its options, hosts and log as JSON to ``--log``::

    python tests/pushback_server.py --hosts 4 --pages 200 --rate 20 --burst 5 --cap 4 \\
        --log pushback.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import signal
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from httpserver import Reply, Request, TestServer, open_test_server

# The pushback statuses: too many requests (the bucket is empty) and unavailable (the cap).
TOO_MANY = 429
UNAVAILABLE = 503
PUSHBACK = frozenset({TOO_MANY, UNAVAILABLE})
ROBOTS = "/robots.txt"
ROBOTS_TXT = "User-agent: *\nAllow: /\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class PushbackOptions:
    """The shape of the server; the defaults are the benchmark's.

    Attributes:
        hosts: Hosts, on 127.0.0.2, 127.0.0.3, ... (at most 250).
        pages: Pages per host, the index included.
        rate: Tokens per second per host: the most pages a host serves a second for long.
        burst: Tokens a host saves up (and starts with): requests it takes at once.
        cap: Requests a host serves at once; one more gets 503.
        base_latency: Seconds every served answer waits.
        latency_per_request: Seconds more per request the host is serving.
    """

    hosts: int = 4
    pages: int = 200
    rate: float = 20.0
    burst: int = 5
    cap: int = 4
    base_latency: float = 0.01
    latency_per_request: float = 0.01

    def __post_init__(self) -> None:
        if not 1 <= self.hosts <= 250:
            raise ValueError(f"hosts must be 1 to 250, not {self.hosts}")
        if self.pages < 1 or self.burst < 1 or self.cap < 1:
            raise ValueError("pages, burst and cap must be at least 1")
        if self.rate <= 0 or self.base_latency < 0 or self.latency_per_request < 0:
            raise ValueError("rate must be positive, the latencies not negative")

    @property
    def bound_s(self) -> float:
        """The least time a client can take for every page: ``pages / rate`` per host, the
        hosts side by side (a little generous: the bucket starts with ``burst`` tokens)."""
        return self.pages / self.rate


def host_address(index: int) -> str:
    """The loopback address of host ``index``: 127.0.0.2 for the first."""
    return f"127.0.0.{index + 2}"


def sends_retry_after(index: int) -> bool:
    """Whether host ``index`` says how long to wait: the first, the third, ..."""
    return index % 2 == 0


def site_paths(pages: int) -> list[str]:
    """The paths of a host's site: the index, then ``/page/1`` .. ``/page/{pages - 1}``."""
    return ["/", *(f"/page/{number}" for number in range(1, pages))]


def retry_after_seconds(wait: float) -> int:
    """``Retry-After`` for a token ``wait`` seconds away: whole seconds, rounded up, >= 1."""
    return max(1, math.ceil(wait))


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` kept; starts full.

    Pure arithmetic on the times it is given, so it can be checked without a clock.
    """

    def __init__(self, *, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._updated = now

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
        self._updated = max(self._updated, now)

    def wait(self, now: float) -> float:
        """Seconds from ``now`` until a token is there (0 if one is), taking none."""
        self._refill(now)
        return max(0.0, (1 - self._tokens) / self.rate)

    def take(self, now: float) -> float | None:
        """Take a token: None if there was one, else the seconds until there is one."""
        wait = self.wait(now)
        if wait > 0:
            return wait
        self._tokens -= 1
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class LogEntry:
    """One request as the server saw it.

    Attributes:
        host: The host's ``address:port``.
        path: The request target.
        arrival: Seconds from the server's start to the request's arrival; pushback
            answers leave at that same moment.
        status: The answer's status.
        retry_after: The ``Retry-After`` seconds sent with it, or None.
        client: The request's ``User-Agent``: whose Retry-After windows it falls in.
        in_flight: Requests of this host open when it arrived, this one included.
    """

    host: str
    path: str
    arrival: float
    status: int
    retry_after: int | None
    client: str
    in_flight: int


class PushbackHost:
    """One host's site, gate and counters."""

    def __init__(
        self, index: int, options: PushbackOptions, server: PushbackServer, *, now: float
    ) -> None:
        self.index = index
        self.options = options
        self.retry_after = sends_retry_after(index)
        self.bucket = TokenBucket(rate=options.rate, burst=options.burst, now=now)
        self.serving = 0  # requests past the gate and not yet answered
        self._server = server
        self._paths = frozenset(site_paths(options.pages))
        self.http: TestServer | None = None  # set once it listens

    @property
    def name(self) -> str:
        assert self.http is not None
        return f"{self.http.host}:{self.http.port}"

    async def answer(self, request: Request) -> Reply:
        """The gate, then the page: see the module's docstring for the order and why."""
        assert self.http is not None
        now = self._server.now()
        in_flight = self.http.in_flight
        path = request.target
        status, wait = self._gate(path, now)
        retry_after = None
        if wait is not None and self.retry_after:
            retry_after = retry_after_seconds(wait)
        self._server.log.append(
            LogEntry(
                host=self.name,
                path=path,
                arrival=now,
                status=status,
                retry_after=retry_after,
                client=request.headers.get("user-agent", ""),
                in_flight=in_flight,
            )
        )
        if status in PUSHBACK:
            headers = () if retry_after is None else (("retry-after", str(retry_after)),)
            return Reply(status=status, headers=(("content-type", "text/plain"), *headers))
        if path == ROBOTS:
            await anyio.sleep(self.options.base_latency)
            return Reply(
                status=200, headers=(("content-type", "text/plain"),), body=ROBOTS_TXT.encode()
            )
        self.serving += 1
        try:
            await anyio.sleep(
                self.options.base_latency + self.options.latency_per_request * self.serving
            )
        finally:
            self.serving -= 1
        return self._page(path) if status == 200 else Reply.html("not found", status=404)

    def _gate(self, path: str, now: float) -> tuple[int, float | None]:
        """The status for ``path`` at ``now``, and for pushback the seconds to a token."""
        if path == ROBOTS:
            return 200, None
        if self.serving >= self.options.cap:
            return UNAVAILABLE, self.bucket.wait(now)
        wait = self.bucket.take(now)
        if wait is not None:
            return TOO_MANY, wait
        return (200 if path in self._paths else 404), None

    def _page(self, path: str) -> Reply:
        if path == "/":
            links = site_paths(self.options.pages)[1:]
            title = "index"
        else:
            number = int(path.rsplit("/", 1)[1])
            links = ["/", f"/page/{number + 1 if number + 1 < self.options.pages else 1}"]
            title = f"page {number}"
        anchors = "".join(f'<a href="{link}">{link}</a>\n' for link in links)
        return Reply.html(
            f"<html><head><title>{title}</title></head><body><h1>{title}</h1>\n"
            f"<p>{'A page of a site that pushes back. ' * 8}</p>\n{anchors}</body></html>"
        )


class PushbackServer:
    """The running hosts and the log they share."""

    def __init__(self, options: PushbackOptions) -> None:
        self.options = options
        self.log: list[LogEntry] = []
        self.started = anyio.current_time()
        self.hosts = [PushbackHost(index, options, self, now=0.0) for index in range(options.hosts)]

    def now(self) -> float:
        """Seconds since the server started, on the event loop's clock."""
        return anyio.current_time() - self.started

    @property
    def roots(self) -> list[str]:
        """Each host's index URL, the roots of a crawl."""
        return [f"http://{host.name}/" for host in self.hosts]

    @property
    def host_names(self) -> list[str]:
        return [host.name for host in self.hosts]

    def metrics(self) -> Metrics:
        """The figures of the log so far (see :func:`compute_metrics`)."""
        return compute_metrics(
            self.log, hosts=self.host_names, pages=self.options.pages, rate=self.options.rate
        )


@asynccontextmanager
async def open_pushback_server(
    options: PushbackOptions | None = None,
) -> AsyncIterator[PushbackServer]:
    """Serve every host in task groups of their own, for as long as the block runs."""
    server = PushbackServer(options or PushbackOptions())
    async with AsyncExitStack() as stack:
        for host in server.hosts:
            host.http = await stack.enter_async_context(
                open_test_server(host=host_address(host.index))
            )
            host.http.fallback(host.answer)
        yield server


# -- what a log says ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Metrics:
    """How polite and how quick one client was, from the server's log.

    Attributes:
        pages: Pages per host.
        pages_ok: Per host (``address:port``), the site's pages answered 200 at least once.
        requests: Every request, ``/robots.txt`` included.
        pushback: Requests answered 429 or 503.
        inside_retry_after: Requests that arrived while a ``Retry-After`` the same host had
            sent the same client ran: in ``[answer, answer + Retry-After)`` of an earlier one.
        max_in_flight: The most requests one host had open at once.
        bound_s: ``pages / rate``: the least time the server allows for every page.
    """

    pages: int
    pages_ok: Mapping[str, int]
    requests: int
    pushback: int
    inside_retry_after: int
    max_in_flight: int
    bound_s: float

    @property
    def all_pages_ok(self) -> bool:
        return all(count == self.pages for count in self.pages_ok.values())

    @property
    def pushback_share(self) -> float:
        """Pushback answers over all requests, 0 to 1 (0 for no request)."""
        return self.pushback / self.requests if self.requests else 0.0


def compute_metrics(
    log: Iterable[LogEntry], *, hosts: Sequence[str], pages: int, rate: float
) -> Metrics:
    """The figures of a log of a server with ``hosts``, ``pages`` and ``rate``.

    ``hosts`` names every host, so one the client never reached counts with 0 pages.
    """
    entries = sorted(log, key=lambda entry: entry.arrival)  # stable: keeps arrival order
    site = frozenset(site_paths(pages))
    answered: dict[str, set[str]] = {host: set() for host in hosts}
    window_end: dict[tuple[str, str], float] = {}
    inside = pushback = 0
    for entry in entries:
        key = (entry.host, entry.client)
        if entry.arrival < window_end.get(key, -math.inf):
            inside += 1
        if entry.status in PUSHBACK:
            pushback += 1
        if entry.retry_after is not None:
            end = entry.arrival + entry.retry_after
            window_end[key] = max(window_end.get(key, -math.inf), end)
        if entry.status == 200 and entry.path in site:
            answered.setdefault(entry.host, set()).add(entry.path)
    return Metrics(
        pages=pages,
        pages_ok={host: len(paths) for host, paths in answered.items()},
        requests=len(entries),
        pushback=pushback,
        inside_retry_after=inside,
        max_in_flight=max((entry.in_flight for entry in entries), default=0),
        bound_s=pages / rate,
    )


# -- the log as a file -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ServedRun:
    """What a standalone server leaves behind: its options, its hosts and its log."""

    options: PushbackOptions
    hosts: list[str]
    log: list[LogEntry]

    def metrics(self) -> Metrics:
        return compute_metrics(
            self.log, hosts=self.hosts, pages=self.options.pages, rate=self.options.rate
        )


def write_run(path: Path, server: PushbackServer) -> None:
    """Write ``server``'s options, hosts and log to ``path`` as one JSON document."""
    document = {
        "options": dataclasses.asdict(server.options),
        "hosts": server.host_names,
        "log": [dataclasses.asdict(entry) for entry in server.log],
    }
    path.write_text(json.dumps(document))


def read_run(path: Path) -> ServedRun:
    """Read what :func:`write_run` wrote."""
    document = json.loads(path.read_text())
    return ServedRun(
        options=PushbackOptions(**document["options"]),
        hosts=list(document["hosts"]),
        log=[LogEntry(**entry) for entry in document["log"]],
    )


# -- standalone --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    defaults = PushbackOptions()
    parser = argparse.ArgumentParser(
        description="Serve sites that push back; print their roots; on SIGTERM or Ctrl-C "
        "write the log to --log."
    )
    parser.add_argument("--hosts", type=int, default=defaults.hosts)
    parser.add_argument("--pages", type=int, default=defaults.pages, help="per host")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="requests/s per host")
    parser.add_argument("--burst", type=int, default=defaults.burst)
    parser.add_argument("--cap", type=int, default=defaults.cap, help="in flight per host")
    parser.add_argument("--base-latency", type=float, default=defaults.base_latency)
    parser.add_argument("--latency-per-request", type=float, default=defaults.latency_per_request)
    parser.add_argument("--log", type=Path, help="where to write the log as JSON at exit")
    return parser


def options_from(args: argparse.Namespace) -> PushbackOptions:
    return PushbackOptions(
        hosts=args.hosts,
        pages=args.pages,
        rate=args.rate,
        burst=args.burst,
        cap=args.cap,
        base_latency=args.base_latency,
        latency_per_request=args.latency_per_request,
    )


async def serve(options: PushbackOptions, log: Path | None) -> None:
    """Serve until SIGTERM or SIGINT, then write the log (a caller waits for that file)."""
    import trio  # standalone only: the tests' server also runs on asyncio

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_pushback_server(options) as server:
            print("\n".join(server.roots), flush=True)
            async for _ in signals:
                break
        if log is not None:
            write_run(log, server)


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        options = options_from(args)
    except ValueError as exc:
        raise SystemExit(f"pushback_server: {exc}") from None
    anyio.run(serve, options, args.log, backend="trio")


if __name__ == "__main__":
    main()

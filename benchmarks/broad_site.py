"""A many-host static site for the broad-crawl benchmark, and what an nginx log says of a crawl.

Why: a broad crawl is many hosts crawled slowly, each one request at a time with a delay
between requests, all at once. A benchmark of it needs hundreds or thousands of hosts on one
machine, served by something that costs next to nothing, and a judge that sees every
request from outside the crawler: the server's access log.

Theory of operation
-------------------
Hosts are loopback addresses: host ``i`` is ``127.0.<1 + i // 250>.<1 + i % 250>``
(:func:`host_address`). Linux routes all of 127.0.0.0/8 to ``lo`` with no setup, so a server
can listen on each of them; ``127.0.0.*`` is left to the other benchmarks and tests. Every
host listens on the same port, and :func:`generate` writes one directory per host, named by
its address, which nginx serves as ``root DIR/$server_addr``. In each:

* ``robots.txt``, allowing everything to everyone (and with ``crawl_delay``, a ``Crawl-delay``);
* ``P`` pages: page 0 is ``index.html`` (served as ``/``), page ``j >= 1`` is ``p/<j>.html``;
* on every page, ``SAME_HOST_LINKS`` relative links to pages of the same host (its children
  in a ``BRANCHING``-ary tree, which spans the host from ``/``, its parent, and random
  ones), ``CROSS_HOST_LINKS`` absolute links to random pages of other hosts of the site,
  ``OFF_SITE_LINKS`` links to ``example.com`` and ``example.org`` (off the site: a crawler
  scoped to the roots' hosts never fetches them), and 2-6 KB of filler text.

So a crawl from every host's ``/`` that keeps to the same host finds every page, and one that
follows links across the site's hosts finds no more but sees each page linked from other
hosts too. Everything comes from ``random.Random(seed)``: the same arguments write the same
bytes. 500 hosts x 20 pages are about 40 MiB.

The log: nginx writes one line per request, ``$msec $server_addr $request_uri $status
$request_time $connection`` (:data:`LOG_FORMAT`). ``$msec`` is when the line was written,
after the response, and ``$request_time`` the time since the request's first byte, both in
milliseconds, so a request started at ``$msec - $request_time``. :func:`parse_log` reads the
lines, and :func:`measure` turns them into what the benchmark reports: pages fetched of all,
pages fetched more than once, the gaps between two request starts to one host that are
shorter than the delay (less a tolerance of 10 ms, the log's resolution and a clock's
jitter), and the most requests one host had in flight at once.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.synthetic_site import link_targets

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

# Addresses per third octet (127.0.x.1 .. 127.0.x.250), and third octets available (1-254).
HOSTS_PER_OCTET = 250
MAX_HOSTS = HOSTS_PER_OCTET * 254
# Links on each page: mostly to the same host, some across the site's hosts, some off it.
SAME_HOST_LINKS = 8
CROSS_HOST_LINKS = 2
OFF_SITE_LINKS = 1
# Children per page in each host's spanning tree: 20 pages are two levels below `/`.
BRANCHING = 5
# Filler text per page, in bytes; smaller than synthetic_site.py's 5-15 KB, as a broad crawl
# of 5000 hosts would otherwise write hundreds of MiB.
MIN_FILLER = 2 * 1024
MAX_FILLER = 6 * 1024
FILLER_PARAGRAPHS = 128
ROBOTS_TXT = "User-agent: *\nAllow: /\n"
# Gaps between two request starts to one host shorter than the delay by more than this are
# counted as too short: nginx logs milliseconds, and timers wake a little early or late.
GAP_TOLERANCE = 0.010
# The access log's format, for nginx's `log_format`.
LOG_FORMAT = "$msec $server_addr $request_uri $status $request_time $connection"

_VOCABULARY = (
    "host frontier politeness delay robots origin slot queue lease worker crawl seed "
    "breadth fetch page link scope record report redis state sqlite nursery deadline"
)
_WORDS = _VOCABULARY.split()
_PAGE = re.compile(r"/(?:p/(\d+)\.html)?")


def host_address(index: int) -> str:
    """The loopback address of host ``index`` (0-based): 127.0.1.1, 127.0.1.2, ..."""
    if not 0 <= index < MAX_HOSTS:
        raise ValueError(f"host index must be in [0, {MAX_HOSTS}), not {index!r}")
    return f"127.0.{1 + index // HOSTS_PER_OCTET}.{1 + index % HOSTS_PER_OCTET}"


def page_uri(page: int) -> str:
    """The request URI of page ``page`` on its host."""
    return "/" if page == 0 else f"/p/{page}.html"


@dataclass(frozen=True, slots=True, kw_only=True)
class BroadSite:
    """What :func:`generate` wrote.

    Attributes:
        directory: Holds one directory per host, named by its address.
        hosts: The hosts' addresses, in order.
        port: The port every host is served on (the cross-host links name it).
        pages_per_host: Pages on each host.
        total_bytes: Bytes of HTML written.
    """

    directory: Path
    hosts: tuple[str, ...]
    port: int
    pages_per_host: int
    total_bytes: int

    @property
    def pages(self) -> int:
        return len(self.hosts) * self.pages_per_host

    @property
    def roots(self) -> list[str]:
        """Every host's ``/``: the crawl's roots."""
        return [f"http://{host}:{self.port}/" for host in self.hosts]


def generate(
    directory: str | Path,
    *,
    hosts: int,
    pages: int,
    port: int,
    seed: int = 0,
    crawl_delay: float | None = None,
) -> BroadSite:
    """Write ``hosts`` hosts of ``pages`` pages each into ``directory`` (created if missing);
    with ``crawl_delay``, each robots.txt also asks for that many seconds between requests.

    Raises:
        ValueError: If ``hosts`` or ``pages`` is below 1, or ``hosts`` above
            :data:`MAX_HOSTS`.
    """
    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"hosts must be in [1, {MAX_HOSTS}], not {hosts!r}")
    if pages < 1:
        raise ValueError(f"pages must be >= 1, not {pages!r}")
    root = Path(directory)
    rng = random.Random(seed)
    pool = [_paragraph(rng) for _ in range(FILLER_PARAGRAPHS)]
    addresses = tuple(host_address(index) for index in range(hosts))
    robots = ROBOTS_TXT if crawl_delay is None else f"{ROBOTS_TXT}Crawl-delay: {crawl_delay:g}\n"
    total = 0
    for index, address in enumerate(addresses):
        host_root = root / address
        (host_root / "p").mkdir(parents=True, exist_ok=True)
        (host_root / "robots.txt").write_text(robots)
        for page in range(pages):
            html = _page(index, page, addresses, pages, port, rng, pool).encode()
            (host_root / ("index.html" if page == 0 else f"p/{page}.html")).write_bytes(html)
            total += len(html)
    return BroadSite(
        directory=root, hosts=addresses, port=port, pages_per_host=pages, total_bytes=total
    )


def _href(source: int, target: int) -> str:
    """A relative href from page ``source`` to page ``target`` of the same host."""
    if target == 0:
        return "./" if source == 0 else "../"
    return f"p/{target}.html" if source == 0 else f"{target}.html"


def _page(
    host: int,
    index: int,
    addresses: Sequence[str],
    pages: int,
    port: int,
    rng: random.Random,
    pool: Sequence[str],
) -> str:
    targets = link_targets(index, pages, branching=BRANCHING, links=SAME_HOST_LINKS, rng=rng)
    links = [f'<li><a href="{_href(index, target)}">page {target}</a></li>' for target in targets]
    if len(addresses) > 1:
        for _ in range(CROSS_HOST_LINKS):
            other = rng.randrange(len(addresses) - 1)
            other += other >= host  # any host but this one
            uri = page_uri(rng.randrange(pages))
            links.append(f'<li><a href="http://{addresses[other]}:{port}{uri}">elsewhere</a></li>')
    for number in range(OFF_SITE_LINKS):
        domain = "example.com" if number % 2 == 0 else "example.org"
        links.append(f'<li><a href="http://{domain}/{host}/{index}">off site</a></li>')
    rng.shuffle(links)
    size = rng.randint(MIN_FILLER, MAX_FILLER)
    filler: list[str] = []
    written = 0
    while written < size:
        paragraph = rng.choice(pool)
        filler.append(f"<p>{paragraph}</p>")
        written += len(paragraph) + 7
    return (
        "<!DOCTYPE html>\n"
        f'<html><head><meta charset="utf-8"><title>Host {host} page {index}</title></head>\n'
        f"<body><h1>Host {host}, page {index}</h1>\n<ul>\n"
        + "\n".join(links)
        + "\n</ul>\n"
        + "\n".join(filler)
        + "\n</body></html>\n"
    )


def _paragraph(rng: random.Random) -> str:
    return " ".join(rng.choices(_WORDS, k=rng.randint(30, 90))).capitalize() + "."


# -- the log ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """One line of the access log.

    Attributes:
        start: When the request started, in seconds since the epoch (``$msec -
            $request_time``, to the millisecond).
        end: When nginx logged it, after the response.
        host: The address it was sent to.
        uri: The request URI.
        status: The status answered.
        connection: nginx's serial number of the connection it came on.
    """

    start: float
    end: float
    host: str
    uri: str
    status: int
    connection: int


def parse_log(lines: Iterable[str]) -> list[Request]:
    """The requests of an access log in :data:`LOG_FORMAT`; blank or torn lines are skipped."""
    requests = []
    for line in lines:
        fields = line.split()
        if len(fields) != 6:
            continue
        msec, host, uri, status, request_time, connection = fields
        try:
            end = float(msec)
            requests.append(
                Request(
                    start=round(end - float(request_time), 3),
                    end=end,
                    host=host,
                    uri=uri,
                    status=int(status),
                    connection=int(connection),
                )
            )
        except ValueError:
            continue
    return requests


def page_number(uri: str, pages: int) -> int | None:
    """Which page of a host ``uri`` asks for (``/`` and ``/index.html`` are page 0); None if
    it is not one of the host's ``pages`` pages."""
    if uri == "/index.html":
        return 0
    match = _PAGE.fullmatch(uri)
    if match is None:
        return None
    number = int(match.group(1) or 0)
    return number if number < pages else None


@dataclass(frozen=True, slots=True, kw_only=True)
class BroadMetrics:
    """What the log says of one crawl of a :class:`BroadSite`.

    Attributes:
        pages: The site's pages (hosts x pages per host).
        pages_ok: Distinct pages answered 200 at least once.
        fetched_twice: Distinct pages requested more than once.
        requests: Every request the site's hosts saw, robots.txt included.
        robots: Requests for ``/robots.txt``.
        short_gaps: Gaps between two consecutive request starts to one host shorter than
            ``delay - GAP_TOLERANCE``, robots.txt included.
        short_page_gaps: The same, counting page requests only (the gap from robots.txt to
            the first page left out).
        min_gap: The shortest gap between two request starts to one host, in seconds; None
            if no host had two requests.
        max_in_flight: The most requests one host had in flight at once, to the log's
            millisecond: requests on different connections whose [start, end] overlap.
        connections: Connections the requests came on (nginx's serial numbers).
        first_start: The first request's start (seconds since the epoch); 0.0 if none.
        last_end: The last request's end.
        last_host_start: When the last of the site's hosts had its first request (for a
            crawler that reads robots.txt, the end of the robots.txt burst: each host's
            pages can end no sooner than P x D after it); 0.0 if none.
        median_page_gap: The median gap between two page requests to one host (None if
            no host had two), and ``p90_page_gap`` its 90th percentile (nearest rank): how
            far past the delay a host's next page goes, on average and at worst.
        median_host_lateness: Each reached host's gaps past the delay, summed over its
            requests (robots.txt included), and the median of that over the hosts: how
            much later than a delay apart a host's requests went in all, which its last
            request, and so the crawl's end, carries (None if no host had two requests).
        last_round_spread: From the first to the last start of the hosts' n-th requests,
            n the fewest requests any of the site's hosts had (0.0 if none had one): how
            far apart the hosts drifted by the end. Each host's next request goes a delay
            after its last, so a host that was served late in one round stays late; in one
            process the rounds spread until one round's work fits its CPU, about H x its
            CPU per request, and that spread is part of the wall time.
    """

    pages: int
    pages_ok: int
    fetched_twice: int
    requests: int
    robots: int
    short_gaps: int
    short_page_gaps: int
    min_gap: float | None
    max_in_flight: int
    connections: int
    first_start: float
    last_end: float
    last_host_start: float = 0.0
    median_page_gap: float | None = None
    p90_page_gap: float | None = None
    median_host_lateness: float | None = None
    last_round_spread: float = 0.0


def measure(
    requests: Sequence[Request],
    *,
    hosts: Sequence[str],
    pages_per_host: int,
    delay: float,
    tolerance: float = GAP_TOLERANCE,
) -> BroadMetrics:
    """Turn the log of one crawl into :class:`BroadMetrics`; requests to other hosts or for
    other URIs count as requests (and in the gaps) but never as pages."""
    known = set(hosts)
    fetched: dict[tuple[str, int], int] = {}
    ok: set[tuple[str, int]] = set()
    by_host: dict[str, list[Request]] = {}
    robots = 0
    for request in requests:
        by_host.setdefault(request.host, []).append(request)
        if request.uri == "/robots.txt":
            robots += 1
            continue
        number = page_number(request.uri, pages_per_host)
        if number is None or request.host not in known:
            continue
        key = (request.host, number)
        fetched[key] = fetched.get(key, 0) + 1
        if request.status == 200:
            ok.add(key)
    limit = delay - tolerance
    short_gaps = 0
    page_gaps: list[float] = []
    min_gap: float | None = None
    max_in_flight = 0
    lateness: list[float] = []
    for host, host_requests in by_host.items():
        host_requests.sort(key=lambda request: (request.start, request.end))
        starts = [request.start for request in host_requests]
        late = 0.0
        for before, after in itertools.pairwise(starts):
            gap = round(after - before, 3)
            min_gap = gap if min_gap is None else min(min_gap, gap)
            short_gaps += gap < limit
            late += gap - delay
        if host in known and len(starts) > 1:
            lateness.append(late)
        page_starts = [r.start for r in host_requests if r.uri != "/robots.txt"]
        page_gaps += (round(after - before, 3) for before, after in itertools.pairwise(page_starts))
        max_in_flight = max(max_in_flight, in_flight(host_requests))
    return BroadMetrics(
        pages=len(hosts) * pages_per_host,
        pages_ok=len(ok),
        fetched_twice=sum(count > 1 for count in fetched.values()),
        requests=len(requests),
        robots=robots,
        short_gaps=short_gaps,
        short_page_gaps=sum(gap < limit for gap in page_gaps),
        min_gap=min_gap,
        max_in_flight=max_in_flight,
        connections=len({request.connection for request in requests}),
        first_start=min((r.start for r in requests), default=0.0),
        last_end=max((r.end for r in requests), default=0.0),
        last_host_start=max(
            (by_host[host][0].start for host in known if host in by_host), default=0.0
        ),
        median_page_gap=statistics.median(page_gaps) if page_gaps else None,
        p90_page_gap=sorted(page_gaps)[math.ceil(0.9 * len(page_gaps)) - 1] if page_gaps else None,
        median_host_lateness=round(statistics.median(lateness), 3) if lateness else None,
        last_round_spread=_last_round_spread([by_host[host] for host in known if host in by_host]),
    )


def _last_round_spread(hosts_requests: Sequence[Sequence[Request]]) -> float:
    """See :attr:`BroadMetrics.last_round_spread`; each host's requests sorted by start."""
    if not hosts_requests:
        return 0.0
    last = min(len(requests) for requests in hosts_requests) - 1
    starts = [requests[last].start for requests in hosts_requests]
    return round(max(starts) - min(starts), 3)


def in_flight(requests: Iterable[Request]) -> int:
    """The most of ``requests`` in flight at once, to the millisecond.

    Two requests on one connection are never in flight together (none of the clients
    pipelines), so each connection's requests are first merged into the spans it was busy;
    then the most spans that share a millisecond, [start, end] closed, is the answer. Two
    requests on different connections within the same millisecond count as together: at
    this resolution it is an upper bound.
    """
    spans: list[tuple[float, float]] = []
    by_connection: dict[int, list[tuple[float, float]]] = {}
    for request in requests:
        by_connection.setdefault(request.connection, []).append((request.start, request.end))
    for intervals in by_connection.values():
        intervals.sort()
        start, end = intervals[0]
        for next_start, next_end in intervals[1:]:
            if next_start <= end:
                end = max(end, next_end)
            else:
                spans.append((start, end))
                start, end = next_start, next_end
        spans.append((start, end))
    # Closed intervals: at one instant, starts count before ends.
    events = sorted([(start, 0) for start, _ in spans] + [(end, 1) for _, end in spans])
    most = current = 0
    for _, kind in events:
        current += 1 if kind == 0 else -1
        most = max(most, current)
    return most

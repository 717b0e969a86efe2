"""The broad-crawl benchmark's pieces that need no server: the many-host site it writes, and
what it reads from nginx's access log (benchmarks/broad_site.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

import pytest

from benchmarks.bench_broad import Setup, our_command
from benchmarks.bench_stall import most_within
from benchmarks.broad_site import (
    LOG_FORMAT,
    ROBOTS_TXT,
    generate,
    host_address,
    in_flight,
    measure,
    page_number,
    parse_log,
)
from trio_crawler._robots import RobotsRules

if TYPE_CHECKING:
    from pathlib import Path

HREF = re.compile(r'href="([^"]*)"')


def test_hosts_are_loopback_addresses_outside_127_0_0() -> None:
    assert host_address(0) == "127.0.1.1"
    assert host_address(249) == "127.0.1.250"
    assert host_address(250) == "127.0.2.1"
    assert host_address(4999) == "127.0.20.250"
    with pytest.raises(ValueError, match="host index"):
        host_address(-1)


def test_site_every_page_reachable_on_its_own_host(tmp_path: Path) -> None:
    """From each host's `/`, same-host links alone reach all its pages; the other links go to
    other hosts of the site (with the port) or off it; robots.txt allows everything."""
    site = generate(tmp_path, hosts=4, pages=13, port=20123)

    assert site.pages == 52
    assert site.roots[0] == "http://127.0.1.1:20123/"
    assert len(site.roots) == 4
    cross = off_site = 0
    for host in site.hosts:
        assert (tmp_path / host / "robots.txt").read_text() == ROBOTS_TXT
        seen = {f"http://{host}:20123/"}
        queue = list(seen)
        while queue:
            url = queue.pop()
            path = urlsplit(url).path
            file = tmp_path / host / ("index.html" if path == "/" else path.lstrip("/"))
            for href in HREF.findall(file.read_text()):
                target = urljoin(url, href)
                parts = urlsplit(target)
                if parts.hostname == host:
                    assert page_number(parts.path, site.pages_per_host) is not None, target
                    if target not in seen:
                        seen.add(target)
                        queue.append(target)
                elif parts.hostname in site.hosts:
                    assert parts.port == 20123
                    cross += 1
                else:
                    assert parts.hostname in ("example.com", "example.org")
                    off_site += 1
        assert len(seen) == site.pages_per_host
    assert cross > 0
    assert off_site > 0


def test_a_site_with_a_crawl_delay_asks_it_of_this_crawler_in_each_robots_txt(
    tmp_path: Path,
) -> None:
    """``--crawl-delay``: the delay comes from each host, and our command has no --delay."""
    site = generate(tmp_path, hosts=3, pages=2, port=20000, crawl_delay=1.5)
    for host in site.hosts:
        body = (tmp_path / host / "robots.txt").read_bytes()
        rules = RobotsRules.from_response(200, body)
        assert rules.crawl_delay == 1.5
        assert rules.allowed(f"http://{host}:20000/p/1.html")
    setup = Setup(
        python="python",
        peers_python="python",
        env={},
        input_file=True,
        max_tasks=500,
        processes=3,
        timeout=60.0,
        work=tmp_path,
        crawl_delay=True,
    )
    command = our_command(
        setup, delay=1.5, output=tmp_path / "o", roots_file=tmp_path / "r", roots=[]
    )
    assert "--delay" not in command
    assert command[command.index("--max-per-host") + 1] == "1"


def test_site_is_deterministic(tmp_path: Path) -> None:
    first = generate(tmp_path / "a", hosts=2, pages=3, port=20000, seed=7)
    second = generate(tmp_path / "b", hosts=2, pages=3, port=20000, seed=7)
    assert first.total_bytes == second.total_bytes
    for name in ("index.html", "p/1.html", "p/2.html"):
        assert (tmp_path / "a/127.0.1.2" / name).read_bytes() == (
            tmp_path / "b/127.0.1.2" / name
        ).read_bytes()


def test_site_refuses_nonsense(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pages"):
        generate(tmp_path, hosts=1, pages=0, port=20000)
    with pytest.raises(ValueError, match="hosts"):
        generate(tmp_path, hosts=0, pages=1, port=20000)


def test_page_numbers() -> None:
    assert page_number("/", 5) == 0
    assert page_number("/index.html", 5) == 0
    assert page_number("/p/4.html", 5) == 4
    assert page_number("/p/5.html", 5) is None
    assert page_number("/robots.txt", 5) is None
    assert page_number("/p/x.html", 5) is None


def _line(
    msec: float, host: str, uri: str, status: int = 200, took: float = 0.0, conn: int = 1
) -> str:
    return f"{msec:.3f} {host} {uri} {status} {took:.3f} {conn}\n"


def test_log_lines_parse_with_the_start_time() -> None:
    assert LOG_FORMAT.split() == [
        "$msec",
        "$server_addr",
        "$request_uri",
        "$status",
        "$request_time",
        "$connection",
    ]
    requests = parse_log(
        [
            _line(1000.250, "127.0.1.1", "/p/1.html", 200, 0.050, 7),
            "\n",
            "1000.3 127.0.1.1 /torn",
            "x 127.0.1.1 / 200 0.000 1\n",
        ]
    )
    assert len(requests) == 1
    (request,) = requests
    assert request.start == pytest.approx(1000.200)
    assert request.end == pytest.approx(1000.250)
    assert (request.host, request.uri, request.status, request.connection) == (
        "127.0.1.1",
        "/p/1.html",
        200,
        7,
    )


def test_measure_counts_pages_repeats_and_short_gaps() -> None:
    a, b = "127.0.1.1", "127.0.1.2"
    lines = [
        # Host a: robots.txt, then / only 0.5 s later (short), then a page a second later,
        # then the same page again, 0.995 s later (within the 10 ms tolerance).
        _line(100.000, a, "/robots.txt", conn=1),
        _line(100.500, a, "/", conn=2),
        _line(101.500, a, "/p/1.html", conn=3),
        _line(102.495, a, "/p/1.html", conn=4),
        # Host b: / answered 404 first, then 200; a page that is not one of the site's;
        # 0.2 s between the last two.
        _line(100.000, b, "/", 404, conn=5),
        _line(101.000, b, "/", conn=5),
        _line(101.200, b, "/p/99.html", 404, conn=5),
        # A host that is not the site's.
        _line(100.000, "127.0.9.9", "/", conn=6),
    ]
    metrics = measure(parse_log(lines), hosts=[a, b], pages_per_host=2, delay=1.0)

    assert metrics.pages == 4
    assert metrics.pages_ok == 3  # a's / and /p/1.html, b's /
    assert metrics.fetched_twice == 2  # a's /p/1.html, b's /
    assert metrics.requests == 8
    assert metrics.robots == 1
    assert metrics.short_gaps == 2  # a: robots.txt -> /, b: / -> /p/99.html
    assert metrics.short_page_gaps == 1  # b only: robots.txt is left out
    assert metrics.min_gap == pytest.approx(0.2)
    assert metrics.max_in_flight == 1
    assert metrics.connections == 6
    assert metrics.first_start == pytest.approx(100.0)
    assert metrics.last_end == pytest.approx(102.495)
    assert metrics.last_host_start == pytest.approx(100.0)  # the other host is not the site's
    # Page gaps, robots.txt left out: a 1.0 and 0.995, b 1.0 and 0.2.
    assert metrics.median_page_gap == pytest.approx(0.9975)
    assert metrics.p90_page_gap == pytest.approx(1.0)


def _staggered_log(a: str, b: str) -> list[str]:
    """Two hosts' robots.txt 0.4 s apart, then a page each a delay (and a little) later,
    and a second page of the first."""
    return [
        _line(100.000, a, "/robots.txt"),
        _line(100.400, b, "/robots.txt"),
        _line(101.010, a, "/"),
        _line(101.400, b, "/"),
        _line(102.030, a, "/p/1.html"),
    ]


def test_measure_says_when_the_last_host_was_first_reached() -> None:
    a, b = "127.0.1.1", "127.0.1.2"
    lines = _staggered_log(a, b)
    metrics = measure(parse_log(lines), hosts=[a, b, "127.0.1.3"], pages_per_host=2, delay=1.0)
    assert metrics.last_host_start == pytest.approx(100.4)  # a host never reached: left out
    assert metrics.median_page_gap == metrics.p90_page_gap == pytest.approx(1.02)
    # Every reached host had two requests: the second of each, 101.010 and 101.400.
    assert metrics.last_round_spread == pytest.approx(0.39)
    assert measure([], hosts=[a], pages_per_host=2, delay=1.0).last_round_spread == 0.0
    # a: 1.010 and 1.020 s apart, 0.03 s past the delay in all; b: 1.000, none.
    assert metrics.median_host_lateness == pytest.approx(0.015)
    assert measure([], hosts=[a], pages_per_host=2, delay=1.0).median_host_lateness is None


def test_in_flight_counts_overlapping_connections_not_one_connection_reused() -> None:
    host = "127.0.1.1"
    # Three requests on one keep-alive connection, back to back within one millisecond:
    # never more than one in flight.
    reused = parse_log([_line(10.001, host, "/", conn=1)] * 3)
    assert in_flight(reused) == 1
    # Three connections whose requests overlap at 10.1: three in flight.
    overlapping = parse_log(
        [
            _line(10.200, host, "/", took=0.200, conn=1),
            _line(10.150, host, "/p/1.html", took=0.100, conn=2),
            _line(10.100, host, "/p/2.html", took=0.000, conn=3),
            _line(11.000, host, "/p/3.html", took=0.000, conn=4),
        ]
    )
    assert in_flight(overlapping) == 3
    assert measure(overlapping, hosts=[host], pages_per_host=4, delay=0.1).max_in_flight == 3


def test_a_pile_of_requests_read_after_a_stall_is_counted_within_the_delay() -> None:
    """nginx stopped for a while reads what piled up one connection after another: they
    overlap in no millisecond, yet one host got three requests within a delay of 1 s."""
    a, b = "127.0.1.1", "127.0.1.2"
    lines = [
        _line(10.000, a, "/", conn=1),
        _line(30.001, a, "/p/1.html", conn=1),
        _line(30.002, a, "/p/1.html", conn=2),
        _line(30.800, a, "/p/1.html", conn=3),
        _line(31.800, a, "/p/2.html", conn=3),
        _line(10.000, b, "/", conn=4),
        _line(10.995, b, "/p/1.html", conn=4),  # within the log's 10 ms of the delay
    ]
    requests = parse_log(lines)
    assert in_flight(request for request in requests if request.host == a) == 1
    assert most_within(requests, 1.0) == 3
    assert most_within(parse_log(lines[-2:]), 1.0) == 1


def test_the_time_table_splits_a_crawls_wall_time_by_the_log() -> None:
    """Start 0.5 s before the first request, the last host first reached 0.4 s after it,
    the last answer ending 2.03 s after it, and the exit 0.1 s after that."""
    from benchmarks.bench_broad import TIME_HEADERS, ToolRun, time_row

    a, b = "127.0.1.1", "127.0.1.2"
    lines = _staggered_log(a, b)
    metrics = measure(parse_log(lines), hosts=[a, b], pages_per_host=2, delay=1.0)
    run = ToolRun(tool="ours", costs=[], wall_s=2.63, metrics=metrics, started_at=99.5)
    row = time_row("ours", run)
    assert len(row) == len(TIME_HEADERS)
    assert row == ["ours", "0.50", "0.40", "1.020", "1.020", "0.015", "0.39", "0.10", "2.6"]
    # A run with no request (or no start time) says nothing rather than nonsense.
    empty = measure([], hosts=[a], pages_per_host=2, delay=1.0)
    assert time_row("x", ToolRun(tool="ours", costs=[], wall_s=1.0, metrics=empty))[1:] == ["-"] * (
        len(TIME_HEADERS) - 1
    )


def test_the_wall_summary_gives_each_tools_median_and_range() -> None:
    """Three rounds: the median and the extremes; a tool crawled once says so rather than
    showing a range of one. And --rounds below 1 is refused before anything runs."""
    from benchmarks.bench_broad import build_parser, run, wall_summary
    from benchmarks.bench_engines import BenchmarkError

    summary = wall_summary({"memory": [1.07, 1.041, 1.052], "Scrapy": [3.381]})
    assert summary == (
        "Wall ÷ (PxD), median of the rounds (smallest-largest): "
        "memory 1.052 (1.041-1.070); Scrapy 3.381 (one round)."
    )
    with pytest.raises(BenchmarkError, match="--rounds"):
        run(build_parser().parse_args(["--rounds", "0"]))

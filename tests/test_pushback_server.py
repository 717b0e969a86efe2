"""Self-tests for the server that pushes back: its verdicts judge the crawler's manners, so
its arithmetic, its gate and its metrics must be right first.

The behaviour is about time, so the server tests run on Trio's virtual clock (the
``virtual_clock`` fixture): the bucket fills and the latency passes in exact virtual
seconds. One test runs on both AnyIO backends in real time, with no latency, to show the
server is not Trio-only; one runs the standalone process the benchmark starts.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
import trio
import trio.testing

from pushback_server import (
    LogEntry,
    PushbackOptions,
    TokenBucket,
    compute_metrics,
    open_pushback_server,
    read_run,
    retry_after_seconds,
    site_paths,
)
from support import HANG_LIMIT

SERVER_SCRIPT = Path(__file__).resolve().parent / "pushback_server.py"


def open_client() -> httpx.AsyncClient:
    # trust_env=False: a proxy configured in the environment must not reroute loopback.
    # The timeout is the hang limit: the server's latency is the subject here, on virtual
    # time, where httpx's 5 s default would cut it short.
    return httpx.AsyncClient(trust_env=False, timeout=HANG_LIMIT)


def answer(response: httpx.Response) -> tuple[int, str | None]:
    """A response as (status, Retry-After or None)."""
    return response.status_code, response.headers.get("retry-after")


# -- arithmetic ----------------------------------------------------------------------------


def test_token_bucket_starts_full_refills_at_rate_and_keeps_at_most_burst() -> None:
    bucket = TokenBucket(rate=2, burst=3, now=0.0)

    assert [bucket.take(0.0) for _ in range(3)] == [None, None, None]
    assert bucket.take(0.0) == 0.5  # empty: one token every half second
    assert bucket.take(0.25) == 0.25  # refusing takes nothing
    assert bucket.wait(0.5) == 0.0
    assert bucket.take(0.5) is None
    # A long pause saves up no more than burst.
    assert [bucket.take(100.0) for _ in range(4)] == [None, None, None, 0.5]


@pytest.mark.parametrize(("wait", "seconds"), [(0.0, 1), (0.05, 1), (1.0, 1), (1.01, 2), (2.5, 3)])
def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one(
    wait: float, seconds: int
) -> None:
    assert retry_after_seconds(wait) == seconds


@pytest.mark.parametrize(
    "options",
    [{"hosts": 0}, {"hosts": 251}, {"pages": 0}, {"burst": 0}, {"cap": 0}, {"rate": 0}],
    ids=str,
)
def test_options_refuse_a_server_that_cannot_serve(options: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must be"):
        PushbackOptions(**options)


# -- the gate, on the virtual clock ----------------------------------------------------------


@pytest.mark.trio
async def test_bucket_answers_429_with_retry_after_only_on_every_other_host(
    virtual_clock: trio.testing.MockClock,
) -> None:
    # 0.4 tokens/s: an empty bucket has its next token in 2.5 s, said as Retry-After: 3.
    options = PushbackOptions(
        hosts=2, pages=3, rate=0.4, burst=2, cap=10, base_latency=0, latency_per_request=0
    )
    answers: dict[int, list[tuple[int, str | None]]] = {0: [], 1: []}
    with trio.fail_after(HANG_LIMIT):
        async with open_pushback_server(options) as server, open_client() as client:
            for index, root in enumerate(server.roots):
                for _ in range(3):
                    answers[index].append(answer(await client.get(root + "page/1")))
            await trio.sleep(2.4)  # 0.96 of a token: 0.1 s to go
            for index, root in enumerate(server.roots):
                answers[index].append(answer(await client.get(root + "page/1")))
            await trio.sleep(0.1)
            for index, root in enumerate(server.roots):
                answers[index].append(answer(await client.get(root + "page/1")))
                answers[index].append(answer(await client.get(root + "page/1")))

    assert answers[0] == [(200, None), (200, None), (429, "3"), (429, "1"), (200, None), (429, "3")]
    assert answers[1] == [
        (200, None),
        (200, None),
        (429, None),
        (429, None),
        (200, None),
        (429, None),
    ]
    first_host = [entry for entry in server.log if entry.host == server.host_names[0]]
    assert [entry.arrival for entry in first_host] == pytest.approx([0, 0, 0, 2.4, 2.5, 2.5])
    assert [entry.retry_after for entry in first_host] == [None, None, 3, 1, None, 3]


@pytest.mark.trio
async def test_cap_answers_503_at_once_and_latency_grows_with_load(
    virtual_clock: trio.testing.MockClock,
) -> None:
    # Two served at once: 5 s + 1 s for the first, 5 s + 2 s for the second; the third is
    # turned away at once, a token being there (Retry-After: 1 on the first host only).
    options = PushbackOptions(
        hosts=2, pages=3, rate=100, burst=10, cap=2, base_latency=5, latency_per_request=1
    )
    answered: dict[int, list[tuple[int, str | None, float]]] = {0: [], 1: []}

    async def fetch(client: httpx.AsyncClient, index: int, url: str) -> None:
        response = await client.get(url)
        answered[index].append((*answer(response), trio.current_time()))

    with trio.fail_after(HANG_LIMIT):
        async with (
            open_pushback_server(options) as server,
            open_client() as client,
            trio.open_nursery() as nursery,
        ):
            for index, root in enumerate(server.roots):
                for _ in range(3):
                    nursery.start_soon(fetch, client, index, root + "page/2")

    assert sorted(answered[0]) == [(200, None, 6), (200, None, 7), (503, "1", 0)]
    assert sorted(answered[1]) == [(200, None, 6), (200, None, 7), (503, None, 0)]
    for name in server.host_names:
        assert sorted(e.in_flight for e in server.log if e.host == name) == [1, 2, 3]
    assert server.metrics().max_in_flight == 3
    assert [host.serving for host in server.hosts] == [0, 0]


@pytest.mark.trio
async def test_site_links_every_page_and_robots_txt_passes_the_gate(
    virtual_clock: trio.testing.MockClock,
) -> None:
    options = PushbackOptions(
        hosts=1, pages=4, rate=1, burst=1, cap=1, base_latency=0, latency_per_request=0
    )
    with trio.fail_after(HANG_LIMIT):
        async with open_pushback_server(options) as server, open_client() as client:
            [root] = server.roots
            robots = [await client.get(root + "robots.txt") for _ in range(3)]
            index = await client.get(root)  # takes the one token
            refused = await client.get(root + "page/3")
            await trio.sleep(1)
            last = await client.get(root + "page/3")
            await trio.sleep(1)
            missing = await client.get(root + "page/4")  # past the site: gated, then 404

    assert [r.status_code for r in robots] == [200, 200, 200]
    assert "Allow: /" in robots[0].text
    assert index.status_code == 200
    assert re.findall(r'href="([^"]+)"', index.text) == ["/page/1", "/page/2", "/page/3"]
    assert refused.status_code == 429
    assert re.findall(r'href="([^"]+)"', last.text) == ["/", "/page/1"]
    assert missing.status_code == 404
    metrics = server.metrics()
    assert metrics.pages_ok == {server.host_names[0]: 2}  # / and /page/3
    assert (metrics.requests, metrics.pushback) == (7, 1)


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both backends, real time: the crawler's asyncio engines crawl this server too."""
    return str(request.param)


@pytest.mark.anyio
async def test_serves_a_whole_site_on_either_backend() -> None:
    options = PushbackOptions(
        hosts=2, pages=3, rate=1000, burst=10, cap=4, base_latency=0, latency_per_request=0
    )
    with anyio.fail_after(HANG_LIMIT):
        async with open_pushback_server(options) as server, open_client() as client:
            for root in server.roots:
                for path in site_paths(options.pages):
                    assert (await client.get(root.rstrip("/") + path)).status_code == 200

    metrics = server.metrics()
    assert metrics.all_pages_ok
    assert (metrics.requests, metrics.pushback, metrics.bound_s) == (6, 0, 0.003)


# -- the metrics, on a log written by hand ---------------------------------------------------


def entry(
    arrival: float,
    status: int = 200,
    *,
    host: str = "a",
    path: str = "/",
    retry_after: int | None = None,
    client: str = "me",
    in_flight: int = 1,
) -> LogEntry:
    return LogEntry(
        host=host,
        path=path,
        arrival=arrival,
        status=status,
        retry_after=retry_after,
        client=client,
        in_flight=in_flight,
    )


def test_metrics_count_pages_pushback_and_requests_inside_retry_after_windows() -> None:
    log = [
        entry(0.0, 429, path="/page/1", retry_after=2),  # window [0, 2) for (a, me)
        entry(0.0, 200, path="/page/2", in_flight=3),  # arrived with it: inside
        entry(1.0, 200, path="/page/1"),  # inside
        entry(1.0, 200, path="/page/1", client="other"),  # another client: not inside
        entry(1.0, 200, host="b", path="/page/1"),  # another host: not inside
        entry(1.5, 503, path="/page/3", retry_after=3),  # inside, and opens [1.5, 4.5)
        entry(2.0, 503, path="/page/3"),  # inside the second window; opens none
        entry(4.5, 200, path="/page/3"),  # the window's end is outside it
        entry(4.6, 200, path="/robots.txt"),  # not a page of the site
        entry(4.7, 404, path="/page/9"),
        entry(0.5, 200, path="/", client="other"),  # out of order: sorted by arrival
    ]

    metrics = compute_metrics(log, hosts=["a", "b", "c"], pages=4, rate=2)

    assert metrics.pages_ok == {"a": 4, "b": 1, "c": 0}
    assert not metrics.all_pages_ok
    assert (metrics.requests, metrics.pushback) == (11, 3)
    assert metrics.pushback_share == pytest.approx(3 / 11)
    assert metrics.inside_retry_after == 4
    assert metrics.max_in_flight == 3
    assert metrics.bound_s == 2.0


def test_metrics_of_an_empty_log() -> None:
    metrics = compute_metrics([], hosts=["a"], pages=1, rate=1)

    assert (metrics.requests, metrics.pushback_share, metrics.max_in_flight) == (0, 0.0, 0)
    assert metrics.pages_ok == {"a": 0}
    assert compute_metrics([entry(0)], hosts=["a"], pages=1, rate=1).all_pages_ok


# -- standalone ------------------------------------------------------------------------------


def test_standalone_server_prints_its_roots_and_writes_its_log_on_sigterm(
    tmp_path: Path,
) -> None:
    log_path = tmp_path / "log.json"
    command = [sys.executable, str(SERVER_SCRIPT), "--hosts", "2", "--pages", "2"]
    with subprocess.Popen(
        [*command, "--burst", "1", "--rate", "0.01", "--log", str(log_path)],
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            roots = [process.stdout.readline().strip() for _ in range(2)]
            with httpx.Client(trust_env=False) as client:
                statuses = [client.get(roots[0]).status_code for _ in range(2)]
        finally:
            process.send_signal(signal.SIGTERM)
        assert process.wait(HANG_LIMIT) == 0

    assert [root.split(":")[1] for root in roots] == ["//127.0.0.2", "//127.0.0.3"]
    assert statuses == [200, 429]
    run = read_run(log_path)
    assert run.options == PushbackOptions(hosts=2, pages=2, rate=0.01, burst=1)
    assert run.hosts == [root.removeprefix("http://").rstrip("/") for root in roots]
    assert [(e.status, e.retry_after) for e in run.log] == [(200, None), (429, 100)]
    assert run.metrics().pages_ok == {run.hosts[0]: 1, run.hosts[1]: 0}


def test_benchmark_measures_one_command_against_a_fresh_server() -> None:
    """The benchmark's entry point for acceptance tests: roots in, metrics and cost out."""
    from benchmarks.bench_pushback import measure_command, missed_targets

    fetch_roots = (
        "import sys, urllib.request\n"
        "for root in sys.argv[1:]:\n"
        "    urllib.request.urlopen(root, timeout=30).read()\n"
    )
    options = PushbackOptions(hosts=2, pages=3, rate=1, base_latency=0, latency_per_request=0)

    result = measure_command(
        lambda roots: [sys.executable, "-c", fetch_roots, *roots], options, timeout=HANG_LIMIT
    )

    assert [root.split(":")[1] for root in result.roots] == ["//127.0.0.2", "//127.0.0.3"]
    assert (result.returncode, result.timed_out) == (0, False)
    assert result.metrics.pages_ok == dict.fromkeys(result.run.hosts, 1)
    assert result.metrics.requests == 2
    assert result.wall_s > 0
    assert result.cpu_s > 0
    assert missed_targets(result) == ["not every page 200"]  # 3 s of bound: quick enough

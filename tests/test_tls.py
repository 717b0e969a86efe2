"""HTTPS against a real TLS server on 127.0.0.1, with certificates from a test CA (trustme).

Most of the web is HTTPS, and the crawler's clients share one verifying SSL context that
the crawler builds itself (see ``Fetcher.new_client``). These tests show that it
verifies: a certificate from an unknown CA is a failure record, on every engine, while the
rest of the crawl goes on; that the CA store is the system's, which OpenSSL lets
``SSL_CERT_FILE`` replace (the command line, in a fresh process, trusting the test CA); and
that a caller's own client, with its own trust, is used as given.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import trustme

from trio_crawler._clients import default_ssl_context
from trio_crawler._events import FetchError, FetchRequest, Response
from trio_crawler._transport import choose_transport

from conftest import Engine
from httpserver import Reply, Request, open_test_server
from support import HANG_LIMIT

pytestmark = pytest.mark.anyio

SITE = {
    "/": Reply.html('<a href="/a">a</a> <a href="/b">b</a>'),
    "/a": Reply.html('<a href="/">home</a>'),
    "/b": Reply.html("b"),
}


async def test_a_certificate_from_an_unknown_ca_is_a_failure_record(
    engine: Engine, server_context: ssl.SSLContext
) -> None:
    async with (
        open_test_server(SITE, ssl_context=server_context) as tls_server,
        open_test_server(SITE) as plain_server,
    ):
        crawler = engine.crawler(
            [tls_server.url(), plain_server.url()], max_tries=1, obey_robots=False
        )
        with anyio.fail_after(HANG_LIMIT):
            await crawler.crawl()
    records = {stat.url: stat for stat in crawler.done}
    refused = records[tls_server.url()]
    assert refused.status is None
    assert refused.exception is not None
    assert refused.exception.startswith("ConnectError")
    assert "CERTIFICATE_VERIFY_FAILED" in refused.exception
    assert tls_server.requests == []  # no request was sent over the untrusted connection
    assert {records[plain_server.url(path)].status for path in SITE} == {200}


async def test_the_ssl_context_is_made_at_the_first_https_connection(
    engine: Engine, server_context: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading the system's CA certificates takes 20-40 ms of a start: on the crawler's own
    transport a crawl of http:// sites never does it, and a crawl that meets https:// does
    it once, for all workers. httpx's own transport (``TRIO_CRAWLER_TRANSPORT=httpx``)
    takes a context with each client, so there it is made once, as the clients are."""
    lazy = choose_transport() == "lean"
    made: list[object] = []
    create = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(args)
        return create(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    default_ssl_context.cache_clear()  # made by an earlier test of this process, maybe
    try:
        async with (
            open_test_server(SITE, ssl_context=server_context) as tls_server,
            open_test_server(SITE) as plain_server,
        ):
            with anyio.fail_after(HANG_LIMIT):
                await engine.crawler([plain_server.url()], obey_robots=False).crawl()
                assert len(made) == (0 if lazy else 1)
                both = [tls_server.url(), tls_server.url("/a"), plain_server.url()]
                crawler = engine.crawler(both, max_tries=1, obey_robots=False)
                await crawler.crawl()
        assert len(made) == 1
        assert {stat.url: stat.status for stat in crawler.done}[plain_server.url()] == 200
    finally:
        default_ssl_context.cache_clear()  # later tests make their own, not counted


async def test_a_workers_client_given_its_own_context_changes_only_its_trust(
    engine: Engine, ca: trustme.CA, server_context: ssl.SSLContext
) -> None:
    """``Fetcher.new_client(ssl_context=...)`` is how a context per client is measured
    (benchmarks/bench_clients.py, arrangement C): the client trusts what its context
    trusts, and is otherwise the crawl's own, sending the crawl's user agent and headers."""
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    agents: list[tuple[str, str]] = []

    async def page(request: Request) -> Reply:
        agents.append((request.headers["user-agent"], request.headers["x-test"]))
        return Reply.html("page")

    async with open_test_server({"/": page}, ssl_context=server_context) as server:
        crawler = engine.crawler([server.url()], user_agent="probe/1", headers=[("X-Test", "kept")])
        fetcher = crawler._fetcher
        request = FetchRequest(url=server.url(), redirects_left=10)
        own = fetcher.new_client(ssl_context=trusting)
        shared = fetcher.new_client()
        try:
            with anyio.fail_after(HANG_LIMIT):
                trusted = await fetcher.fetch(own, request)
                refused = await fetcher.fetch(shared, request)
        finally:
            await own.aclose()
            await shared.aclose()
    assert isinstance(trusted, Response)
    assert trusted.status == 200
    assert isinstance(refused, FetchError)
    assert "CERTIFICATE_VERIFY_FAILED" in refused.error
    assert agents == [("probe/1", "kept")]  # one request: the refused one never went


async def test_a_callers_client_brings_its_own_trust(
    engine: Engine, ca: trustme.CA, server_context: ssl.SSLContext
) -> None:
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    async with (
        open_test_server(SITE, ssl_context=server_context) as server,
        httpx.AsyncClient(verify=trusting) as client,
    ):
        crawler = engine.crawler([server.url()], client=client, obey_robots=False)
        with anyio.fail_after(HANG_LIMIT):
            await crawler.crawl()
    assert {stat.url: stat.status for stat in crawler.done} == {
        server.url(path): 200 for path in SITE
    }


@pytest.mark.parametrize("engine_name", ["trio", "asyncio"])
def test_the_command_line_crawls_https_trusting_ssl_cert_file(
    engine_name: str, ca: trustme.CA, server_context: ssl.SSLContext, tmp_path: Path
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    output = tmp_path / "records.jsonl"
    command = [sys.executable, "-m", "trio_crawler", "--engine", engine_name, "-q"]
    command += ["--ignore-robots", "-o", str(output)]

    async def crawl_with_the_command_line() -> tuple[subprocess.CompletedProcess[bytes], str]:
        async with open_test_server(SITE, ssl_context=server_context) as server:
            with anyio.fail_after(HANG_LIMIT):
                done = await anyio.run_process(
                    [*command, server.url()],
                    env={**os.environ, "SSL_CERT_FILE": str(ca_file), "SSL_CERT_DIR": ""},
                    check=False,
                )
            return done, server.url()

    done, root = anyio.run(crawl_with_the_command_line, backend="trio")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert {record["url"]: record["status"] for record in records} == {
        root.rstrip("/") + path: 200 for path in SITE
    }

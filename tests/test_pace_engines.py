"""The learnt pace on every engine, against a real server that pushes back.

tests/pushback_server.py serves hosts on loopback addresses, each behind a token bucket
(429) and an in-flight cap (503), half of them with ``Retry-After``; it logs every request
as it arrives. The crawls run on the real clock, a few seconds each; the same crawl with
``adapt=False`` is the control (once, on the virtual clock): what the pace saves the server.
"""

from __future__ import annotations

import anyio
import pytest

from conftest import Engine
from pushback_server import PushbackOptions, open_pushback_server

pytestmark = pytest.mark.anyio

OPTIONS = PushbackOptions(hosts=2, pages=40, rate=20.0, burst=5, cap=4)


async def crawl_pushback(engine: Engine, *, adapt: bool) -> tuple[object, object]:
    async with open_pushback_server(OPTIONS) as server:
        crawler = engine.crawler(server.roots, max_tasks=40, adapt=adapt)
        with anyio.fail_after(300):
            await crawler.crawl()
        return crawler, server.metrics()


@pytest.mark.real_time  # a few seconds; the virtual clock's jumps cost more here
async def test_a_server_that_pushes_back_is_crawled_at_its_pace(engine: Engine) -> None:
    crawler, metrics = await crawl_pushback(engine, adapt=True)
    assert metrics.all_pages_ok  # type: ignore[attr-defined]
    # Few pushback answers, and none asked for inside a Retry-After the crawler knew of.
    assert metrics.pushback_share <= 0.15  # type: ignore[attr-defined]
    assert metrics.inside_retry_after <= 1  # type: ignore[attr-defined]
    assert crawler.limit_counts["slowed_origins"] == OPTIONS.hosts  # type: ignore[attr-defined]


async def test_without_adapt_the_same_crawl_draws_more_pushback(engine: Engine) -> None:
    if engine.name != "trio":
        pytest.skip("the control waits out many Retry-After: once, on the virtual clock")
    _, adapted = await crawl_pushback(engine, adapt=True)
    _, fixed = await crawl_pushback(engine, adapt=False)
    assert fixed.pushback > adapted.pushback  # type: ignore[attr-defined]

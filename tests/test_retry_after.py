"""Retry-After at the HTTP boundary: either form of the header turned into seconds.

The core waits a number of seconds on the engine's clock; it never sees a date. A date in
``Retry-After`` is a time on the server's clock, so ``_fetch.py`` measures it from the
response's ``Date`` header when there is one (the server's clock as it answered: no
agreement between the clocks is needed), else from the local wall clock as the response
arrived. test_fetch.py covers the seconds form and malformed values, test_fuzz.py that no
value raises; test_manners.py shows the waits on the wire, on every engine.
"""

from __future__ import annotations

import email.utils

import httpx
import pytest

from trio_crawler._events import Response
from trio_crawler._fetch import _retry_after, fetch

from mock_http import streamed, streaming_transport

# A server whose clock is years behind the crawler's: the waits below hold all the same.
SERVER_NOW = "Sun, 06 Nov 1994 08:49:37 GMT"
SERVER_NOW_TIMESTAMP = 784111777.0
# When the response arrived, by the crawler's wall clock: a day after the server's now.
RECEIVED = SERVER_NOW_TIMESTAMP + 86400


@pytest.mark.parametrize(
    ("value", "date", "seconds"),
    [
        # The three HTTP-date formats of RFC 9110 section 5.6.7, measured from Date.
        ("Sun, 06 Nov 1994 08:49:40 GMT", SERVER_NOW, 3.0),
        ("Sunday, 06-Nov-94 08:50:37 GMT", SERVER_NOW, 60.0),
        ("Sun Nov  6 08:59:37 1994", SERVER_NOW, 600.0),  # asctime: GMT with no zone
        # Date in any of them too.
        ("Sun, 06 Nov 1994 08:49:40 GMT", "Sun Nov  6 08:49:37 1994", 3.0),
        # Another zone written as an offset is the same instant.
        ("Sun, 06 Nov 1994 10:49:40 +0200", SERVER_NOW, 3.0),
        # A date already past (by the server's clock) is no wait.
        ("Sun, 06 Nov 1994 08:49:00 GMT", SERVER_NOW, 0.0),
        # No Date, or one that is no date: measured from the local clock at receipt.
        ("Mon, 07 Nov 1994 08:49:47 GMT", None, 10.0),
        ("Mon, 07 Nov 1994 08:49:47 GMT", "yesterday", 10.0),
        ("Mon, 07 Nov 1994 08:49:47", SERVER_NOW, None),  # no zone, not asctime: no date
        # Seconds need no clock.
        ("120", SERVER_NOW, 120.0),
        ("120", None, 120.0),
        ("soon", SERVER_NOW, None),
    ],
)
def test_a_date_is_measured_from_the_servers_date_else_from_receipt(
    value: str, date: str | None, seconds: float | None
) -> None:
    assert email.utils.parsedate_to_datetime(SERVER_NOW).timestamp() == SERVER_NOW_TIMESTAMP
    assert _retry_after(value, date, received=RECEIVED) == seconds


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_fetch_reads_the_date_header_with_retry_after() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        headers = [("retry-after", "Sun, 06 Nov 1994 08:49:44 GMT"), ("date", SERVER_NOW)]
        return streamed(429, b"slow down", headers)

    async with httpx.AsyncClient(transport=streaming_transport(handler)) as client:
        outcome = await fetch(client, "http://example.com/")
    assert isinstance(outcome, Response)
    assert (outcome.status, outcome.retry_after, outcome.body) == (429, 7.0, b"slow down")

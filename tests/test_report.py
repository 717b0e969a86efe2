"""The chapter's report layout, and the JSON form of a record."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_crawler import FetchStatistic
from trio_crawler._report import format_report, report_lines
from trio_crawler._stats import record_from_fields, utc_timestamp

from support import RECORD_KEYS

RECORDS = [
    FetchStatistic(
        url="http://h/b",
        status=200,
        size=120,
        content_type="text/html",
        encoding="utf-8",
        num_urls=3,
        num_new_urls=2,
    ),
    FetchStatistic(url="http://h/a", next_url="http://h/b", status=301),
    FetchStatistic(url="http://h/c", exception="ConnectError: refused"),
    FetchStatistic(url="http://h/d", status=404, size=9),
    FetchStatistic(
        url="http://h/e.png", status=200, size=50, content_type="image/png", encoding="utf-8"
    ),
    FetchStatistic(url="http://h/f", exception="TimeoutError"),
]


def test_report_layout_matches_the_chapter() -> None:
    report = format_report(
        RECORDS,
        elapsed=2.0,
        max_tasks=3,
        todo=4,
        finish_reason="deadline",
        extra_counters={"robots_disallowed": 2},
        date="Fri Nov 20 12:00:00 2026",
    )
    assert report.splitlines() == [
        "*** Report ***",
        "http://h/a 301 redirect http://h/b",
        "http://h/b 200 text/html utf-8 120 2/3",
        "http://h/c error ConnectError: refused",
        "http://h/d 404 None None 9",
        "http://h/e.png 200 image/png utf-8 50",
        "http://h/f error TimeoutError",
        "Finished 6 urls in 2.000 secs (max_tasks=3) (1.000 urls/sec/task)",
        "         1 error",
        "         9 error_bytes",
        "         2 fail",
        "         1 fail_ConnectError",
        "         1 fail_TimeoutError",
        "         1 html",
        "       120 html_bytes",
        "         1 other",
        "        50 other_bytes",
        "         1 redirect",
        "         2 robots_disallowed",
        "         1 status_404",
        "Todo: 4",
        "Done: 6",
        "Date: Fri Nov 20 12:00:00 2026 local time",
        "Finish reason: deadline",
    ]


def test_report_lines_read_the_records_once_and_keep_none() -> None:
    """The report of a state file is written as its records are read from it: one pass,
    in the order given, with the same lines as the report of a list."""
    by_url = sorted(RECORDS, key=lambda stat: stat.url)
    handed: list[str] = []

    def one_at_a_time() -> Iterator[FetchStatistic]:
        for stat in by_url:
            handed.append(stat.url)
            yield stat

    lines = report_lines(
        one_at_a_time(), elapsed=2.0, max_tasks=3, todo=0, finish_reason="finished", date="d"
    )
    assert next(lines) == "*** Report ***\n"
    assert next(lines) == "http://h/a 301 redirect http://h/b\n"
    assert handed == ["http://h/a"], "a record was read before its line was wanted"
    rest = list(lines)
    assert handed == [stat.url for stat in by_url]
    expected = format_report(
        RECORDS, elapsed=2.0, max_tasks=3, todo=0, finish_reason="finished", date="d"
    )
    assert "*** Report ***\nhttp://h/a 301 redirect http://h/b\n" + "".join(rest) == expected
    assert "Done: 6\n" in rest
    assert "Finished 6 urls in 2.000 secs (max_tasks=3) (1.000 urls/sec/task)\n" in rest


def test_only_counted_counters_are_printed_and_zero_time_is_safe() -> None:
    report = format_report([], elapsed=0.0, max_tasks=10, todo=0, finish_reason="finished")
    lines = report.splitlines()
    assert lines[0] == "*** Report ***"
    assert lines[1] == "Finished 0 urls in 0.000 secs (max_tasks=10) (0.000 urls/sec/task)"
    assert lines[2:4] == ["Todo: 0", "Done: 0"]
    assert lines[4].startswith("Date: ")
    assert lines[5] == "Finish reason: finished"


def test_notes_come_after_the_counters_and_before_todo() -> None:
    report = format_report(
        [], elapsed=1.0, max_tasks=1, todo=0, finish_reason="finished", notes=["Shared: x"]
    )
    assert report.splitlines()[1:4] == [
        "Finished 0 urls in 1.000 secs (max_tasks=1) (0.000 urls/sec/task)",
        "Shared: x",
        "Todo: 0",
    ]


def test_record_json_has_exactly_the_contract_keys_in_order() -> None:
    record = json.loads(RECORDS[1].to_json())
    assert list(record) == RECORD_KEYS
    assert record == {
        "url": "http://h/a",
        "next_url": "http://h/b",
        "status": 301,
        "exception": None,
        "size": 0,
        "content_type": None,
        "encoding": None,
        "num_urls": 0,
        "num_new_urls": 0,
        "depth": 0,
        "referrer": None,
        "fetched_at": None,
        "elapsed": None,
        "handler_error": None,
    }
    assert "\n" not in FetchStatistic(url="http://h/\u2028", exception="E: a\nb").to_json()


_TEXT = st.none() | st.text()
_COUNT = st.integers(min_value=0, max_value=2**63)


_RECORDS = st.builds(
    FetchStatistic,
    url=st.text(),
    next_url=_TEXT,
    status=st.none() | st.integers(min_value=100, max_value=999),
    exception=_TEXT,
    size=_COUNT,
    content_type=_TEXT,
    encoding=_TEXT,
    num_urls=_COUNT,
    num_new_urls=_COUNT,
    depth=_COUNT,
    referrer=_TEXT,
    fetched_at=_TEXT,
    elapsed=st.none() | st.floats(),
    handler_error=_TEXT,
)


@given(_RECORDS)
def test_record_json_is_what_the_json_module_writes(record: FetchStatistic) -> None:
    """to_json is written by hand for speed; it must be json.dumps of to_dict to the byte
    (control characters, quotes, non-ASCII text, huge counts, NaN and infinities)."""
    expected = json.dumps(record.to_dict(), ensure_ascii=False, separators=(", ", ": "))
    assert record.to_json() == expected


@given(_RECORDS)
def test_a_record_read_back_is_the_record_written(record: FetchStatistic) -> None:
    """record_from_fields sets the slots of a full record directly, for the report of a
    state file; what it builds must be the record __init__ builds, frozen like it."""
    fields = record.to_dict()
    read = record_from_fields(fields)
    assert read.to_dict() == fields
    assert repr(read) == repr(record)
    assert read == record  # a NaN elapsed too: the same float object, compared by identity
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.url = "http://h/other"  # type: ignore[misc]


def test_a_partial_or_foreign_object_goes_through_init() -> None:
    # A missing field takes its default, as FetchStatistic(**fields) gives it.
    assert record_from_fields({"url": "http://h/a", "status": 404}) == FetchStatistic(
        url="http://h/a", status=404
    )
    full = RECORDS[0].to_dict()
    with pytest.raises(TypeError):
        record_from_fields({**full, "extra": 1})
    del full["url"]
    with pytest.raises(TypeError):
        record_from_fields(full)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "1970-01-01T00:00:00.000Z"),
        (951_782_400.5, "2000-02-29T00:00:00.500Z"),
        # Cut to the millisecond, not rounded: never "...:01.000Z" for a time before it.
        (1_800_000_000.9999, "2027-01-15T08:00:00.999Z"),
    ],
)
def test_fetched_at_is_utc_iso_8601_to_the_millisecond(seconds: float, text: str) -> None:
    assert utc_timestamp(seconds) == text


def test_a_recrawls_304_is_not_modified_not_an_error() -> None:
    """A 304 answers a recrawl's conditional request: the page is unchanged. It is counted
    as ``not_modified`` (and ``status_304``), and only real error statuses as ``error``."""
    records = [
        FetchStatistic(url="http://h/a", status=304, num_urls=2, num_new_urls=1),
        FetchStatistic(url="http://h/b", status=304),
        FetchStatistic(url="http://h/c", status=404, size=9),
    ]
    report = format_report(records, elapsed=1.0, max_tasks=1, todo=0, finish_reason="finished")
    lines = report.splitlines()
    assert lines[1:4] == [
        "http://h/a 304 None None 0",
        "http://h/b 304 None None 0",
        "http://h/c 404 None None 9",
    ]
    assert lines[5 : lines.index("Todo: 0")] == [
        "         1 error",
        "         9 error_bytes",
        "         2 not_modified",
        "         2 status_304",
        "         1 status_404",
    ]


def test_pages_whose_handler_raised_are_counted_whatever_their_kind() -> None:
    records = [
        FetchStatistic(url="http://h/", status=200, content_type="text/html", size=3),
        FetchStatistic(
            url="http://h/a", status=200, content_type="text/html", handler_error="KeyError: 'x'"
        ),
        FetchStatistic(
            url="http://h/b", status=200, content_type="application/xml", handler_error="E"
        ),
    ]
    report = format_report(records, elapsed=1.0, max_tasks=1, todo=0, finish_reason="finished")
    assert "         2 handler_error" in report.splitlines()
    assert "handler_error" not in format_report(
        records[:1], elapsed=1.0, max_tasks=1, todo=0, finish_reason="finished"
    )

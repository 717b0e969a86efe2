"""The state file (``--state``): the store's invariants, resumes, and input it refuses.

The core and the store are driven without an event loop: a flush that runs its
transaction synchronously never suspends, so a coroutine's ``send(None)`` runs it to its
end. The transactions are real, on a real SQLite file in the test's temporary directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from stores import manual_runtime

from trio_crawler._config import CrawlConfig
from trio_crawler._events import Committing, FetchError, FetchRequest, Outcome, Response
from trio_crawler._report import Listing, sorted_by_url, url_line
from trio_crawler._robots import ROBOTS_MAX_AGE
from trio_crawler._state import CrawlState
from trio_crawler._statefile import StateFile
from trio_crawler._statefile_checks import StateFileError
from trio_crawler._statefile_rows import SCHEMA_VERSION, record_from_line
from trio_crawler._stats import FetchStatistic, count_records
from trio_crawler._store_sqlite import NOTE_INTERVAL, StoredFrontier, open_state_store
from trio_crawler.engine_trio import Crawler

from httpserver import Reply, open_test_server
from support import HANG_LIMIT, finish, page, read_records

T = TypeVar("T")
ROOT = "http://site.test/0"


def open_crawl(path: Path, **options: Any) -> tuple[CrawlState, StoredFrontier]:
    """A crawl of ROOT in the state file ``path``, driven by hand on a clock that stands
    still: so its origins keep the crawl's own pace (the learnt one is test_pace.py's)."""
    options.setdefault("adapt", False)
    options.setdefault("obey_robots", False)
    config = CrawlConfig.create([ROOT], state=str(path), **options)
    store = open_state_store(config)
    state = CrawlState(config, frontier=store, resumed=store.resumed())
    store.use_runtime(manual_runtime(state))
    return state, store


def answer_by_hand(
    state: CrawlState, store: StoredFrontier, outcomes: dict[str, Outcome], count: int = -1
) -> None:
    """Fetch ``count`` URLs by hand (every one that comes, if negative), each answered as
    ``outcomes`` says, with a transaction before each and after the last."""
    while count != 0:
        store.commit_waiting()
        request = state.next_request(now=0.0)
        if request is None:
            assert count < 0, "fewer URLs came than asked for"
            return
        state.attempt_started(request, now=0.0)
        state.attempt_finished(request, outcomes[request.url], now=0.0)
        count -= 1
    store.commit_waiting()


def html(links: list[int]) -> Response:
    body = "".join(f'<a href="/{link}">x</a>' for link in links).encode()
    return Response(status=200, content_type="text/html", body=body)


def test_pages_fetched_when_the_crawl_is_cut_short_are_committed_on_close(
    tmp_path: Path,
) -> None:
    """A deadline or a second Ctrl-C can end the crawl between a page's fetch and its
    transaction: closing commits it, record and links, so the next run does not fetch it
    again (only a kill, which closes nothing, costs that)."""
    path = tmp_path / "crawl.db"
    state, store = open_crawl(path)
    store.commit_waiting()  # the root's row into the window
    request = state.next_request(now=0.0)
    assert request is not None
    assert request.url == ROOT
    state.attempt_started(request, now=0.0)
    assert isinstance(state.attempt_finished(request, html([1, 2]), now=0.0), Committing)
    assert not state.finished  # in flight until committed
    store.close()

    state, store = open_crawl(path)
    try:
        assert [record.url for record in store.records()] == [ROOT]
        assert next(store.records()).num_new_urls == 2
        assert (store.queued, store.seen_count) == (2, 3)
    finally:
        store.close()


def test_a_resumed_crawl_counts_errors_and_failures_as_its_report_does(
    tmp_path: Path,
) -> None:
    """A resumed run's counts (the progress line's ``error`` and ``fail``) include the
    earlier runs' records, classified as the report classifies them, and a row that is
    not a record (damaged) in neither."""
    path = tmp_path / "crawl.db"
    state, store = open_crawl(path, max_tries=1)
    outcomes: dict[str, Outcome] = {
        ROOT: html([1, 2, 3]),
        "http://site.test/1": Response(status=404, body=b"gone"),
        "http://site.test/2": FetchError(error="ConnectError: refused", retryable=True),
        "http://site.test/3": Response(status=302, location="/0"),
    }
    answer_by_hand(state, store, outcomes, len(outcomes))
    assert state.finished
    before = state.statistics()
    store.close()
    db = sqlite3.connect(path)
    db.executemany(
        "INSERT INTO records (pass, failed, json) VALUES (1, 0, ?)", [("not json",), ("[]",)]
    )
    db.commit()
    db.close()

    state, store = open_crawl(path)
    try:
        counters = count_records(store.records())
        after = state.statistics()
        assert after.done == len(list(store.records())) == 4
        assert (after.error, after.fail) == (1, 1)
        assert (after.error, after.fail) == (before.error, before.fail)
        assert (counters["error"], counters["fail"], counters["redirect"]) == (1, 1, 1)
    finally:
        store.close()


# --- the store against a model of the same steps ------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    pages=st.integers(1, 60),
    steps=st.lists(st.sampled_from(["take", "finish", "flush", "kill"]), max_size=400),
)
def test_pending_count_matches_a_model_through_kills(
    tmp_path_factory: pytest.TempPathFactory, seed: int, pages: int, steps: list[str]
) -> None:
    """After any sequence of steps (kills included), queued + in flight is exactly the URLs
    seen and not done; in the end every page has exactly one record in the file."""
    rng = random.Random(seed)
    links = {n: rng.sample(range(pages), min(pages, 3)) for n in range(pages)}
    path = tmp_path_factory.mktemp("state") / "crawl.db"
    state, store = open_crawl(path)
    seen = {0}  # the model: every URL seen, and those done (committed)
    done: set[int] = set()
    in_flight: list[FetchRequest] = []
    finishing: list[int] = []  # handed to the store, not committed yet

    def flush() -> None:
        store.commit_waiting()
        for number in finishing:
            done.add(number)
            seen.update(links[number])
        finishing.clear()
        assert store.queued + store.in_flight_count == len(seen - done) + len(finishing)

    flush()
    for step in [*steps, "kill"]:
        if step == "take" and (request := state.next_request(now=0.0)) is not None:
            in_flight.append(request)
        elif step == "finish" and in_flight:
            request = in_flight.pop(rng.randrange(len(in_flight)))
            state.attempt_finished(
                request, html(links[int(request.url.rsplit("/", 1)[1])]), now=0.0
            )
            finishing.append(int(request.url.rsplit("/", 1)[1]))
        elif step == "flush":
            flush()
        elif step == "kill":  # the process dies: what was not committed is lost
            finishing.clear()
            in_flight.clear()
            store.file.close()
            state, store = open_crawl(path)
            flush()
    while not state.finished:  # then the crawl runs to its end
        while (request := state.next_request(now=0.0)) is not None:
            number = int(request.url.rsplit("/", 1)[1])
            state.attempt_finished(request, html(links[number]), now=0.0)
            finishing.append(number)
        flush()
    assert done == seen
    urls = [record.url for record in store.records()]
    assert sorted(urls) == sorted(f"http://site.test/{n}" for n in seen)
    store.close()


# --- input it refuses ----------------------------------------------------------------------


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def finished_state(tmp_path: Path) -> Path:
    """A state file of a small finished crawl."""
    path = tmp_path / "crawl.db"
    state, store = open_crawl(path)
    store.commit_waiting()
    while (request := state.next_request(now=0.0)) is not None:
        state.attempt_finished(request, html([]), now=0.0)
        store.commit_waiting()
    store.close()
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trio_crawler", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=HANG_LIMIT,
        check=False,
    )


def assert_refused(run: subprocess.CompletedProcess[str], words: str) -> None:
    assert run.returncode == 2, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("trio-crawler: error: --state "), run.stderr
    assert words in lines[0], run.stderr
    assert "Report" not in run.stdout


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda path: path.write_text("roots = ['x']\n"), "not a trio-crawler state file"),
        (lambda path: path.mkdir(), "is a directory"),
        (lambda path: _other_sqlite(path), "not a trio-crawler state file"),
    ],
    ids=["text", "directory", "another-sqlite-file"],
)
def test_a_file_that_is_no_state_file_is_refused_untouched(
    tmp_path: Path, make: Callable[[Path], object], words: str
) -> None:
    path = tmp_path / "crawl.db"
    make(path)
    before = digest(path) if path.is_file() else None
    assert_refused(cli("--state", str(path), "http://127.0.0.1:9/"), words)
    assert (digest(path) if path.is_file() else None) == before


def _other_sqlite(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()


def test_another_crawls_file_is_refused_untouched(finished_state: Path) -> None:
    before = digest(finished_state)
    assert_refused(cli("--state", str(finished_state), "http://127.0.0.1:9/"), "holds the crawl of")
    assert digest(finished_state) == before


@pytest.mark.parametrize("older", [True, False], ids=["earlier-layout", "later-layout"])
def test_a_file_of_another_layout_is_refused_untouched(
    finished_state: Path, tmp_path: Path, older: bool
) -> None:
    """A file an earlier trio-crawler made (layout 1 kept no referrers) is not migrated:
    it is refused with the way out, as a later one's is, and nothing is written."""
    db = sqlite3.connect(finished_state)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION - 1 if older else SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    before = digest(finished_state)
    output = tmp_path / "out.jsonl"
    run = cli("--state", str(finished_state), "-o", str(output))
    if older:
        assert_refused(run, f"a state file of layout {SCHEMA_VERSION - 1}, made by an earlier")
        assert "finish the crawl with the version that made it" in run.stderr
    else:
        assert_refused(run, f"this version reads layout {SCHEMA_VERSION}")
    assert digest(finished_state) == before
    assert not output.exists()


def test_a_crawl_resumed_at_once_waits_the_delay_before_each_host(tmp_path: Path) -> None:
    """A process killed just after it sent a request left nothing that says so: the
    request's URL is still queued in the file. The next run, however soon it starts,
    waits the delay before its first request to any host, so the server never sees two
    closer than the delay."""
    path = tmp_path / "crawl.db"
    state, store = open_crawl(path, delay=2.0)
    store.commit_waiting()
    request = state.next_request(now=0.0)
    assert request is not None
    assert request.url == ROOT
    state.attempt_started(request, now=0.0)
    store.file.close()  # killed: nothing more is written
    state, store = open_crawl(path, delay=2.0)
    try:
        store.commit_waiting()
        assert state.next_request(now=0.0) is None
        assert state.next_wakeup() == 2.0
        request = state.next_request(now=2.0)
        assert request is not None
        assert request.url == ROOT
    finally:
        store.close()


def test_a_resumed_crawl_keeps_the_age_of_its_robots_txt(tmp_path: Path) -> None:
    """The time each origin's robots.txt was decided is kept as a time of day and put on
    the next run's clock, so rules read a day before a resume are read again; that held
    only when the file also kept a Retry-After wait."""
    path = tmp_path / "crawl.db"
    state, store = open_crawl(path, obey_robots=True)
    store.commit_waiting()
    robots = state.next_request(now=0.0)
    assert robots is not None
    assert robots.robots
    state.attempt_started(robots, now=0.0)
    assert finish(state, robots, Response(status=404, body=b""), now=0.0) is None
    store.close()
    state, store = open_crawl(path, obey_robots=True)
    try:
        store.commit_waiting()
        again = state.next_request(now=ROBOTS_MAX_AGE + 1.0)
        assert again is not None
        assert again.robots
    finally:
        store.close()


def test_a_file_from_before_the_origins_index_gains_it_and_goes_on(tmp_path: Path) -> None:
    """The index by which the store reaches a host's URLs beyond its window is no change
    of layout: a file made before it is opened as it is, and the index added."""
    path = tmp_path / "crawl.db"
    _, store = open_crawl(path)
    store.commit_waiting()
    store.close()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX urls_queued_by_origin")
    db.commit()
    db.close()
    state, store = open_crawl(path)
    try:
        db = sqlite3.connect(path)
        indexes = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
        db.close()
        assert "urls_queued_by_origin" in indexes
        store.commit_waiting()
        request = state.next_request(now=0.0)
        assert request is not None
        assert request.url == ROOT
    finally:
        store.close()


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_a_damaged_file_is_refused_untouched(finished_state: Path, damage: str) -> None:
    data = bytearray(finished_state.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        for offset in range(100, len(data), 97):  # past the header: the pages themselves
            data[offset] ^= 0x5A
    finished_state.write_bytes(bytes(data))
    before = digest(finished_state)
    run = cli("--state", str(finished_state))
    assert_refused(run, "state file")
    assert digest(finished_state) == before


def test_a_file_in_use_is_refused(finished_state: Path) -> None:
    """The running crawl's lock is held here by a real second process."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from trio_crawler._statefile import StateFile;"
            f"f = StateFile({str(finished_state)!r}, roots=(), options={{}});"
            "print('locked', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        before = digest(finished_state)
        assert_refused(cli("--state", str(finished_state)), "in use by a running crawl")
        assert digest(finished_state) == before
    finally:
        holder.communicate("", timeout=HANG_LIMIT)


def test_a_path_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    assert_refused(
        cli("--state", str(tmp_path / "no" / "such" / "dir.db"), "http://127.0.0.1:9/"),
        "cannot open it",
    )


def test_no_roots_and_no_crawl_in_the_file_is_refused(tmp_path: Path) -> None:
    assert_refused(cli("--state", str(tmp_path / "new.db")), "give the ROOTs")


def test_the_api_raises_config_error(tmp_path: Path) -> None:
    (tmp_path / "x.db").write_text("hello")
    with pytest.raises(StateFileError, match="not a trio-crawler state file"):
        Crawler(["http://127.0.0.1:9/"], state=str(tmp_path / "x.db"))


def test_recrawl_needs_state() -> None:
    run = cli("--recrawl", "http://127.0.0.1:9/")
    assert run.returncode == 2, run
    assert "--recrawl needs --state: " in run.stderr, run


# --- a full disk ------------------------------------------------------------------------


@pytest.mark.trio
async def test_a_full_file_stops_the_crawl_and_keeps_it_consistent(tmp_path: Path) -> None:
    """SQLite's own "database or disk is full", by a page limit on the connection: the crawl
    stops with frontier-lost, what committed stays, and the file resumes to the end."""
    pages = {f"/{n}": page(*(f"/{n * 10 + k}" for k in range(1, 11))) for n in range(300)}
    path = tmp_path / "crawl.db"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(pages) as server:
            crawler = Crawler([server.url("/0")], state=str(path), obey_robots=False)
            assert crawler.store is not None
            db = crawler.store.file._db
            (used,) = db.execute("PRAGMA page_count").fetchone()
            db.execute(f"PRAGMA max_page_count = {used + 8}")
            await crawler.crawl()
            assert crawler.finish_reason == "frontier-lost"
            kept = len(crawler.done)
            assert 0 < kept < len(pages)
            check = sqlite3.connect(path)
            assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            check.close()

            again = Crawler([], state=str(path), obey_robots=False)
            await again.crawl()
    assert again.finish_reason == "finished"
    urls = [record.url for record in again.done]
    assert len(urls) == len(set(urls))
    assert sum(1 for record in again.done if record.status == 200) == len(pages)


@pytest.mark.trio
async def test_sitemaps_nested_too_deep_end_the_crawl(tmp_path: Path) -> None:
    """A sitemap index below the third level is counted, not queued: the file must not
    count it as a queued row, or the crawl would wait for it for ever."""

    def index(name: str) -> Reply:
        body = f"<sitemapindex><sitemap><loc>{server.url(name)}</loc></sitemap></sitemapindex>"
        return Reply(headers=[("content-type", "application/xml")], body=body.encode())

    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": page()}) as server:
            for level, name in enumerate(["/sitemap.xml", "/s2.xml", "/s3.xml", "/s4.xml"]):
                server.routes[name] = index(f"/s{level + 2}.xml")
            crawler = Crawler(
                [server.url("/")], state=str(tmp_path / "crawl.db"), sitemaps=True,
                obey_robots=False,
            )  # fmt: skip
            await crawler.crawl()
    assert crawler.finish_reason == "finished"
    assert sorted(record.url.rsplit("/", 1)[1] for record in crawler.done) == [
        "",
        "s2.xml",
        "s3.xml",
        "sitemap.xml",
    ]
    assert crawler.statistics().todo == 0


# --- output files -------------------------------------------------------------------------


@pytest.mark.trio
async def test_a_cut_last_line_and_a_lost_tail_are_mended_on_resume(tmp_path: Path) -> None:
    pages = {f"/{n}": page(f"/{n + 1}") for n in range(20)}
    state, output = tmp_path / "crawl.db", tmp_path / "out.jsonl"
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server(pages) as server:
            root = server.url("/0")
            args = ["--state", str(state), "-o", str(output), "--ignore-robots", root]
            first = await trio.to_thread.run_sync(cli, *args)
            assert first.returncode == 0, first
            whole = output.read_text()
            with output.open("a") as file:  # a half-written line after the last commit
                file.write('{"url": "http://half')
            again = await trio.to_thread.run_sync(cli, *args)
            assert again.returncode == 0, again
            assert output.read_text() == whole
            output.write_text(whole[: len(whole) // 2])  # a power cut lost the tail
            third = await trio.to_thread.run_sync(cli, *args)
    assert third.returncode == 0, third
    records = read_records(output)
    assert sorted(str(record["url"]) for record in records) == sorted(
        server.url(path) for path in [*pages, "/20"]
    )


def test_damaged_rows_are_skipped_not_fatal(
    finished_state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file that is sound SQLite but holds rows this layout never writes (edited by
    hand, say): each is logged and skipped, and the crawl still ends."""
    db = sqlite3.connect(finished_state)
    columns = "INSERT INTO urls (url, state, depth, redirects_left, sitemap, first)"
    db.execute(f"{columns} VALUES (42, 0, 0, 0, 0, 0)")
    db.execute(f"{columns} VALUES ('http://site.test/x', 0, 'deep', 0, 0, 0)")
    db.execute("INSERT INTO records (pass, failed, json) VALUES (1, 0, 'not json')")
    db.commit()
    db.close()
    state, store = open_crawl(finished_state)
    assert store.queued == 2
    store.commit_waiting()
    assert state.next_request(now=0.0) is None
    store.commit_waiting()
    assert state.finished
    assert [record.url for record in store.records()] == [ROOT]
    store.close()
    assert "damaged; skipped" in caplog.text
    assert "is not a record; skipped" in caplog.text
    _, store = open_crawl(finished_state)  # set aside for good: the crawl is finished
    assert store.queued == 0
    store.close()


def listed(store: StoredFrontier) -> tuple[list[str], Counter[str]]:
    """The report's part of a state file: its lines, and the counters once read."""
    listing = store.listing()
    lines = list(listing.lines)
    return lines, listing.counters


def rebuilt(store: StoredFrontier) -> tuple[list[str], Counter[str]]:
    """The same, made from the records as the report of a crawl in memory makes it."""
    listing = Listing.of(sorted_by_url(store.records()))
    lines = list(listing.lines)
    return lines, listing.counters


@settings(max_examples=40, deadline=None)
@given(
    urls=st.lists(st.text(min_size=1, max_size=12), unique=True, max_size=30),
    with_lines=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_the_listing_comes_in_the_order_python_sorts_urls(
    tmp_path_factory: pytest.TempPathFactory, urls: list[str], with_lines: list[bool]
) -> None:
    """The report lists a state file's records as SQLite sorts them; that must be the
    order ``sorted()`` gives, whatever the text (non-ASCII and astral characters too),
    whether a record's line is kept beside it or read from its JSON (a record from before
    the listing), with a row that is no record skipped wherever it falls."""
    path = tmp_path_factory.mktemp("by-url") / "crawl.db"
    _, store = open_crawl(path)
    store.close()
    db = sqlite3.connect(path)
    records = [FetchStatistic(url=url, status=200, size=len(url)) for url in urls]
    rows = [(record.to_json(),) for record in records]
    rows.insert(len(rows) // 2, ("not json",))
    db.executemany("INSERT INTO records (pass, failed, json) VALUES (1, 0, ?)", rows)
    for record_id, line in list(db.execute("SELECT id, json FROM records")):
        record = record_from_line(line)
        if record is not None and with_lines[record_id % len(with_lines)]:
            db.execute(
                "INSERT INTO listing VALUES (?, ?, ?, ?)",
                (record_id, record.url, url_line(record), json.dumps(count_records([record]))),
            )
    db.commit()
    db.close()
    _, store = open_crawl(path)
    try:
        lines, counters = listed(store)
        assert lines == [url_line(record) for record in sorted_by_url(records)]
        assert counters == count_records(records)
        assert [record.url for record in store.records()] == urls
    finally:
        store.close()


def test_a_crawl_keeps_each_records_line_and_the_report_reads_them(tmp_path: Path) -> None:
    """Every record a crawl commits gets its report line and counters beside it, and the
    report read from them is the one the records make: every kind of record, a damaged
    record skipped, a damaged line read from its record instead, and the records of a
    file from before the listing table (opening it adds the table; its records have no
    lines)."""
    path = tmp_path / "crawl.db"
    state, store = open_crawl(path, max_tries=1)
    outcomes: dict[str, Outcome] = {
        ROOT: html([1, 2, 3, 4]),
        "http://site.test/1": Response(status=404, body=b"gone"),
        "http://site.test/2": FetchError(error="ConnectError: refused", retryable=True),
        "http://site.test/3": Response(status=302, location="/0"),
        "http://site.test/4": Response(status=200, content_type="image/png", body=b"png"),
    }
    answer_by_hand(state, store, outcomes, 3)
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM listing").fetchone() == (3,)
    db.execute("DROP TABLE listing")  # as a file from before it
    db.execute("INSERT INTO records (pass, failed, json) VALUES (1, 0, 'not json')")
    db.commit()
    db.close()

    state, store = open_crawl(path, max_tries=1)
    answer_by_hand(state, store, outcomes)
    assert state.finished
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM listing").fetchone() == (2,)
    db.close()
    _, store = open_crawl(path)
    try:
        lines, counters = listed(store)
        assert (lines, counters) == rebuilt(store)
        assert len(lines) == 5
        assert {"html", "error", "fail", "redirect", "other"} <= set(counters)
    finally:
        store.close()

    db = sqlite3.connect(path)
    db.execute(
        "UPDATE listing SET counts = 'not json' WHERE record = (SELECT min(record) FROM listing)"
    )
    db.execute("UPDATE listing SET line = X'00' WHERE record = (SELECT max(record) FROM listing)")
    db.commit()
    db.close()
    _, store = open_crawl(path)
    try:
        assert listed(store) == rebuilt(store)
    finally:
        store.close()


def test_records_of_a_file_gone_since_are_one_error(
    finished_state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The report reads the records after the crawl closed the file; a file removed by
    then is an error logged, and no lines, not a traceback at the report."""
    _, store = open_crawl(finished_state)
    store.close()
    finished_state.unlink()
    assert listed(store) == ([], Counter())
    assert f"cannot read the records in the state file {finished_state}" in caplog.text


def test_the_state_file_is_sqlite_in_wal_mode(finished_state: Path) -> None:
    db = sqlite3.connect(finished_state)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    db.close()
    state_file = StateFile(str(finished_state), roots=(), options={})
    assert state_file.roots == (ROOT,)
    state_file.close()


def test_origin_notes_wait_for_the_next_transaction_or_a_second(tmp_path: Path) -> None:
    """A robots.txt answer's note makes no transaction of its own (at a broad crawl's
    start, 500 answers made about a hundred, one after another): it goes with the next
    one, or once NOTE_INTERVAL has passed, written by a worker, never by the dispatcher,
    which would miss hosts coming due meanwhile. A Retry-After wait is written at once."""
    now = [0.0]
    roots = ["http://a.test/", "http://b.test/"]
    config = CrawlConfig.create(roots, obey_robots=True, state=str(tmp_path / "crawl.db"))
    store = open_state_store(config)
    state = CrawlState(config, frontier=store)
    store.use_runtime(dataclasses.replace(manual_runtime(state), clock=lambda: now[0]))
    robots_txt = Response(status=200, content_type="text/plain", body=b"User-agent: *\n")

    def take() -> FetchRequest:
        request = state.next_request(now=now[0])
        assert request is not None
        state.attempt_started(request, now=now[0])
        return request

    def answer(request: FetchRequest, outcome: Outcome) -> FetchRequest:
        state.attempt_finished(request, outcome, now=now[0])
        return request

    def kept() -> list[str]:
        return sorted(note.origin for note in store.file.origins())

    try:
        store.commit_waiting()  # the roots, into the window
        assert answer(take(), robots_txt).robots  # a.test's robots.txt
        assert not store.has_work(starved=False)
        assert not store.has_work(starved=True)
        now[0] = NOTE_INTERVAL - 0.01
        assert not store.has_work(starved=False)
        now[0] = NOTE_INTERVAL
        assert store.has_work(starved=False)  # for a worker to write ...
        assert not store.has_work(starved=True)  # ... not the dispatcher: none comes of it
        store.commit_waiting()
        assert kept() == ["http://a.test"]

        a_root = take()
        assert answer(take(), robots_txt).robots  # b.test's note waits ...
        assert not store.has_work(starved=False)
        assert answer(a_root, html([])).url == roots[0]  # ... for a.test's page
        assert store.has_work(starved=False)
        store.commit_waiting()
        assert kept() == ["http://a.test", "http://b.test"]

        assert answer(take(), Response(status=503, retry_after=30.0)).url == roots[1]
        assert store.has_work(starved=False)  # the Retry-After, at once, by either
        assert store.has_work(starved=True)
        store.commit_waiting()
        assert [note.wait_until is not None for note in store.file.origins()] == [False, True]
    finally:
        store.close()


def test_a_resumed_crawl_starts_each_slowed_origin_where_it_was(tmp_path: Path) -> None:
    """What an origin taught the crawl is part of the crawl: after a 429 the state file
    keeps the origin's pace, and the next run starts with it (slowed, and counted)."""
    path = tmp_path / "crawl.db"
    state, store = open_crawl(path, adapt=True)
    store.commit_waiting()
    root = state.next_request(now=0.0)
    assert root is not None
    state.attempt_started(root, now=0.0)
    state.attempt_finished(root, html([1, 2, 3, 4]), now=0.01)
    store.commit_waiting()
    pages = [state.next_request(now=0.02) for _ in range(3)]
    for request in pages:
        assert request is not None
        state.attempt_started(request, now=0.02)
    busy = Response(status=429, retry_after=1.0)
    state.attempt_finished(pages[0], busy, now=0.03)
    assert store.slowed == (1, 1)
    gap = store.scheduler.pace_of("http://site.test")
    assert gap is not None
    kept = (gap.gap, gap.window, gap.ceiling)
    store.commit_waiting()
    store.close()

    state, store = open_crawl(path, adapt=True)
    try:
        assert store.slowed == (1, 1)
        assert state.counters()["slowed_origins"] == 1
        pace = store.scheduler.pace_of("http://site.test")
        assert pace is not None
        assert (pace.gap, pace.window, pace.ceiling) == kept
    finally:
        store.close()

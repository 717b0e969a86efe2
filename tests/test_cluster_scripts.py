"""The shared frontier's Lua scripts, driven through a real ``redis-server``.

Seeded random batches of operations from three processes (owners): adding links, leasing,
finishing, dropping, giving back, settling robots.txt, renewing; some calls with a lease
of 0 s, so that leases run out and are reclaimed by whoever calls next. After every call the
whole crawl is read back and checked:

* pending = queued + leased, and each count matches the URLs in that state;
* no URL is both queued and leased; each queued URL has exactly one live entry in its
  origin's queue; each lease has exactly one holder, which counts it among its own;
* done is final, and so is finished, which is set exactly when nothing is pending;
* the seen set is exactly the URLs ever added (the model's).

``CLUSTER_SCRIPT_SEED`` and ``CLUSTER_SCRIPT_STEPS`` choose other and longer runs.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

import coredis
import pytest
import trio
from redis_server import create_args, running_redis

from trio_crawler import _cluster_scripts
from trio_crawler._cluster import SharedCounts, entry_url, parse_entry
from trio_crawler._cluster_scripts import CREATE, DETAILS, STATUS, STEP
from trio_crawler._cluster_session import EARLY, ClusterSession, _ready_time, early_wait
from trio_crawler._config import CrawlConfig
from trio_crawler._frontier import StoreRuntime

SEED = int(os.environ.get("CLUSTER_SCRIPT_SEED", "20261124"))
STEPS = int(os.environ.get("CLUSTER_SCRIPT_STEPS", "300"))
P = "trio-crawler:{prop}:"
ORIGINS = ("http://a.test", "http://b.test", "http://c.test")
POOL = [f"{origin}/p{number}" for origin in ORIGINS for number in range(25)]


def origin(url: str) -> str:
    return url[: url.index("/", 8)]


async def snapshot(client: Any) -> dict[str, Any]:
    meta = await client.hgetall(P + "meta")
    urls = await client.hgetall(P + "urls")
    leases = await client.zrange(P + "leases", 0, -1)
    held = await client.hgetall(P + "held")
    holds = await client.hgetall(P + "holds")
    origins = {}
    queues = {}
    for key in ORIGINS:
        origins[key] = await client.hgetall(P + "o:" + key)
        queues[key] = await client.lrange(P + "q:" + key, 0, -1)
    return {
        "meta": meta,
        "urls": urls,
        "leases": set(leases),
        "held": held,
        "holds": {owner: int(count) for owner, count in holds.items()},
        "origins": origins,
        "queues": queues,
        "started": set(await client.smembers(P + "started")),
    }


def check(state: dict[str, Any], seen: set[str], done_before: set[str], context: str) -> None:
    meta, urls = state["meta"], state["urls"]
    queued = {url for url, st in urls.items() if st == "q"}
    leased = {url for url, st in urls.items() if st == "l"}
    done = {url for url, st in urls.items() if st == "d"}
    fetching = {key for key, o in state["origins"].items() if o and o.get("rb") == "f"}
    assert set(urls) == seen, context
    assert set(urls.values()) <= {"q", "l", "d"}, context
    assert done_before <= done, f"a done URL changed state: {context}"
    assert int(meta["queued"]) == len(queued), context
    assert int(meta["leased"]) == len(leased) + len(fetching), context
    assert state["leases"] == set(state["held"]), context
    assert state["leases"] == leased | {"r " + key for key in fetching}, context
    holders = Counter(value.split("\n", 1)[0] for value in state["held"].values())
    assert state["holds"] == dict(holders), f"each process's count of its leases: {context}"
    for key in ORIGINS:
        o = state["origins"][key]
        if not o:
            continue
        live = [entry_url(entry) for entry in state["queues"][key]]
        live = [url for url in live if urls.get(url) == "q"]
        mine = {url for url in queued if origin(url) == key}
        assert sorted(live) == sorted(mine), f"{key}'s queue: {context}"
        assert int(o["qn"]) == len(mine), f"{key}'s count: {context}"
        holders = {url for url in leased if origin(url) == key} | (
            {"r " + key} if key in fetching else set()
        )
        assert int(o["fl"]) == len(holders), f"{key}'s leases: {context}"
    pending = len(queued) + len(leased) + len(fetching)
    if meta["fin"] == "1":
        assert pending == 0, f"finished with {pending} pending: {context}"
    budget, started = meta["budget"], state["started"]
    if budget == "":
        assert not started, context
        return
    # The budget (--max-pages): every URL leased counted once, never more than it allows;
    # a counted URL leaves it only unfetched (drop), and sdone counts those done.
    assert leased <= started, f"leased, never counted: {context}"
    assert int(meta["started"]) == len(started) <= int(budget), context
    assert started <= queued | leased | done, context
    assert int(meta["sdone"]) == len(started & done), context


@pytest.mark.parametrize(
    ("budget", "delay"),
    [(None, "0"), (12, "0"), (None, "0.002")],
    ids=["no-budget", "max-pages-12", "delay-lease-ahead"],
)
@pytest.mark.trio
async def test_script_invariants_hold_under_random_batches(
    tmp_path: Path, budget: int | None, delay: str
) -> None:
    """With a delay, dones and robots.txt settled ask for their origin's next URL ahead
    (``a``) at random, with the times they measured (``t``)."""
    rng = random.Random(f"{SEED}-{budget}-{delay}")
    ahead = delay != "0"
    per_host = "1" if ahead else "2"  # a host's URLs are leased ahead one at a time only
    options = json.dumps({"max_pages": budget})
    ever_spent = False
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            create, step = client.register_script(CREATE), client.register_script(STEP)
            root = POOL[0]
            args = create_args(P, "", [root], options, obey="1", delay=delay, per_host=per_host)
            answer = await create(keys=[P + "meta"], args=args)
            assert answer[0] == "created"
            seen = {root}
            # With lease ahead, two processes: a third waiting empty-handed would stop it.
            owners = ("o1", "o2") if ahead else ("o1", "o2", "o3")
            held: dict[str, set[str]] = {owner: set() for owner in owners}
            done_before: set[str] = set()
            finished = False
            leased_ahead = early = 0
            for number in range(STEPS):
                owner = rng.choice(list(held))
                ops: list[dict[str, Any]] = []
                for _ in range(rng.randint(1, 4)):
                    kind = rng.choice(["add", "add", "done", "drop", "back", "robots", "renew"])
                    mine = sorted(held[owner])
                    if kind == "add":
                        key = rng.choice(ORIGINS)
                        urls = rng.sample([u for u in POOL if origin(u) == key], rng.randint(1, 4))
                        queue = rng.random() < 0.9
                        ops.append(
                            {"k": "add", "o": key, "u": urls, "d": 1, "r": 10, "s": 0,
                             "f": rng.random() < 0.2, "q": queue}
                        )  # fmt: skip
                        if rng.random() < 0.5:  # found through a page: its entries say so
                            ops[-1]["ref"] = rng.choice(POOL)
                        if queue and not finished:
                            seen.update(urls)
                    elif kind in ("done", "drop", "back") and mine:
                        member = rng.choice(mine)
                        if member.startswith("r "):
                            continue
                        if kind == "back":
                            entry = f"2 1 10 0 {member}" + rng.choice(["", f" {POOL[0]}"])
                            ops.append({"k": "back", "u": member, "e": entry, "w": 0})
                        else:
                            ops.append({"k": kind, "u": member, "o": origin(member), "rec": 1})
                            if ahead and kind == "done" and rng.random() < 0.7:
                                ops[-1].update(a=1, t=rng.choice([0.0, 4e9]))
                    elif kind == "done":  # someone else's, or a URL nobody holds
                        url = rng.choice(POOL)
                        ops.append({"k": "done", "u": url, "o": origin(url), "rec": 1})
                    elif kind == "robots":
                        tickets = [m for m in mine if m.startswith("r ")]
                        if tickets:
                            key = rng.choice(tickets)[2:]
                            settle = rng.choice(["k", "x", "back"])
                            if settle == "back":
                                ops.append({"k": "rback", "o": key})
                            else:
                                ops.append({"k": "robots", "o": key, "st": settle, "rt": "allow"})
                                if ahead and rng.random() < 0.7:
                                    ops[-1]["a"] = 1
                    elif kind == "renew" and mine:
                        ops.append({"k": "renew", "u": mine})
                if rng.random() < 0.7:
                    ops.append({"k": "lease", "n": rng.randint(1, 5)})
                    if ahead and rng.random() < 0.5:  # called early: some may come ahead
                        ops[-1].update(h=rng.choice([0.001, 0.01, 1.0]), e=rng.randint(0, 3))
                lease_for = "0" if rng.random() < 0.1 else "60"
                raw = await step(keys=[P + "meta"], args=[P, "", owner, lease_for, json.dumps(ops)])
                answer = json.loads(raw)
                state = await snapshot(client)
                context = f"seed {SEED}, step {number}, owner {owner}, ops {ops}"
                check(state, seen, done_before, context)
                # What each owner now holds, as the server says.
                for who in held:
                    held[who] = {
                        member
                        for member, value in state["held"].items()
                        if value.split("\n", 1)[0] == who
                    }
                for item in answer["l"] if isinstance(answer["l"], list) else []:
                    member = "r " + item[1] if item[0] == "r" else entry_url(item[1])
                    assert member in held[owner], f"leased but not held: {context}"
                    leased_ahead += item[0] == "p" and item[2] > 0
                    early += item[0] == "p" and item[2] > 0 and "h" in ops[-1]
                was_finished = finished
                finished = state["meta"]["fin"] == "1"
                assert not (was_finished and not finished), f"finished was undone: {context}"
                done_before = {url for url, st in state["urls"].items() if st == "d"}
                if budget is not None:
                    spent, pending = answer["b"]
                    counted = state["started"]
                    assert spent == (len(counted) >= budget), context
                    assert pending == len(counted - done_before), context
                    ever_spent = ever_spent or spent
            assert done_before, "no URL was ever done: the run tested little"
            assert leased_ahead or not ahead, "nothing was leased ahead: the run tested little"
            assert early or not ahead, "no lease called early took any: the run tested little"
            if budget is not None:
                assert ever_spent, "the budget was never spent: the run tested little"


def test_scripts_are_the_packaged_files_each_with_its_header() -> None:
    """Each script is the installed prelude followed by its own file; every file opens
    with a comment header naming its keys, arguments, answer and invariants; the prelude's
    header describes every key it names; and a file that is not there is an error."""
    lua = files("trio_crawler") / "lua"
    names = ("prelude", "create", "step", "status", "details")
    source = {name: (lua / f"{name}.lua").read_text(encoding="utf-8") for name in names}
    prelude = source["prelude"]
    scripts = {"create": CREATE, "step": STEP, "status": STATUS, "details": DETAILS}
    for name, script in scripts.items():
        assert script == prelude + source[name], name
    for name, text in source.items():
        lines = text.splitlines()
        header = "\n".join(line for line in lines[: lines.index("")] if line.startswith("--"))
        assert header.startswith(f"-- {name}.lua: "), name
        for label in ("KEYS[1]", "ARGV[1]", "Returns", "Keeps"):
            assert re.search(rf"^-- {re.escape(label)} ", header, re.MULTILINE), (name, label)
    layout = prelude[: prelude.index("\nlocal ")]
    for suffix in re.findall(r"P \.\. '([a-z:]+)'", prelude):
        described = re.search(rf"^-- +P {re.escape(suffix)}", layout, re.MULTILINE)
        assert described, f"the key P {suffix} is not in prelude.lua's header"
    with pytest.raises(FileNotFoundError):
        _cluster_scripts._source("missing.lua")


@pytest.mark.trio
async def test_a_malformed_batch_writes_nothing_and_a_damaged_entry_is_counted_out(
    tmp_path: Path,
) -> None:
    """Redis undoes nothing, so a batch is checked whole before its first write: one bad
    operation, even after good ones, leaves the crawl exactly as it was. And an entry that
    is no entry (pushed by another program, with its counts) is counted out as it is
    dropped, so that queued still matches the URLs queued."""
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            create, step = client.register_script(CREATE), client.register_script(STEP)
            root, key = POOL[0], ORIGINS[0]
            args = create_args(P, "", [root], "{}", obey="0", delay="0", per_host="")
            assert (await create(keys=[P + "meta"], args=args))[0] == "created"

            async def call(ops: list[dict[str, Any]]) -> dict[str, Any]:
                raw = await step(keys=[P + "meta"], args=[P, "", "o1", "60", json.dumps(ops)])
                answer: dict[str, Any] = json.loads(raw)
                return answer

            good = {"k": "add", "o": key, "u": [POOL[1]], "d": 1, "r": 10, "s": 0,
                    "f": False, "q": True}  # fmt: skip
            for bad in (
                {"k": "robots", "o": key},  # no state: it would end a lease, then fail
                {"k": "add", "o": key, "u": [POOL[2]], "q": True},  # no depth
                {"k": "add", "u": [POOL[2]], "d": 1, "r": 10, "s": 0, "f": False, "q": True},
                {"k": "back", "u": root, "e": "not an entry"},
                {**good, "ref": "http://a.test/with space"},  # a referrer is one URL
                {**good, "ref": 7},
                {"k": "done", "u": 7, "o": key, "rec": 1},
                {"k": "lease", "n": -1},
                {"k": "no such kind"},
            ):
                before = await snapshot(client)
                assert await call([good, bad, {"k": "lease", "n": 5}]) == {"bad": 2}, bad
                assert await snapshot(client) == before, f"{bad} changed the crawl"

            await client.lpush(P + "q:" + key, ["no entry at all"])
            await client.hincrby(P + "o:" + key, "qn", 1)
            await client.hincrby(P + "meta", "queued", 1)
            answer = await call([good, {"k": "lease", "n": 10}])
            assert [entry_url(item[1]) for item in answer["l"]] == [root, POOL[1]]
            state = await snapshot(client)
            check(state, {root, POOL[1]}, set(), "after a damaged entry")


@pytest.mark.trio
async def test_an_entry_carries_its_referrer_and_a_root_none(tmp_path: Path) -> None:
    """Links added with the page that offers them (``ref``) are queued with it, after the
    URL: a lease hands it back with the request, depth and all (layout 2)."""
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            create, step = client.register_script(CREATE), client.register_script(STEP)
            root, key = POOL[0], ORIGINS[0]
            args = create_args(P, "", [root], "{}", obey="0", delay="0", per_host="")
            assert (await create(keys=[P + "meta"], args=args))[0] == "created"
            assert await client.hget(P + "meta", "v") == "2"
            add = {"k": "add", "o": key, "u": POOL[1:3], "d": 1, "r": 9, "s": 0,
                   "f": False, "q": True, "ref": root}  # fmt: skip
            ops = json.dumps([add, {"k": "lease", "n": 5}])
            answer = json.loads(await step(keys=[P + "meta"], args=[P, "", "o1", "60", ops]))
    entries = [item[1] for item in answer["l"]]
    assert entries == [f"1 0 10 0 {root}", f"1 1 9 0 {POOL[1]} {root}", f"1 1 9 0 {POOL[2]} {root}"]
    requests = [parse_entry(entry) for entry in entries]
    assert [(r.url, r.depth, r.referrer) for r in requests if r is not None] == [
        (root, 0, None),
        (POOL[1], 1, root),
        (POOL[2], 1, root),
    ]
    assert parse_entry(f"1 1 9 0 {POOL[1]} not-a-url") is None


@pytest.mark.trio
async def test_a_crawl_is_joined_by_its_roots_digest(tmp_path: Path) -> None:
    """A process gives the roots' digest; the roots themselves go only to create the crawl
    ('absent' asks for them) and come back only to say that other roots were given. A
    crawl made before meta kept the digest gets it at its first join."""
    roots, others = POOL[:3], POOL[3:5]
    made = create_args(P, "1000", roots, "{}", obey="0", delay="0", per_host="")
    digest, listed = made[2], made[8]
    settings = made[3:8]

    def join(prefix: str, digest: str) -> list[str]:
        return [prefix, "1001", digest, *settings, ""]

    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            create = client.register_script(CREATE)
            absent = await create(keys=[P + "meta"], args=join(P, digest))
            assert absent[:2] == ["absent", ""]
            assert await client.dbsize() == 0, "asking wrote nothing"
            assert (await create(keys=[P + "meta"], args=made))[:2] == ["created", ""]
            assert await client.hget(P + "meta", "rsum") == digest
            joined = await create(keys=[P + "meta"], args=join(P, digest))
            assert joined[:2] == ["joined", ""], "the roots are not sent back"
            assert joined[3] == "{}"
            assert (await create(keys=[P + "meta"], args=join(P, "")))[:2] == ["joined", ""]
            other = create_args(P, "1001", others, "{}", obey="0", delay="0", per_host="")
            for args in (join(P, other[2]), other):
                assert (await create(keys=[P + "meta"], args=args))[:2] == ["mismatch", listed]
            # A crawl made before the digest was kept: the first join fills it in.
            await client.hdel(P + "meta", ["rsum"])
            assert (await create(keys=[P + "meta"], args=join(P, other[2])))[0] == "mismatch"
            assert await client.hget(P + "meta", "rsum") == digest
            assert (await create(keys=[P + "meta"], args=join(P, digest)))[0] == "joined"
            queued = await client.hgetall(P + "urls")
    assert queued == dict.fromkeys(roots, "q"), "only the creation queued roots"


async def _traffic(client: Any) -> tuple[int, int]:
    """The bytes the server has read from its clients and written to them so far."""
    stats = await client.info("stats")
    return int(stats["total_net_input_bytes"]), int(stats["total_net_output_bytes"])


@pytest.mark.trio
async def test_a_process_that_joins_sends_no_roots_and_gets_none_back(tmp_path: Path) -> None:
    """The creator sends the roots once; a joiner with the same roots (a command line
    without ROOTs has the crawl's) sends and receives a few hundred bytes to join, not
    the roots twice over; one with other roots is refused, naming the crawl's."""
    from trio_crawler._cluster import ClusterError

    roots = [f"http://h{number}.test/page/{number}" for number in range(2000)]
    listed = len(json.dumps(roots))
    with running_redis(tmp_path / "redis") as server:
        config = CrawlConfig.create(roots, frontier=server.url(), crawl_id="big")
        runtime = StoreRuntime(
            clock=trio.current_time,
            wall_offset=0.0,
            run_in_thread=None,  # neither is called to join
            shielded=None,
            wake=lambda: None,
            on_lost=lambda exc: None,
            scheduling=lambda: True,
            limit_counts=lambda: {},
        )
        async with coredis.Redis(port=server.port, decode_responses=True) as watcher:
            sent = []
            for expected in (True, False):
                session = ClusterSession(config)
                async with session.connect(runtime):
                    before = await _traffic(watcher)
                    joined = await session.join(config)
                    after = await _traffic(watcher)
                assert joined.created is expected
                sent.append((after[0] - before[0], after[1] - before[1]))
            other = CrawlConfig.create(roots[1:], frontier=server.url(), crawl_id="big")
            session = ClusterSession(other)
            async with session.connect(runtime):
                with pytest.raises(ClusterError, match=r"has other roots: .*h0\.test"):
                    await session.join(other)
    (created_in, _), (joined_in, joined_out) = sent
    assert created_in > 2 * listed, "the creator sent the roots and each with its origin"
    # The watcher's INFO calls count too: about 30 bytes in, 1.5 kB out.
    assert joined_in < 1000, sent
    assert joined_out < 4000, sent


async def one_origin_at_no_delay(client: Any, root: str, *, per_host: str) -> StepCall:
    """A crawl of ``root`` made at 1000 (no robots.txt, no pace, no delay, ``per_host`` at
    a time to the host, "" for no limit); the step call on it, with leases of 60 s."""
    create, step = client.register_script(CREATE), client.register_script(STEP)
    options = json.dumps({"adapt": False})
    args = create_args(P, "1000", [root], options, obey="0", delay="0", per_host=per_host)
    assert (await create(keys=[P + "meta"], args=args))[0] == "created"

    async def call(owner: str, at: float, ops: list[dict[str, Any]]) -> dict[str, Any]:
        raw = await step(keys=[P + "meta"], args=[P, str(at), owner, "60", json.dumps(ops)])
        answer: dict[str, Any] = json.loads(raw)
        return answer

    return call


@pytest.mark.trio
async def test_leases_of_a_process_that_stopped_renewing_are_told_apart(tmp_path: Path) -> None:
    """A process renews its leases every third of its lease, in a step call: one that has
    made no call for half its lease holds its leases for no live process. An idle lease
    says how many and when the last comes back; details.lua (for --status) says the same,
    with the time of day. The scripts take the clock as an argument: no waiting here."""
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            details = client.register_script(DETAILS)
            key = ORIGINS[0]
            urls = [u for u in POOL if origin(u) == key][:6]
            # Leases limited only by --max-per-host, which this crawl has none of.
            call = await one_origin_at_no_delay(client, urls[0], per_host="")

            add = {"k": "add", "o": key, "u": urls[1:5], "d": 1, "r": 10, "s": 0,
                   "f": False, "q": True}  # fmt: skip
            leased = await call("dead", 1000, [add, {"k": "lease", "n": 3}])
            assert len(leased["l"]) == 3
            # Half a lease (30 s) without a call: still live; past it, stranded.
            assert "o" not in await call("idle", 1029, [{"k": "lease", "n": 0}])
            # (A lease that got something says nothing: that process is not waiting.)
            assert len((await call("idle", 1030, [{"k": "lease", "n": 5}]))["l"]) == 2
            answer = await call("idle", 1031, [{"k": "lease", "n": 5}])
            assert not answer["l"], answer
            assert answer["o"] == [3, 29], answer
            told = await details(keys=[P + "meta"], args=[P, "1031"])
            assert told[0] == 3, told  # the idle process's own two are live
            assert float(told[1]) == 1060.0, told
            assert told[2:] == ["", 0], told
            # The holder calls again (a renewal): its leases are live again.
            mine = [item[1].split(" ", 4)[4] for item in leased["l"]]
            await call("dead", 1032, [{"k": "renew", "u": mine}])
            assert "o" not in await call("idle", 1033, [{"k": "lease", "n": 5}])
            assert (await details(keys=[P + "meta"], args=[P, "1033"]))[:2] == [0, ""]


@pytest.mark.trio
async def test_a_hosts_delay_runs_from_the_times_the_caller_gives(tmp_path: Path) -> None:
    """The delay between two requests to a host runs from the times the process measured,
    not from when its calls reach the server: from an answer's end (done's ``t``), which
    the call that says so follows by the record's writing; from a request's start
    (started's ``t``), which goes with the next call; from robots.txt's answer (robots's
    ``t``). A time ahead of the server's clock counts as now. A lease that ran out holds
    its host a delay from then: its request may have gone out unannounced."""
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            create, step = client.register_script(CREATE), client.register_script(STEP)

            async def call(
                owner: str, at: float, ops: list[dict[str, Any]], *, prefix: str = P
            ) -> dict[str, Any]:
                args = [prefix, str(at), owner, "10", json.dumps(ops)]
                answer: dict[str, Any] = json.loads(await step(keys=[prefix + "meta"], args=args))
                return answer

            def leased(answer: dict[str, Any]) -> list[str]:
                return [entry_url(item[1]) for item in answer["l"]]

            async def start(prefix: str, urls: list[str], per_host: str, obey: str = "0") -> None:
                key = origin(urls[0])
                # No pace, a delay of 2 s, --max-per-host per_host; robots.txt if obey.
                options = json.dumps({"adapt": False})
                args = create_args(
                    prefix, "1000", urls[:1], options, obey=obey, delay="2", per_host=per_host
                )
                assert (await create(keys=[prefix + "meta"], args=args))[0] == "created"
                add = {"k": "add", "o": key, "u": urls[1:], "d": 1, "r": 10, "s": 0,
                       "f": False, "q": True}  # fmt: skip
                await call("a", 1000, [add], prefix=prefix)

            urls = [u for u in POOL if origin(u) == ORIGINS[0]][:4]
            lease = {"k": "lease", "n": 5}

            # One at a time: the answer ended at 1001.0, the done came at 1001.5.
            await start(P, urls, "1")
            assert leased(await call("a", 1000, [lease])) == urls[:1]
            # Less than it asked for: it waits for more, and is told when more comes.
            assert await client.sismember(P + "idle", "a")
            done = {"k": "done", "u": urls[0], "o": ORIGINS[0], "rec": 1}
            started = {"k": "started", "u": urls[0], "t": 1000.2}
            answer = await call("a", 1001.5, [started, {**done, "t": 1001.0}, lease])
            assert leased(answer) == [], answer
            assert answer["w"] == pytest.approx(1.5), answer
            assert leased(await call("b", 1003.0, [lease])) == urls[1:2]
            # A time ahead of the server's is taken as now.
            done = {**done, "u": urls[1], "t": 5000.0}
            assert leased(await call("b", 1003.1, [done, lease])) == []
            assert leased(await call("b", 1005.0, [lease])) == [], "held 2 s from 1003.1"
            assert leased(await call("b", 1005.1, [lease])) == urls[2:3]
            # Its holder stops: when the lease runs out (10 s), the host waits 2 s more.
            answer = await call("c", 1016.0, [lease])
            assert leased(answer) == [], answer
            assert answer["w"] == pytest.approx(2.0), answer
            assert leased(await call("c", 1018.0, [lease])) == urls[2:3]

            # Two at a time: the next may go a delay after the first's start, as measured.
            other = "trio-crawler:{two}:"
            await start(other, urls, "2")
            assert leased(await call("a", 1000, [lease], prefix=other)) == urls[:1]
            started = {"k": "started", "u": urls[0], "t": 1000.1}
            answer = await call("a", 1000.5, [started, lease], prefix=other)
            assert leased(answer) == [], answer
            assert answer["w"] == pytest.approx(1.6), answer
            assert leased(await call("a", 1002.1, [lease], prefix=other)) == urls[1:2]
            # Nothing is leased ahead there: its delay runs from starts, told by the process.
            done = {"k": "done", "u": urls[1], "o": ORIGINS[0], "rec": 1, "t": 1002.2, "a": 1}
            assert leased(await call("a", 1002.3, [done], prefix=other)) == []

            # robots.txt: its answer ended at 1000.3, told at 1001.
            third = "trio-crawler:{robots}:"
            await start(third, urls, "1", obey="1")
            assert (await call("a", 1000, [lease], prefix=third))["l"] == [["r", ORIGINS[0]]]
            settled = {"k": "robots", "o": ORIGINS[0], "st": "k", "rt": "allow", "t": 1000.3}
            answer = await call("a", 1001, [settled, lease], prefix=third)
            assert leased(answer) == [], answer
            assert answer["w"] == pytest.approx(1.3), answer
            assert leased(await call("a", 1002.3, [lease], prefix=third)) == urls[:1]


@pytest.mark.trio
async def test_a_wait_is_told_to_the_holders_of_the_origins_other_leases(tmp_path: Path) -> None:
    """A URL given back with a wait (a Retry-After, a backoff) holds its origin on the
    server, for the leases to come. A lease of the origin already given to another worker
    is told on the channel (``hold T ORIGIN``), so that its holder does not start it inside
    the wait; with no other lease of the origin held, nothing is said."""
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            key = ORIGINS[0]
            urls = [u for u in POOL if origin(u) == key][:3]
            call = await one_origin_at_no_delay(client, urls[0], per_host="2")
            add = {"k": "add", "o": key, "u": urls[1:], "d": 1, "r": 10, "s": 0, "f": False,
                   "q": True}  # fmt: skip
            await call("a", 1000, [add])
            first = (await call("a", 1000, [{"k": "lease", "n": 1}]))["l"]
            second = (await call("b", 1000, [{"k": "lease", "n": 1}]))["l"]
            assert [entry_url(item[1]) for item in first + second] == urls[:2]

            async with client.pubsub(
                channels=[P + "events"], ignore_subscribe_messages=True
            ) as events:

                async def told() -> list[str]:
                    """What the channel said up to a marker published now."""
                    await client.publish(P + "events", "marker")
                    said: list[str] = []
                    for _ in range(10):  # None: the subscription's acknowledgement
                        message = await events.get_message(timeout=5)
                        if message is not None:
                            said.append(message["data"])
                            if said[-1] == "marker":
                                break
                    assert said[-1:] == ["marker"], said
                    return [text for text in said[:-1] if text.startswith("hold")]

                back = {"k": "back", "u": urls[0], "e": first[0][1], "w": 30}
                assert (await call("a", 1001, [back]))["r"] == [1]
                assert await told() == [f"hold 1031.000000 {key} a"]
                # b's lease is the origin's only one now: given back, nobody is told.
                back = {"k": "back", "u": urls[1], "e": second[0][1], "w": 30}
                assert (await call("b", 1002, [back]))["r"] == [1]
                assert await told() == []


SIX_HOSTS = [f"http://h{n}.test" for n in range(6)]
SIX_ROOTS = [f"{key}/" for key in SIX_HOSTS]


def leased_with_waits(answer: dict[str, Any]) -> list[tuple[str, float]]:
    """What a step call leased: each URL with its seconds until its origin may go."""
    return [(entry_url(item[1]), item[2]) for item in answer["l"] or []]


# Each of SIX_HOSTS's next page, /1, queued behind its root.
NEXT_PAGES = [
    {"k": "add", "o": key, "u": [f"{key}/1"], "d": 1, "r": 10, "s": 0, "f": False, "q": True}
    for key in SIX_HOSTS
]
StepCall = Callable[[str, float, list[dict[str, Any]]], Awaitable[dict[str, Any]]]


async def six_hosts_at_a_delay(client: Any) -> StepCall:
    """A crawl of SIX_ROOTS made at 1000 (no robots.txt, no pace, a delay of 2 s, one
    request at a time to a host); the step call on it, as a process makes it."""
    create, step = client.register_script(CREATE), client.register_script(STEP)
    options = json.dumps({"adapt": False})
    args = create_args(P, "1000", SIX_ROOTS, options, obey="0", delay="2", per_host="1")
    assert (await create(keys=[P + "meta"], args=args))[0] == "created"

    async def call(owner: str, at: float, ops: list[dict[str, Any]]) -> dict[str, Any]:
        args = [P, str(at), owner, "60", json.dumps(ops)]
        answer: dict[str, Any] = json.loads(await step(keys=[P + "meta"], args=args))
        return answer

    return call


@pytest.mark.trio
@pytest.mark.parametrize("waited", [0.02, 0.1], ids=["h2-due-20ms-ago", "h2-due-100ms-ago"])
async def test_a_done_leases_its_origins_next_url_ahead_within_the_callers_share(
    tmp_path: Path, waited: float
) -> None:
    """A done operation with ``a`` leases its origin's next URL to the caller at once,
    with the seconds until the origin's delay ends: no process needs waking for it then.
    Not while another process waits with nothing at all, nor beyond the caller's share of
    the leases (all of them over the processes that hold or wait for some, and one more):
    that origin goes to 'ready', and the idle processes are told when it will be ready
    ("work N T"), not woken for it now. Nor while an origin whose time has come waits in
    'ready' for a worker, which would wait longer: one whose time came less than the
    script's WAKE_GRACE (0.05 s) ago waits for a process to wake and call, and does not
    stop a lease ahead."""
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            call = await six_hosts_at_a_delay(client)
            origins, roots = SIX_HOSTS, SIX_ROOTS

            leased = leased_with_waits

            def done(url: str, ended: float, *, ahead: bool = True) -> dict[str, Any]:
                op = {"k": "done", "u": url, "o": origin(url), "rec": 1, "t": ended}
                return {**op, "a": 1} if ahead else op

            adds = [
                {"k": "add", "o": key, "u": [f"{key}/{n}" for n in range(1, 4)], "d": 1,
                 "r": 10, "s": 0, "f": False, "q": True}
                for key in origins
            ]  # fmt: skip
            await call("o1", 1000, adds)
            first = leased(await call("o1", 1000, [{"k": "lease", "n": 6}]))
            assert [url for url, _ in first] == roots
            assert all(wait <= 0 for _, wait in first), "each could go since its delay ended"

            # Alone, o1 gets h0's next page, to start 2 s after the answer ended.
            answer = await call("o1", 1000.5, [done(roots[0], 1000.4)])
            assert leased(answer) == [(f"{origins[0]}/1", pytest.approx(1.9))]

            async with client.pubsub(
                channels=[P + "events"], ignore_subscribe_messages=True
            ) as events:
                assert leased(await call("o2", 1000.6, [{"k": "lease", "n": 4}])) == []
                # o2 waits with nothing: o1 leaves h1 to it.
                answer = await call("o1", 1000.7, [done(roots[1], 1000.6)])
                assert leased(answer) == []
                told = None
                for _ in range(5):  # a subscription's acknowledgement reads as None
                    message = await events.get_message(timeout=5)
                    if message is not None:
                        told = message["data"]
                        break
                assert told == f"work {answer['n']} 1002.600000"
                answer = await call("o2", 1002.6, [{"k": "lease", "n": 4}])
                assert leased(answer) == [(f"{origins[1]}/1", 0)]
            # o1 holds 5 of 6 leases: past its share of 4, it leaves h2 to the others.
            assert leased(await call("o1", 1002.7, [done(roots[2], 1002.6)])) == []
            # h2 may go from 1004.6 on. Past the grace, it waits for a worker: o2, below
            # its share, leases nothing ahead, and its next lease takes h2.
            at = 1004.6 + waited
            answer = await call("o2", at, [done(f"{origins[1]}/1", 1002.8)])
            if waited > 0.05:
                assert leased(answer) == []
            else:
                assert leased(answer) == [(f"{origins[1]}/2", pytest.approx(1004.8 - at))]
            assert leased(await call("o2", at, [{"k": "lease", "n": 1}])) == [
                (f"{origins[2]}/1", pytest.approx(-waited))
            ]


@pytest.mark.trio
async def test_a_lease_takes_the_callers_own_origins_first_and_the_others_in_turn(
    tmp_path: Path,
) -> None:
    """Of the origins whose time has come, a lease takes those the caller leased from last
    first, then, while it has room, the others in order: in a crawl paced by its CPU
    every host is ready whenever a process asks, and a host's requests went to whichever
    process asked, each opening a connection of its own. An origin passed over three
    times (step.lua's AFFINITY_SKIPS) is anyone's again: its last holder, busy or slow,
    keeps it no longer than that."""
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            call = await six_hosts_at_a_delay(client)

            def urls(answer: dict[str, Any]) -> list[str]:
                return [url for url, _ in leased_with_waits(answer)]

            def done(url: str, ended: float) -> dict[str, Any]:
                return {"k": "done", "u": url, "o": origin(url), "rec": 1, "t": ended}

            def lease(n: int) -> list[dict[str, Any]]:
                return [{"k": "lease", "n": n}]

            await call("o1", 1000, NEXT_PAGES)
            assert urls(await call("o1", 1000, lease(1))) == SIX_ROOTS[:1]
            assert urls(await call("o2", 1000, lease(5))) == SIX_ROOTS[1:]
            await call("o1", 1000.1, [done(SIX_ROOTS[0], 1000.1)])
            await call("o2", 1000.2, [done(root, 1000.2) for root in SIX_ROOTS[1:]])
            h0, h1, h2, h3, h4, h5 = (f"{key}/1" for key in SIX_HOSTS)
            # At 1003 every host's /1 may go, h0's (o1's) first.
            assert urls(await call("o2", 1003, lease(1))) == [h1]
            assert urls(await call("o2", 1003.01, lease(1))) == [h2]
            assert urls(await call("o2", 1003.02, lease(1))) == [h3]
            # Passed over three times, h0 is anyone's: it goes before o2's own h4.
            assert urls(await call("o2", 1003.03, lease(1))) == [h0]
            # A caller with room takes the others' origins when it has none of its own.
            assert urls(await call("o1", 1003.04, lease(3))) == [h4, h5]


@pytest.mark.trio
async def test_a_lease_called_early_takes_what_comes_within_its_horizon(tmp_path: Path) -> None:
    """A lease with ``h`` and ``e`` also takes, ahead, up to ``e`` origins whose time comes
    within ``h`` seconds, earliest first, each with its wait: the process woken for them
    calls that early and starts them on its own clock. Nothing further off, nothing ahead
    without ``h``, and none past ``e``; and the answer's ``w`` says when the next one left
    in 'ready' may go."""
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            call = await six_hosts_at_a_delay(client)
            origins, roots = SIX_HOSTS, SIX_ROOTS

            leased = leased_with_waits

            await call("o1", 1000, NEXT_PAGES)
            assert len(leased(await call("o1", 1000, [{"k": "lease", "n": 6}]))) == 6
            # Four hosts done, their answers ended 10 ms apart: each may go 2 s after.
            dones = [
                {"k": "done", "u": roots[i], "o": origins[i], "rec": 1, "t": 1000.1 + i / 100}
                for i in range(4)
            ]
            await call("o1", 1000.2, dones)
            # Not yet due, and no horizon: nothing, and the first may go in 50 ms.
            answer = await call("o2", 1002.05, [{"k": "lease", "n": 6}])
            assert leased(answer) == []
            assert answer["w"] == pytest.approx(0.05)
            # 25 ms ahead: h0 and h1 come within it; h2 is 5 ms further.
            answer = await call("o2", 1002.085, [{"k": "lease", "n": 6, "h": 0.025, "e": 6}])
            assert leased(answer) == [
                (f"{origins[0]}/1", pytest.approx(0.015)),
                (f"{origins[1]}/1", pytest.approx(0.025)),
            ]
            assert answer["w"] == pytest.approx(0.035)
            # Room for one more ahead: h2 of h2 and h3.
            answer = await call("o2", 1002.1, [{"k": "lease", "n": 6, "h": 0.05, "e": 1}])
            assert leased(answer) == [(f"{origins[2]}/1", pytest.approx(0.02))]
            # Due now, h3 is leased as usual, whatever e says.
            answer = await call("o2", 1002.15, [{"k": "lease", "n": 6, "h": 0.05, "e": 0}])
            assert leased(answer) == [(f"{origins[3]}/1", pytest.approx(-0.02))]


@pytest.mark.trio
async def test_no_lease_ahead_that_the_same_call_takes_back(tmp_path: Path) -> None:
    """A call made with leases that run out at once (lease seconds 0) leases nothing ahead:
    its own lease operation reclaims the leases that ran out before it leases, and would
    take back the one just leased ahead, which the answer would still list as the caller's
    (a random soak found it: seed 2, 1500 steps)."""
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            await six_hosts_at_a_delay(client)
            step = client.register_script(STEP)
            origins, roots = SIX_HOSTS, SIX_ROOTS
            adds = [{"k": "add", "o": origins[0], "u": [f"{origins[0]}/1"], "d": 1, "r": 10,
                     "s": 0, "f": False, "q": True}]  # fmt: skip

            async def call(at: float, lease_for: str, ops: list[dict[str, Any]]) -> Any:
                args = [P, str(at), "o1", lease_for, json.dumps(ops)]
                return json.loads(await step(keys=[P + "meta"], args=args))

            await call(1000, "60", adds)
            assert len((await call(1000, "60", [{"k": "lease", "n": 6}]))["l"]) == 6
            done = {"k": "done", "u": roots[0], "o": origins[0], "rec": 1, "t": 1000.4, "a": 1}
            answer = await call(1000.5, "0", [done, {"k": "lease", "n": 1}])
            held = await client.hgetall(P + "held")
            for item in answer["l"]:
                assert entry_url(item[1]) in held, f"listed as leased, not held: {item}"
            assert f"{origins[0]}/1" not in {entry_url(item[1]) for item in answer["l"]}


@pytest.mark.trio
async def test_a_process_that_went_quiet_counts_for_no_share(tmp_path: Path) -> None:
    """Processes that found nothing to lease and then stopped calling (they left, or
    died) are still in the idle set; they must not shrink the share of the ones at
    work: counted, o1's share of its 6 leases over 3 processes was 3, and it could
    lease no origin's next URL ahead until work next came (which empties the set)."""
    with running_redis(tmp_path / "redis") as server:
        async with coredis.Redis(port=server.port, decode_responses=True) as client:
            call = await six_hosts_at_a_delay(client)
            origins, roots = SIX_HOSTS, SIX_ROOTS
            await call("o1", 1000, NEXT_PAGES)
            assert len((await call("o1", 1000, [{"k": "lease", "n": 6}]))["l"]) == 6
            for quiet in ("o2", "o3"):
                assert not (await call(quiet, 1000.5, [{"k": "lease", "n": 4}]))["l"]
            assert await client.smembers(P + "idle") == {"o2", "o3"}
            # 40 s on, more than half a lease since o2 and o3 last called.
            done = {"k": "done", "u": roots[0], "o": origins[0], "rec": 1, "t": 1039.9, "a": 1}
            answer = await call("o1", 1040, [done])
            assert [(entry_url(item[1]), item[2]) for item in answer["l"]] == [
                (f"{origins[0]}/1", pytest.approx(1.9))
            ]


def test_a_work_message_says_when_the_work_is_ready() -> None:
    """``work N T`` gives the server time at which work will be ready; ``work N``, or a T
    that is no time, means work is ready now."""
    assert _ready_time("1002.600000") == pytest.approx(1002.6)
    assert _ready_time("") is None
    assert _ready_time("nan") is None
    assert _ready_time("inf") is None
    assert _ready_time("soon") is None


def session_at_1000(**options: Any) -> ClusterSession:
    """A session of a crawl with ``options``, whose engine's clock reads 0 at the server's
    1000, for the messages it hears (nothing is called)."""
    config = CrawlConfig.create(
        ["http://a.test/"], frontier="redis://127.0.0.1:1/", crawl_id="c", **options
    )
    session = ClusterSession(config)
    session._runtime = StoreRuntime(
        clock=lambda: 0.0,
        wall_offset=1000.0,
        run_in_thread=None,  # neither is called here
        shielded=None,
        wake=lambda: None,
        on_lost=lambda exc: None,
        scheduling=lambda: True,
        limit_counts=lambda: None,
        loop_clock=False,
    )
    return session


class _NoHold:
    """A window for messages that are no hold."""

    def wake(self) -> None:
        pass

    def hold(self, origin: str, until: float) -> None:
        raise AssertionError("no hold was said")


@pytest.mark.parametrize(("per_host", "early"), [(1, EARLY), (2, 0.0)])
def test_an_idle_process_calls_early_for_work_to_come(per_host: int, early: float) -> None:
    """Told ``work N T``, an idle process looks again EARLY before T, where the crawl
    leases ahead (one request at a time to a host), and at T where it does not; a later T
    than it would look anyway changes nothing. After a call, it waits that much less for
    the work its answer says is coming, but all of it for work due sooner than that: the
    call found it not to be leased ahead, and calling again at once would spin."""
    session = session_at_1000(max_per_host=per_host, delay=1.0)
    assert session.early == early
    window = _NoHold()
    session.idle_until = 5.0
    assert session._heard("work 7 1002.000000", window) is True
    assert session.idle_until == pytest.approx(2.0 - early)
    assert session._heard("work 8 1004.000000", window) is False
    assert session.idle_until == pytest.approx(2.0 - early)
    assert early_wait(1.0, EARLY) == pytest.approx(1.0 - EARLY)
    assert early_wait(EARLY / 2, EARLY) == EARLY / 2
    assert early_wait(math.inf, EARLY) == math.inf


def test_a_hold_message_holds_the_origin_on_this_process_clock() -> None:
    """``hold T ORIGIN CALLER`` tells the window the origin's wait, T moved from the
    server's clock to the engine's; the caller's own message is not its news (its answer
    set the wait already, exactly), and a message that is no hold changes nothing."""
    session = session_at_1000()
    held: list[tuple[str, float]] = []

    class Window:
        def wake(self) -> None:
            raise AssertionError("a hold wakes nobody")

        def hold(self, origin: str, until: float) -> None:
            held.append((origin, until))

    for data in (
        "hold 1030.500000 http://a.test other:1:ab",
        f"hold 1040.000000 http://a.test {session.owner}",
        "hold soon http://a.test other:1:ab",
        "hold 1050.000000",
    ):
        assert session._heard(data, Window()) is False
    assert held == [("http://a.test", pytest.approx(30.5))]


def test_an_answer_older_than_the_finish_does_not_undo_it() -> None:
    """The "finished" message and the answers to step calls come on two connections: an
    answer the server gave before the crawl finished may be read after the message. Finished
    is final on the server, so such an answer's counts leave the finish as it is."""
    config = CrawlConfig.create(["http://a.test/"], frontier="redis://127.0.0.1:1/", crawl_id="c")
    session = ClusterSession(config)
    session.shared = SharedCounts(0, 0, 5, 0, True, 5)  # as the message left it
    stale = {"r": [], "c": [1, 1, 4, 0, 0, 5, 0, 0]}
    session._check_answer(stale, [])
    assert session.shared.finished
    fresh = {"r": [], "c": [0, 0, 5, 0, 1, 5, 0, 0]}
    session._check_answer(fresh, [])
    assert session.shared == SharedCounts(0, 0, 5, 0, True, 5)


def test_the_roots_are_not_sent_again() -> None:
    """The server has every root before a process's first call (the crawl's creation
    queued them; a joiner has the same roots), so the store settles the core's roots
    itself, none new, instead of sending one operation a root to be told so. Other links
    alone (the sitemaps robots.txt names) still go to the server."""
    from trio_crawler._frontier import Completion, Offer, Settled
    from trio_crawler._store_redis import RedisFrontier

    roots = ["http://a.test/", "http://b.test/x"]
    config = CrawlConfig.create(roots, frontier="redis://127.0.0.1:1/", crawl_id="c")
    frontier = RedisFrontier(config)
    answers: list[Settled] = []
    offers = tuple(Offer((root,), depth=0, redirects_left=10) for root in config.roots)
    frontier.finish(Completion(None, False, None, offers), lambda _, s: answers.append(s))
    assert answers == [Settled()]
    assert frontier.in_flight_count == 0
    assert set(config.roots) <= frontier.seen_urls()
    sitemap = (Offer(("http://a.test/sitemap.xml",), depth=0, redirects_left=10, sitemap=1),)
    frontier.finish(Completion(None, False, None, sitemap), lambda _, s: answers.append(s))
    assert answers == [Settled()]
    assert frontier.in_flight_count == 1


def test_links_this_process_has_sent_are_not_sent_again() -> None:
    """A page's links that this process offered before (or was handed) are on the server
    by the time its call is applied, so the next call leaves them out; links only counted
    (beyond --max-depth) still go, and each new link goes once."""
    from trio_crawler._frontier import Completion, Offer
    from trio_crawler._store_redis import RedisFrontier

    config = CrawlConfig.create(["http://a.test/"], frontier="redis://127.0.0.1:1/", crawl_id="c")
    frontier = RedisFrontier(config)

    def offered(*urls: str, queue: bool = True) -> Completion:
        return Completion(None, False, None, (Offer(urls, depth=1, redirects_left=5, queue=queue),))

    frontier.finish(offered("http://a.test/1", "http://a.test/2"), lambda *_: None)
    frontier.finish(offered("http://a.test/2", "http://a.test/3"), lambda *_: None)
    frontier.finish(offered("http://a.test/1"), lambda *_: None)
    frontier.finish(offered("http://a.test/3", "http://a.test/9", queue=False), lambda *_: None)
    ops, _ = frontier._gather(lease=False)
    assert [(op["k"], op["u"], op["q"]) for op in ops] == [
        ("add", ["http://a.test/1", "http://a.test/2"], True),
        ("add", ["http://a.test/3"], True),
        ("add", ["http://a.test/3", "http://a.test/9"], False),
    ]
    assert frontier.seen_urls() >= {f"http://a.test/{n}" for n in (1, 2, 3)}

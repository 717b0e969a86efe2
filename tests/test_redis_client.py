"""The crawler's own Redis client (``trio_crawler/_redis.py``): its reading of RESP, and its
connections against a real ``redis-server``, on Trio and on asyncio (through AnyIO).

A real server proves what matters: a reply is never read as another command's (after a
timeout, a cancellation, a connection the server closed), scripts run whether or not the
server has them cached, and a subscription hears what is published. ``coredis`` is the
outside party here where one is needed (publishing, killing our connections).
"""

from __future__ import annotations

import socket
import ssl
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import coredis
import pytest
from coredis.tokens import PureToken
from hypothesis import given
from hypothesis import strategies as st
from redis_server import RedisServer, running_redis

from trio_crawler._redis import (
    KEEPALIVE_IDLE,
    KEEPALIVE_INTERVAL,
    KEEPALIVE_PROBES,
    AuthenticationFailed,
    AuthenticationRequired,
    Endpoint,
    NotPermitted,
    Redis,
    RedisError,
    RedisLost,
    Script,
    Unavailable,
    _Incomplete,
    _Link,
    _Messages,
    encode,
    parse,
    subscribe,
)

if TYPE_CHECKING:
    from pathlib import Path

LIMIT = 20.0


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


def client_for(url: str, *, answer_timeout: float = 5.0) -> Redis:
    return Redis(
        Endpoint.from_url(url),
        name="trio-crawler",
        connect_timeout=5.0,
        answer_timeout=answer_timeout,
    )


# -- reading RESP ----------------------------------------------------------------------------


def test_each_kind_of_reply_is_read() -> None:
    wire = (
        b"+OK\r\n:42\r\n$4\r\nh\xc3\xa9l\r\n$2\r\n\r\n\r\n$-1\r\n*-1\r\n"
        b"*3\r\n:1\r\n*1\r\n$1\r\nx\r\n$0\r\n\r\n"
    )
    replies, at = [], 0
    while at < len(wire):
        reply, at = parse(wire, at)
        replies.append(reply)
    assert replies == ["OK", 42, "hél", "\r\n", None, None, [1, ["x"], ""]]


def test_an_error_reply_is_a_value_with_its_kind() -> None:
    cases = {
        b"-ERR DB index is out of range\r\n": (RedisError, "DB index is out of range"),
        b"-NOAUTH Authentication required.\r\n": (AuthenticationRequired, "NOAUTH"),
        b"-WRONGPASS invalid username-password pair\r\n": (AuthenticationFailed, "WRONGPASS"),
        b"-ERR invalid password\r\n": (AuthenticationFailed, "invalid password"),
        b"-NOPERM this user has no permissions\r\n": (NotPermitted, "NOPERM"),
        b"-NOSCRIPT No matching script.\r\n": (RedisError, "NOSCRIPT"),
        b"-LOADING Redis is loading the dataset in memory\r\n": (Unavailable, "LOADING"),
        b"-BUSY Redis is busy running a script.\r\n": (Unavailable, "BUSY"),
    }
    for wire, (kind, start) in cases.items():
        reply, used = parse(wire, 0)
        assert type(reply) is kind, wire
        assert str(reply).startswith(start), wire
        assert used == len(wire)


@given(st.lists(st.text(max_size=40), max_size=8))
def test_a_reply_cut_anywhere_is_incomplete_until_it_is_whole(items: list[str]) -> None:
    """What a stream gives in pieces: every proper prefix asks for more, the whole is read
    (an array of bulk strings is what ``encode`` writes and what Redis answers in)."""
    wire = encode(items)
    for cut in range(len(wire)):
        with pytest.raises(_Incomplete):
            parse(wire[:cut], 0)
    assert parse(wire, 0) == (items, len(wire))


class _Chunks:
    """A stream that gives ``chunks``, one a receive, as a socket gives what came."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self.chunks:
            raise anyio.EndOfStream
        return self.chunks.pop(0)


@given(
    st.lists(st.lists(st.text(max_size=30), max_size=4), min_size=1, max_size=12),
    st.data(),
)
def test_replies_read_together_are_each_read_where_they_lie(
    replies: list[list[str]], data: st.DataObject
) -> None:
    """A pipeline's replies as the stream gives them, cut anywhere: all read in order, and
    what follows them left whole for the next read."""
    wire = b"".join(encode(reply) for reply in replies) + encode(["next"])
    cuts = sorted(data.draw(st.sets(st.integers(1, len(wire) - 1), max_size=6)))
    chunks = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    link = _Link(_Chunks(chunks))  # type: ignore[arg-type]

    async def read() -> None:
        assert await link.read_many(len(replies)) == replies
        assert await link.read() == ["next"]
        assert not link.buffer
        with pytest.raises(RedisLost):
            await link.read()

    anyio.run(read)


@pytest.mark.parametrize("wire", [b"?what\r\n", b":12x\r\n", b"$2\r\n\xff\xfe\r\n", b"*z\r\n"])
def test_what_is_not_resp_is_a_lost_connection(wire: bytes) -> None:
    with pytest.raises(RedisLost):
        parse(wire, 0)


# -- where the server is ---------------------------------------------------------------------


def test_a_url_gives_the_login() -> None:
    plain = Endpoint.from_url("redis://127.0.0.1:7000/3")
    assert (plain.host, plain.port, plain.database, plain.tls) == ("127.0.0.1", 7000, 3, None)
    assert plain.login("me") == [["SELECT", "3"], ["CLIENT", "SETNAME", "me"]]
    user = Endpoint.from_url("redis://ann:p%40ss@[::1]")
    assert (user.host, user.port) == ("::1", 6379)
    assert user.login("me") == [["AUTH", "ann", "p@ss"], ["CLIENT", "SETNAME", "me"]]


def test_a_password_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_PASSWORD", "from-env")
    assert Endpoint.from_url("redis://h/", password_variable="SOME_PASSWORD").password == (
        "from-env"
    )
    assert Endpoint.from_url("redis://:url@h/", password_variable="SOME_PASSWORD").password == (
        "url"
    )


def test_tls_verifies_unless_told_otherwise() -> None:
    strict = Endpoint.from_url("rediss://h/").tls
    assert strict is not None
    assert strict.verify_mode == ssl.CERT_REQUIRED
    assert strict.check_hostname
    loose = Endpoint.from_url("rediss://h/?ssl_cert_reqs=none").tls
    assert loose is not None
    assert loose.verify_mode == ssl.CERT_NONE
    assert not loose.check_hostname
    unnamed = Endpoint.from_url("rediss://h/?ssl_check_hostname=false").tls
    assert unnamed is not None
    assert unnamed.verify_mode == ssl.CERT_REQUIRED
    assert not unnamed.check_hostname


# -- a real server ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_commands_scripts_and_the_connections_name(redis: RedisServer) -> None:
    script = Script.of("return {KEYS[1], ARGV[1], redis.call('HGET', KEYS[1], 'f')}")
    with anyio.fail_after(LIMIT):
        async with (
            client_for(redis.url(db=2)) as client,
            coredis.Redis(port=redis.port, db=2, decode_responses=True) as other,
        ):
            assert await client.execute("HSET", "h", "f", "v") == 1
            assert await client.hget("h", "f") == "v"
            assert await client.hmget("h", ["f", "g"]) == ["v", None]
            # Not cached: EVALSHA is refused, the script's text is sent once, then its SHA.
            assert await client.run_script(script, ["h"], ["é"]) == ["h", "é", "v"]
            assert await other.script_exists([script.sha]) == (True,)
            await other.script_flush()
            assert await client.run_script(script, ["h"], ["2"]) == ["h", "2", "v"]
            with pytest.raises(RedisError, match="wrong kind of value"):
                await client.execute("LPUSH", "h", "x")
            names = await other.client_list()
            assert "trio-crawler" in [entry["name"] for entry in names]


@pytest.mark.anyio
async def test_a_pipeline_is_one_write_and_its_replies_in_order(
    redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a joiner reads of the origins new to it: many commands in one write (one round
    trip, not one each), every reply in its command's place; a refusal among them is
    raised once all replies are read, so the next command still gets its own."""
    writes: list[bytes] = []
    send = _Link.send

    async def counted(link: _Link, data: bytes) -> None:
        writes.append(data)
        await send(link, data)

    monkeypatch.setattr(_Link, "send", counted)
    with anyio.fail_after(LIMIT):
        async with client_for(redis.url(db=3)) as client:
            writes.clear()  # the login's
            assert (
                await client.pipeline([("HSET", f"h{i}", "f", str(i)) for i in range(50)])
                == [1] * 50
            )
            replies = await client.pipeline([("HMGET", f"h{i}", "f", "g") for i in range(60)])
            assert replies == [[str(i), None] for i in range(50)] + [[None, None]] * 10
            assert len(writes) == 2
            with pytest.raises(RedisError, match="wrong kind of value"):
                await client.pipeline([("SET", "s", "x"), ("LPUSH", "h1", "x"), ("SET", "t", "y")])
            assert await client.execute("MGET", "s", "t") == ["x", "y"]
            assert await client.pipeline([]) == []
            assert len(writes) == 4


@pytest.mark.anyio
async def test_a_reply_is_never_read_as_the_next_commands(redis: RedisServer) -> None:
    """A command cancelled, or timed out, while the server still owes its reply: the
    connection is dropped, and the next command gets its own answer on a new one."""
    with anyio.fail_after(LIMIT):
        async with client_for(redis.url(), answer_timeout=0.3) as client:
            with pytest.raises(TimeoutError):
                await client.execute("BLPOP", "nothing", "2")
            assert await client.execute("PING") == "PONG"
            with anyio.move_on_after(0.1) as scope:
                await client.execute("BLPOP", "nothing", "2")
            assert scope.cancelled_caught
            assert await client.execute("ECHO", "mine") == "mine"


@pytest.mark.anyio
async def test_a_connection_the_server_closed_is_lost_then_made_again(
    redis: RedisServer,
) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            client_for(redis.url()) as client,
            coredis.Redis(port=redis.port, decode_responses=True) as other,
        ):
            await other.client_kill(type_=PureToken.NORMAL, skipme=True)  # all but its own
            with pytest.raises(RedisLost):
                await client.execute("PING")
            assert await client.execute("PING") == "PONG"


@pytest.mark.anyio
async def test_no_server_is_a_lost_connection(tmp_path: Path) -> None:
    with running_redis(tmp_path / "gone") as server:
        url = server.url()
    with anyio.fail_after(LIMIT), pytest.raises(RedisLost, match="cannot connect"):
        async with client_for(url):
            pass


@pytest.mark.anyio
async def test_a_password_is_asked_for_and_checked(tmp_path: Path) -> None:
    with running_redis(tmp_path / "redis", password="s3cret") as server, anyio.fail_after(LIMIT):
        with pytest.raises(AuthenticationRequired):
            async with client_for(server.url(password="")):
                pass
        with pytest.raises(AuthenticationFailed):
            async with client_for(server.url(password="wrong")):
                pass
        async with client_for(server.url()) as client:
            assert await client.execute("PING") == "PONG"


@pytest.mark.anyio
async def test_a_subscription_hears_what_is_published_until_its_connection_goes(
    redis: RedisServer,
) -> None:
    endpoint = Endpoint.from_url(redis.url())
    heard: list[Any] = []
    with anyio.fail_after(LIMIT):
        async with (
            coredis.Redis(port=redis.port, decode_responses=True) as other,
            subscribe(endpoint, "events", name="t", connect_timeout=5.0) as messages,
        ):
            for text in ("work 1", "finished"):
                await other.publish("events", text)
                heard.append(await messages.__anext__())
            await other.client_kill(type_=PureToken.PUBSUB)
            with pytest.raises(RedisLost):
                await messages.__anext__()
    assert heard == ["work 1", "finished"]


@pytest.mark.anyio
async def test_every_connection_is_probed_while_idle(redis: RedisServer) -> None:
    """A subscription waits for messages for minutes on end: its connection, and the
    commands' one, are probed by TCP keepalive, so a server that vanished without a word
    is noticed (see _keep_alive)."""
    endpoint = Endpoint.from_url(redis.url())

    def probed(stream: anyio.abc.ByteStream) -> None:
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == KEEPALIVE_INTERVAL
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == KEEPALIVE_PROBES

    with anyio.fail_after(LIMIT):
        async with (
            client_for(redis.url()) as client,
            subscribe(endpoint, "events", name="t", connect_timeout=5.0) as messages,
        ):
            assert await client.execute("PING") == "PONG"
            assert client._link is not None
            probed(client._link.stream)
            assert isinstance(messages, _Messages)
            probed(messages._link.stream)


@pytest.mark.anyio
async def test_a_session_listens_again_after_its_subscription_is_lost(
    redis: RedisServer,
) -> None:
    """The crawl's channel, its connection killed: the session subscribes again, wakes its
    window (what was published meanwhile is gone), and hears the next message."""
    from trio_crawler._cluster_session import ClusterSession
    from trio_crawler._config import CrawlConfig

    config = CrawlConfig.create(["http://a.test/"], frontier=redis.url(), crawl_id="c")
    session = ClusterSession(config)
    wakes: list[anyio.Event] = [anyio.Event(), anyio.Event()]

    class Window:
        def wake(self) -> None:
            next(event for event in wakes if not event.is_set()).set()

        def hold(self, origin: str, until: float) -> None:
            raise AssertionError("no hold was published")

    with anyio.fail_after(LIMIT):
        async with (
            client_for(redis.url()) as client,
            coredis.Redis(port=redis.port, decode_responses=True) as other,
            anyio.create_task_group() as tasks,
        ):
            session._client = client
            await tasks.start(session.listen, Window())
            assert await other.client_kill(type_=PureToken.PUBSUB) == 1
            await wakes[0].wait()  # subscribed again (the wake comes once it is)
            assert not session.shared.finished
            assert await other.publish(session.prefix + "events", "finished") == 1
            await wakes[1].wait()
            assert session.shared.finished
            tasks.cancel_scope.cancel()

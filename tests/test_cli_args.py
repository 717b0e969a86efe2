"""Parsing the command line (``_cli_args.parse_args``): options, aliases, help, version,
and usage errors.

Most tests call ``parse_args`` directly. Those about what a user sees (a usage error is one
line on stderr with exit status 2 and no request made; ``--help``; ``--version``) run
``python -m trio_crawler`` as a subprocess, on Trio's real clock.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from trio_crawler._cli_args import CommandLine, UsageError, parse_args
from trio_crawler._config import CLI_MAX_TASKS, CrawlOptions

from httpserver import Reply, open_test_server
from support import HANG_LIMIT, run_cli


def test_command_line_defaults_are_the_apis_but_max_tasks() -> None:
    options = parse_args(["x.com"])
    assert options.crawl == replace(CrawlOptions(), max_tasks=CLI_MAX_TASKS)
    assert options == CommandLine(roots=("x.com",), crawl=options.crawl)


@pytest.mark.parametrize(
    ("argv", "name", "value"),
    [
        (["--exclude", "a|b"], "exclude", "a|b"),
        (["--lenient"], "strict", False),
        (["--strict"], "strict", True),
        (["--max_redirect", "3"], "max_redirect", 3),
        (["--max-tries", "2"], "max_tries", 2),
        (["--timeout", "2.5"], "timeout", 2.5),
        (["--max-time", "9"], "max_time", 9.0),
        (["--max-pages", "5"], "max_pages", 5),
        (["--max-depth", "0"], "max_depth", 0),
        (["--max-size", "100"], "max_size", 100),
        (["--max-url-length", "50"], "max_url_length", 50),
        (["--ignore-robots"], "obey_robots", False),
        (["--sitemaps"], "sitemaps", True),
        (["--user-agent", "bot/1"], "user_agent", "bot/1"),
        (["--max-per-host", "2"], "max_per_host", 2),
        (["--delay", "0.5"], "delay", 0.5),
        (["--include", "/a", "--include", "/b"], "include", ("/a", "/b")),
        (["--no-parent"], "no_parent", True),
        (["--header", "X-A: 1", "--header", "X-B:2"], "headers", (("X-A", "1"), ("X-B", "2"))),
    ],
)
def test_each_crawl_flag_sets_its_option(argv: list[str], name: str, value: object) -> None:
    options = parse_args([*argv, "x.com"])
    assert getattr(options.crawl, name) == value
    assert type(getattr(options.crawl, name)) is type(value)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--demo"], {"demo": True, "roots": ()}),
        (["--serve-demo", "--port", "8000"], {"serve_demo": True, "port": 8000}),
        (["--engine", "asyncio", "x.com"], {"engine": "asyncio"}),
        (["--grace", "0", "x.com"], {"grace": 0.0}),
        (["-o", "-", "--warc", "a.warc", "x.com"], {"output": "-", "warc": "a.warc"}),
        (["--no-progress", "x.com"], {"progress": False}),
        (["-vv", "x.com"], {"verbose": 2, "log_level": 10}),
        (["-q", "x.com"], {"quiet": True, "log_level": 40}),
        (["x.com"], {"log_level": 30, "progress": True, "port": None, "grace": 5.0}),
    ],
)
def test_each_command_line_flag_sets_its_option(
    argv: list[str], expected: dict[str, object]
) -> None:
    options = parse_args(argv)
    assert {key: getattr(options, key) for key in expected} == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-depth", "-1", "x.com"], "--max-depth must be >= 0, not -1"),
        (["--max-size", "1.5", "x.com"], "--max-size must be a whole number, not '1.5'"),
        (["--delay", "61", "x.com"], "--delay must be from 0 to 60 seconds, not 61.0"),
        (["--user-agent", "a\tb", "x.com"], "--user-agent must be printable ASCII"),
        (["--grace", "-1", "x.com"], "--grace must be a number of seconds >= 0, not -1.0"),
        (["--grace", "inf", "x.com"], "--grace must be a number of seconds >= 0, not inf"),
        (["--serve-demo", "--port", "70000"], "--port must be from 0 to 65535, not 70000"),
        (["--serve-demo", "--port", "x"], "--port must be a whole number, not 'x'"),
        (["--engine", "curio", "x.com"], "--engine must be one of trio, anyio-trio, "),
        (["--strict", "--lenient", "x.com"], "not allowed with argument --strict"),
        ([""], "ROOT has '', which is not a valid URL"),
        (["--serve-demo", "x.com"], "--serve-demo only serves the demo site"),
        # Options named in a message are spelt as flags too.
        (["--recrawl", "x.com"], "--recrawl needs --state: it crawls again the crawl kept"),
        (
            ["--state", "s.db", "--frontier", "redis://h/", "x.com"],
            "--frontier and --state cannot go together",
        ),
        (
            ["--frontier", "rediss://h/0?ssl_cert_reqs=maybe", "x.com"],
            "--frontier ssl_cert_reqs must be one of none, optional, required, not 'maybe' "
            "(in 'rediss://h/0?ssl_cert_reqs=maybe')",
        ),
    ],
)
def test_usage_errors_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_args(argv)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--exclude", "("], "--exclude is not a valid regular expression"),
        ([], "no ROOT given"),
        (["--max-tasks", "0"], "--max-tasks must be >= 1, not 0"),
        (["--max_tasks", "many"], "--max-tasks must be a whole number, not 'many'"),
        (["--max-tries", "0"], "--max-tries must be >= 1, not 0"),
        (["--max-redirect", "-1"], "--max-redirect must be >= 0, not -1"),
        (["--timeout", "-3"], "--timeout must be a positive number of seconds, not -3.0"),
        (["--timeout", "nan"], "--timeout must be a positive number of seconds, not nan"),
        (["--max-time", "soon"], "--max-time must be a number, not 'soon'"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
        (["--engine", "twisted"], "--engine must be one of trio, anyio-trio, anyio-asyncio"),
        (["--port", "80"], "--port goes with --serve-demo"),
        (["--demo"], "--demo crawls the demo site; drop the ROOT"),
        (["ftp://example.com/"], "ROOT has 'ftp://example.com/', which is not an http(s) URL"),
        (["http://[::1"], "ROOT has 'http://[::1', which is not a valid URL"),
        # Options that mean nothing in this run.
        (["--crawl-id", "docs"], "--crawl-id 'docs' names a shared crawl: it needs --frontier"),
        (["--lease", "30"], "--lease '30' is for a shared crawl: it needs --frontier"),
        (
            ["--frontier", "redis://127.0.0.1:1/0?db=3"],
            "--frontier takes no query in a redis:// URL (TLS options go with rediss://), "
            "not 'redis://127.0.0.1:1/0?db=3'",
        ),
        (
            ["--frontier", "rediss://:pw@127.0.0.1:1/0?timeout=1"],
            "--frontier may set only ssl_ca_certs, ssl_certfile, ssl_keyfile, ssl_cert_reqs, "
            "ssl_check_hostname in its query, not 'timeout' (in "
            "'rediss://:***@127.0.0.1:1/0?timeout=1')",
        ),
    ],
)
@pytest.mark.trio
async def test_usage_error_is_one_line_and_makes_no_request(args: list[str], message: str) -> None:
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": Reply.html("hi")}) as server:
            root = [] if args == [] else [server.url()]
            if args and args[0].startswith("ftp"):
                root = []
            result = await run_cli(*args, *root)
    assert result.returncode == 2
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("trio-crawler: error: ")
    assert message in lines[0]
    assert server.requests == []


@pytest.mark.parametrize(
    "args",
    [
        ["--header", "X-Token"],
        ["--header", "X-Token: a\u00e9"],
        ["--header", "Host: elsewhere"],
        ["--header", "X-A: 1", "--header", ": no name"],
        ["--include", "/ok", "--include", "[unclosed"],
    ],
    ids=["no-colon", "not-ascii", "framing", "no-name", "bad-regex"],
)
@pytest.mark.trio
async def test_a_malformed_header_or_include_touches_no_file(
    tmp_path: Path, args: list[str]
) -> None:
    """Exit 2, one line naming the flag and the value, no request, and no file made:
    neither the output nor the state file nor the archive."""
    files = {name: tmp_path / name for name in ("out.jsonl", "crawl.db", "a.warc")}
    outputs = ["-o", str(files["out.jsonl"]), "--warc", str(files["a.warc"])]
    with trio.fail_after(HANG_LIMIT):
        async with open_test_server({"/": Reply.html("hi")}) as server:
            result = await run_cli(*args, *outputs, "--state", str(files["crawl.db"]), server.url())
    assert result.returncode == 2
    [line] = result.stderr.decode().splitlines()
    assert line.startswith(f"trio-crawler: error: {args[-2]} "), line
    assert repr(args[-1]) in line, line
    assert server.requests == []
    assert not any(path.exists() for path in files.values())


def test_input_file_roots_come_after_the_command_lines(tmp_path: Path) -> None:
    listed = tmp_path / "roots.txt"
    listed.write_text(
        "\ufeff# a comment\n\nhttp://b.example/\n   c.example/x  \n# http://no/\nA.EXAMPLE\n",
        encoding="utf-8",
    )
    options = parse_args(["a.example", "-i", str(listed)])
    assert options.roots == ("a.example", "http://b.example/", "http://c.example/x",
                             "http://a.example/")  # fmt: skip
    assert options.input_file == str(listed)


def test_input_file_dash_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    class Stdin:
        buffer = io.BytesIO(b"x.example\ny.example\n")

    monkeypatch.setattr(sys, "stdin", Stdin)
    assert parse_args(["-i", "-"]).roots == ("http://x.example/", "http://y.example/")


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        (b"http://ok/\nftp://no/\n", [], "-i {}: line 2 is no http(s) URL: 'ftp://no/'"),
        (b"\xff\xfe junk", [], "-i {}: not UTF-8 text (byte 0)"),
        (b"# nothing\n\n", [], "no ROOT given: -i {} lists none"),
        (b"http://ok/\n", ["--demo"], "-i {} lists ROOTs, and --demo takes none"),
        (None, [], "-i {}: cannot read it: No such file or directory"),
    ],
    ids=["not-a-url", "not-utf-8", "empty", "with-demo", "missing"],
)
def test_input_file_errors_name_the_file(
    tmp_path: Path, content: bytes | None, extra: list[str], message: str
) -> None:
    listed = tmp_path / "roots.txt"
    if content is not None:
        listed.write_bytes(content)
    with pytest.raises(UsageError) as raised:
        parse_args([*extra, "-i", str(listed)])
    assert str(raised.value) == message.format(listed)


@pytest.mark.trio
async def test_an_http_library_not_installed_is_a_one_line_usage_error() -> None:
    with trio.fail_after(HANG_LIMIT):
        environ = {**os.environ, "TRIO_CRAWLER_HTTP": "urllib3"}
        result = await run_cli("http://127.0.0.1:9/", env=environ)
    assert result.returncode == 2
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("trio-crawler: error: TRIO_CRAWLER_HTTP must name an installed ")
    assert line.endswith(", not 'urllib3'")


def test_help_and_version() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "trio_crawler", "--help"], capture_output=True, check=True, text=True
    ).stdout
    for option in ("--max-redirect", "--max-tries", "--max-tasks", "--exclude", "--lenient"):
        assert option in help_text
    version = subprocess.run(
        [Path(sys.executable).with_name("trio-crawler"), "--version"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert version.startswith("trio-crawler ")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["x.com"], {"max_tasks": 100, "max_tries": 4, "max_redirect": 10, "strict": True}),
        (
            ["--max_tasks", "5", "--max_tries", "2", "--max_redirect", "1", "x.com"],
            {"max_tasks": 5, "max_tries": 2, "max_redirect": 1},
        ),
        (
            ["--max-tasks", "6", "--lenient", "--timeout", "2.5", "--max-time", "9", "x.com"],
            {"max_tasks": 6, "strict": False, "timeout": 2.5, "max_time": 9.0},
        ),
    ],
)
def test_options_and_chapter_aliases(argv: list[str], expected: dict[str, object]) -> None:
    options = parse_args(argv)
    assert options.roots == ("x.com",)
    assert {key: getattr(options.crawl, key) for key in expected} == expected


def test_help_groups_options_and_ends_with_examples() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "trio_crawler", "--help"], capture_output=True, check=True, text=True
    ).stdout
    groups = ["what to crawl:", "limits:", "manners:", "output:", "examples:"]
    positions = [help_text.index(group) for group in groups]
    assert positions == sorted(positions)
    for option, default in [
        ("--max-size", "(default 10485760)"),
        ("--grace", "(default 5)"),
        ("--timeout", "(default 10)"),
        ("--max-tasks", "(default 100)"),
        ("--user-agent", "(default trio-crawler/"),
    ]:
        assert option in help_text
        assert default in help_text
    for option in ("--ignore-robots", "--max-per-host", "--delay", "--warc", "--no-progress"):
        assert option in help_text
    examples = help_text[help_text.index("examples:") :]
    assert examples.count("trio-crawler ") >= 3


def test_version_names_the_http_library() -> None:
    version = subprocess.run(
        [sys.executable, "-m", "trio_crawler", "--version"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert version.startswith("trio-crawler ")
    assert "httpx" in version

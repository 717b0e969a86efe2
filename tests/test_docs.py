"""The documentation holds together: a short README, and no relative link that leads nowhere.

The README is for users and stays short; the details live once each in docs/, and the
README, CONTRIBUTING.md, docs/*.md and benchmarks/README.md link to each other. A link
to a file that was renamed, or to a heading that was reworded, fails here: every relative
Markdown link must name a file that exists and, for ``file.md#anchor`` (or ``#anchor``),
a heading of that file whose anchor GitHub would make.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 250
# Five minutes of reading, at about 250 words a minute: the prose a user reads, not the
# commands and code they copy.
README_MAX_WORDS = 1250

DOCS = sorted(
    [README, ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md", *ROOT.glob("docs/*.md")]
)

FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or [text](target "title"); images too. The text may hold code spans.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# A link's target, from "](" to its ")": what prose_words leaves out.
LINK_TARGET = re.compile(r"\]\([^)]*\)")
ABSOLUTE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced and indented code blocks."""
    lines: list[str] = []
    fence: str | None = None
    in_indented = previous_blank = False
    for line in path.read_text(encoding="utf-8").splitlines():
        match = FENCE.match(line)
        if fence is not None:
            if match and match.group(1) == fence:
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        blank = not line.strip()
        # An indented code block starts after a blank line and runs while lines are indented.
        in_indented = line.startswith("    ") and (previous_blank or in_indented) and not blank
        previous_blank = blank
        if not in_indented:
            lines.append(line)
    return lines


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its text, lower-cased, punctuation dropped."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, duplicates numbered as GitHub numbers them."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in prose_lines(path):
        match = HEADING.match(line)
        if not match:
            continue
        anchor = github_anchor(match.group(2))
        n = counts.get(anchor, 0)
        counts[anchor] = n + 1
        found.add(anchor if n == 0 else f"{anchor}-{n}")
    return found


def relative_links(path: Path) -> list[str]:
    """The targets of the file's Markdown links that are not URLs with a scheme."""
    targets: list[str] = []
    for line in prose_lines(path):
        # Code spans are literal text: a bracket inside one is no link.
        line = CODE_SPAN.sub(lambda m: "x" * len(m.group(0)), line)
        for target in LINK.findall(line):
            if not ABSOLUTE.match(target):
                targets.append(target)
    return targets


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; at most {README_MAX_LINES}: details go in docs/"
    )


def prose_words(markdown: str) -> int:
    """Words a reader reads: fenced and indented code left out, and each link counted by
    its text, not its target."""
    words = 0
    fenced = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            continue
        words += len(LINK_TARGET.sub("]", line).split())
    return words


def test_prose_words_count_text_not_code_or_link_targets() -> None:
    text = "Two [short words](docs/a-long-anchor.md#here) here.\n\n    code is not read\n"
    assert prose_words(text + "```\nnor this\n```\n") == 4


def test_readme_reads_in_five_minutes() -> None:
    words = prose_words(README.read_text(encoding="utf-8"))
    assert words <= README_MAX_WORDS, (
        f"README.md has {words} words of prose; at most {README_MAX_WORDS} (five minutes): "
        "details go in docs/"
    )


def test_the_docs_exist() -> None:
    missing = [str(path.relative_to(ROOT)) for path in DOCS if not path.is_file()]
    assert not missing


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_lead_somewhere(doc: Path) -> None:
    broken: list[str] = []
    for target in relative_links(doc):
        file_part, _, fragment = target.partition("#")
        destination = (doc.parent / unquote(file_part)).resolve() if file_part else doc
        if not destination.exists():
            broken.append(f"{target}: no such file")
            continue
        if (
            fragment
            and destination.suffix == ".md"
            and unquote(fragment) not in anchors(destination)
        ):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_anchor_of_a_heading_is_githubs() -> None:
    assert github_anchor("Long crawls: resume and recrawl") == "long-crawls-resume-and-recrawl"
    assert github_anchor("`--state`: resume a crawl") == "--state-resume-a-crawl"
    assert github_anchor("The crawler's own transport (2026-11-24)") == (
        "the-crawlers-own-transport-2026-11-24"
    )
    assert github_anchor("bench_clients.py: one client, or one per worker?") == (
        "bench_clientspy-one-client-or-one-per-worker"
    )


def test_the_readmes_test_command_is_the_one_ci_runs() -> None:
    """.ci/run runs the README's test command verbatim: the two must not drift apart."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    marker = next(i for i, line in enumerate(ci) if "the README's test command" in line)
    command = ci[marker + 1].strip()
    assert command.startswith("python3 -m venv .venv && ")
    assert f"    {command}\n" in README.read_text(encoding="utf-8")

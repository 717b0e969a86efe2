"""A ``--state`` file checked without writing: what makes it ours, and a look between runs.

Theory of operation
-------------------
Two questions about a state file are answered before the crawl opens it, and must change
nothing in it: a later run asks what crawl the file holds (its roots, and the options the
run that made it had, some of which the new run may not change), and a ``--recrawl`` asks
which pass wrote the ``-o`` file it was given (a file of an earlier pass is refused). Each
is answered by a look (:func:`stored_crawl`, :func:`earlier_pass_written`): a read-only
connection, no lock, no integrity check, so that a large file is not read whole twice.
A usage error found here (exit 2, one line) has changed no file.

What makes a file ours is checked the same way by the look and by the opening that
:class:`~trio_crawler._statefile.StateFile` makes for the crawl (which adds the lock and
``quick_check``): a SQLite header (:func:`check_header`), our application id and layout
(:func:`check_layout`), and the crawl of the roots asked for; each refusal is a
:class:`StateFileError`.

This module is apart from :mod:`trio_crawler._statefile`, the transactional writer,
because it is the other side of the file's life: it reads a file that another process may
have left in any state and answers a question, where the writer holds the file for a
crawl and changes it one transaction at a time. The layout both read is
:mod:`trio_crawler._statefile_rows`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._config import roots_in_brief
from ._options import ConfigError
from ._statefile_rows import APPLICATION_ID, QUEUED, SCHEMA_VERSION

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

# What every SQLite file begins with: a file that does not is refused before it is opened.
SQLITE_HEADER = b"SQLite format 3\x00"


class StateFileError(ConfigError):
    """A ``--state`` file that cannot be used: not ours, another crawl's, in use, corrupt.

    Raised before anything in the file is changed; the CLI prints it as one line, exit 2.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__("state", f"{path}: {problem}")


def check_header(path: str) -> None:
    """Refuse a file that does not begin as every SQLite file does, before opening it."""
    try:
        with open(path, "rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StateFileError(path, f"cannot read it: {exc.strerror}") from None
    if header != SQLITE_HEADER:
        raise StateFileError(path, "not a trio-crawler state file")


def check_layout(db: sqlite3.Connection, path: str) -> None:
    """Refuse a SQLite file that is not ours, or ours in another layout."""
    (application_id,) = db.execute("PRAGMA application_id").fetchone()
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if application_id != APPLICATION_ID:
        raise StateFileError(path, "not a trio-crawler state file")
    if 0 < version < SCHEMA_VERSION:
        # Never migrated in place: the older version that made it can still finish it.
        raise StateFileError(
            path,
            f"a state file of layout {version}, made by an earlier trio-crawler; this version "
            f"reads layout {SCHEMA_VERSION} (finish the crawl with the version that made it, "
            "or start a new one in another file)",
        )
    if version != SCHEMA_VERSION:
        raise StateFileError(
            path, f"a state file of layout {version}; this version reads layout {SCHEMA_VERSION}"
        )


@contextlib.contextmanager
def _looking_at(path: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the state file ``path``, checked to be ours, for a look
    before the crawl opens it: no lock, no integrity check
    (:class:`~trio_crawler._statefile.StateFile` makes those), and nothing in the file
    changed.

    Raises:
        StateFileError: The file is not ours, or cannot be read (also from the body).
    """
    check_header(path)
    try:
        db = sqlite3.connect(Path(os.path.abspath(path)).as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StateFileError(path, f"cannot open it as a state file ({exc})") from None
    try:
        check_layout(db, path)
        yield db
    except sqlite3.Error as exc:
        raise StateFileError(path, f"corrupt state file ({exc})") from None
    finally:
        db.close()


@dataclass(frozen=True, slots=True)
class StoredCrawl:
    """What a state file says of the crawl it holds, before the crawl opens it.

    Attributes:
        roots: The crawl's roots.
        options: The options the run that made the crawl had, by name (those a later run
            may not change are picked out by ``_between_runs.keep_what_to_crawl``).
    """

    roots: tuple[str, ...]
    options: dict[str, Any]


def other_crawl(path: str, stored: Sequence[str]) -> StateFileError:
    """The refusal of a file that holds the crawl of other roots than those given."""
    return StateFileError(
        path, f"holds the crawl of {roots_in_brief(stored)}; give those ROOTs or none to resume it"
    )


def stored_crawl(path: str, *, roots: Sequence[str]) -> StoredCrawl | None:
    """The roots and options of the crawl in ``path``, for a later run of it given
    ``roots`` (normalised; empty to resume the crawl of whatever roots it has); None when
    the file holds no crawl yet (absent or empty) and roots are given: a new crawl.

    A look, not an opening: read-only, without the lock and the integrity check that
    :class:`~trio_crawler._statefile.StateFile` makes when the crawl opens the file next
    (so a large file is not read whole twice), and nothing in the file is changed.

    Raises:
        StateFileError: The file holds no crawl and no roots were given, or the crawl of
            other roots; it is not a state file of ours; its crawl table cannot be read.
    """
    if os.path.isdir(path):
        raise StateFileError(path, "is a directory, not a state file")
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        if roots:
            return None
        raise StateFileError(path, "holds no crawl yet; give the ROOTs to start one")
    with _looking_at(path) as db:
        rows = dict(db.execute("SELECT key, value FROM crawl WHERE key IN ('roots', 'options')"))
        if "roots" not in rows:
            raise StateFileError(path, "corrupt state file (no 'roots')")
        try:
            stored = json.loads(rows["roots"])
            options = json.loads(rows.get("options", "{}"))
        except (json.JSONDecodeError, TypeError) as exc:
            raise StateFileError(path, f"corrupt state file ({exc})") from None
    if not (isinstance(stored, list) and all(isinstance(root, str) for root in stored)):
        raise StateFileError(path, "corrupt state file (its roots are no list of URLs)")
    if not isinstance(options, dict):
        raise StateFileError(path, "corrupt state file (its options are no JSON object)")
    if roots and tuple(roots) != tuple(stored):
        raise other_crawl(path, stored)
    return StoredCrawl(tuple(stored), options)


def earlier_pass_written(path: str, output: str, *, recrawl: bool) -> int | None:
    """The pass whose records the ``-o`` file ``output`` holds, when the next run of the
    crawl in ``path`` (a ``recrawl`` or not) writes another pass; None when it does not
    (a new file, or this pass's own: a resumed pass goes on with its file).

    A run opens its ``-o`` file to hold its own pass's records: it cuts the file back to
    what the pass had written to it, which for a file of an earlier pass is nothing. So
    that file must be refused before anything is opened, or a ``--recrawl`` given the
    first pass's file would replace its records with the new pass's. The ``outputs``
    table says which pass wrote which path (see
    :meth:`~trio_crawler._statefile.StateFile.mark`); a path written to by several passes
    is the last one's.

    Raises:
        StateFileError: The file is not ours, or cannot be read.
    """
    if not os.path.exists(path) or os.path.isdir(path) or os.path.getsize(path) == 0:
        return None
    with _looking_at(path) as db:
        row = db.execute("SELECT value FROM crawl WHERE key = 'pass'").fetchone()
        if row is None or not str(row[0]).isdigit():
            raise StateFileError(path, "corrupt state file (no 'pass')")
        this_pass = int(row[0])
        latest = max(
            (
                number
                for written, number in db.execute("SELECT path, pass FROM outputs")
                if isinstance(number, int) and _same_file(str(written), output)
            ),
            default=None,
        )
        if latest is None:
            return None
        if recrawl:
            # A finished crawl (nothing queued) begins its next pass; else this one goes on.
            queued = db.execute("SELECT 1 FROM urls WHERE state = ? LIMIT 1", (QUEUED,))
            if queued.fetchone() is None:
                this_pass += 1
    return latest if latest < this_pass else None


def _same_file(written: str, output: str) -> bool:
    """Whether ``written``, a path an earlier run stored, is the file ``output`` names."""
    if written == output:
        return True
    try:
        return os.path.samefile(written, output)
    except OSError:  # either is gone (or never was): not the same file
        return False

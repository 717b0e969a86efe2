"""The package's rooms, as docs/design.md draws them: checked on the source, so that a
shortcut through the seam fails a test rather than waiting for a reader to find it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "trio_crawler"

# The modules of one kind of store: only the stores themselves and the factory import them.
STORE_KINDS = {
    "_store_memory",
    "_store_sqlite",
    "_statefile",
    "_statefile_rows",
    "_statefile_checks",
    "_store_redis",
    "_cluster",
    "_cluster_session",
    "_cluster_ops",
    "_cluster_scripts",
}
STORE_ROOM = STORE_KINDS | {"_stores"}


def imported_modules(path: Path) -> set[str]:
    """The package's own modules that ``path`` imports, at any depth (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize(
    "path",
    sorted(p for p in PACKAGE.glob("*.py") if p.stem not in STORE_ROOM),
    ids=lambda p: p.stem,
)
def test_only_the_factory_knows_the_kinds_of_store(path: Path) -> None:
    """The crawler, the command line, the outputs and the core reach a store through
    _frontier.py's interfaces and _stores.py's factory, never a store's own module."""
    assert imported_modules(path) & STORE_KINDS == set()


def test_the_factory_is_where_each_kind_is_named() -> None:
    assert {"_store_memory", "_store_sqlite", "_store_redis"} <= imported_modules(
        PACKAGE / "_stores.py"
    )

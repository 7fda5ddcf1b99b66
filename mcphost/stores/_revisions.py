"""The migration files' revisions, read without Alembic.

Owns `migration_head` and `known_revisions`: what the files under `migrations/versions/` say, read from
their `revision` / `down_revision` lines. Importing Alembic costs more than the rest of a one-shot run,
so whether a database is at head, and whether its revision is one of ours at all, is decided from
these lines; Alembic is imported only to migrate. A test keeps `migration_head` equal to Alembic's head.
"""

from __future__ import annotations

import re
from pathlib import Path

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_REVISION_LINE = re.compile(
    r"""^(revision|down_revision)\b[^=\n]*=\s*(?:None|["']([^"'\n]*)["'])\s*$""", re.M
)


def _revisions(versions: Path) -> tuple[set[str], set[str]]:
    """Every revision the migration files name, and every one they name as a `down_revision`."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for file in versions.glob("*.py"):
        found = {m.group(1): m.group(2) for m in _REVISION_LINE.finditer(file.read_text(encoding="utf-8"))}
        if found.get("revision"):
            revisions.add(found["revision"])
        if found.get("down_revision"):
            parents.add(found["down_revision"])
    return revisions, parents


def migration_head(versions: Path = MIGRATIONS_DIR / "versions") -> str:
    """The head revision: the one revision that no file names as its `down_revision`."""
    revisions, parents = _revisions(versions)
    heads = revisions - parents
    if len(heads) != 1:
        raise RuntimeError(f"the migrations in {versions} have {len(heads)} heads ({sorted(heads)}), not one")
    return heads.pop()


def known_revisions(versions: Path = MIGRATIONS_DIR / "versions") -> set[str]:
    """Every revision this mcphost can migrate from (a database at another was migrated by a newer one)."""
    return _revisions(versions)[0]

"""Full-text search is scoped by columns, never by words of the searched text.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03

0002 put a *scope token* (`k<kb>`, `s<conversation,thread>`) into each indexed row, and searches ANDed
the query's words with it. On PostgreSQL the token was a lexeme of the same tsvector as the text, so a
message (or chunk) whose text held another scope's token was found by that scope's searches. This
revision rebuilds both dialects' indexes from the source rows:

- PostgreSQL: the generated `search_vector` columns hold the text's lexemes only, and the GIN indexes
  lead with the scope's columns through the btree_gin extension: (kb_id, search_vector) and
  (conversation_id, thread_id, search_vector). A search is a WHERE on those columns plus `@@` on the
  vector, and the index intersects both, so its cost still follows the scope, not the table.
  btree_gin ships with PostgreSQL (contrib) and is a trusted extension: the database owner may create it.
- SQLite: FTS5 already kept the token in a `scope` column of its own; the stores now match it only
  through a column filter. `transcript_fts` is rebuilt because its token, `s` + hex(conversation_id
  || ' ' || thread_id), was not injective (conversation "a b" with thread "c" and conversation "a"
  with thread "b c" shared one): it is now `s` + hex(conversation_id) + `x` + hex(thread_id), `x`
  being no hex digit. `kb_chunks_fts` (`k` + hex(kb_id)) is unchanged.

Rebuilding reads every transcript row (and, on PostgreSQL, every chunk) once; on a big database the
upgrade takes a while (about as long as loading the rows did).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy.exc import DBAPIError

from mcphost.errors import ConfigError

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOKENIZER = "porter unicode61 remove_diacritics 2"
INDEXED_CHARS = 100_000


def _sqlite_transcript(scope_of: str) -> list[str]:
    """Statements that (re)create `transcript_fts`, its triggers and its rows; `scope_of` is the token
    expression over a row alias `{r}` (`new`, `old` or `transcript`)."""
    new, old, row = (scope_of.format(r=r) for r in ("new", "old", "transcript"))
    text_new = f"substr(new.content, 1, {INDEXED_CHARS})"
    text_old = f"substr(old.content, 1, {INDEXED_CHARS})"
    return [
        "DROP TRIGGER IF EXISTS transcript_fts_update",
        "DROP TRIGGER IF EXISTS transcript_fts_delete",
        "DROP TRIGGER IF EXISTS transcript_fts_insert",
        "DROP TABLE IF EXISTS transcript_fts",
        f"""CREATE VIRTUAL TABLE transcript_fts USING fts5(
            scope, content, content='', tokenize='{TOKENIZER}')""",
        f"""CREATE TRIGGER transcript_fts_insert AFTER INSERT ON transcript BEGIN
            INSERT INTO transcript_fts(rowid, scope, content) VALUES (new.seq, {new}, {text_new});
        END""",
        f"""CREATE TRIGGER transcript_fts_delete AFTER DELETE ON transcript BEGIN
            INSERT INTO transcript_fts(transcript_fts, rowid, scope, content)
            VALUES ('delete', old.seq, {old}, {text_old});
        END""",
        f"""CREATE TRIGGER transcript_fts_update AFTER UPDATE ON transcript BEGIN
            INSERT INTO transcript_fts(transcript_fts, rowid, scope, content)
            VALUES ('delete', old.seq, {old}, {text_old});
            INSERT INTO transcript_fts(rowid, scope, content) VALUES (new.seq, {new}, {text_new});
        END""",
        f"""INSERT INTO transcript_fts(rowid, scope, content)
            SELECT seq, {row}, substr(content, 1, {INDEXED_CHARS}) FROM transcript""",
    ]


_SQLITE_UP = _sqlite_transcript("'s' || hex({r}.conversation_id) || 'x' || hex({r}.thread_id)")
_SQLITE_DOWN = _sqlite_transcript("'s' || hex({r}.conversation_id || ' ' || {r}.thread_id)")


def _postgres(*, kb_scope: str, transcript_scope: str, kb_index: str, transcript_index: str) -> list[str]:
    """Statements that rebuild both generated tsvector columns and their GIN indexes."""
    return [
        "DROP INDEX IF EXISTS ix_kb_chunks_search_vector",
        "ALTER TABLE kb_chunks DROP COLUMN IF EXISTS search_vector",
        f"""ALTER TABLE kb_chunks ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ({kb_scope}
            setweight(to_tsvector('english'::regconfig, heading), 'A')
            || to_tsvector('english'::regconfig, text)) STORED""",
        f"CREATE INDEX ix_kb_chunks_search_vector ON kb_chunks USING gin ({kb_index})",
        # More most-common lexemes in the planner's statistics: the knowledge store reads them to tell
        # common words from selective ones (stores/_knowledge_search.py, CANDIDATE_BUDGET).
        "ALTER TABLE kb_chunks ALTER COLUMN search_vector SET STATISTICS 1000",
        "DROP INDEX IF EXISTS ix_transcript_search_vector",
        "ALTER TABLE transcript DROP COLUMN IF EXISTS search_vector",
        f"""ALTER TABLE transcript ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ({transcript_scope}
            to_tsvector('english'::regconfig, left(content, {INDEXED_CHARS}))) STORED""",
        f"CREATE INDEX ix_transcript_search_vector ON transcript USING gin ({transcript_index})",
        "ANALYZE kb_chunks",
        "ANALYZE transcript",
    ]


_POSTGRES_UP = _postgres(
    kb_scope="",
    transcript_scope="",
    kb_index="kb_id, search_vector",
    transcript_index="conversation_id, thread_id, search_vector",
)
_POSTGRES_DOWN = _postgres(
    kb_scope="array_to_tsvector(ARRAY['k' || md5(kb_id)]) ||",
    transcript_scope="array_to_tsvector(ARRAY['s' || md5(conversation_id || ' ' || thread_id)]) ||",
    kb_index="search_vector",
    transcript_index="search_vector",
)

BTREE_GIN_MISSING = (
    "Migration 0004 needs the PostgreSQL extension btree_gin (shipped with PostgreSQL's contrib "
    "package; a trusted extension since PostgreSQL 13) and could not create it: {error}. Install the "
    "contrib package if it is missing, or have the database owner or a superuser run "
    "`CREATE EXTENSION btree_gin;` in this database, then start mcphost again."
)


def _create_btree_gin() -> None:
    try:
        op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    except DBAPIError as exc:
        # One line for the operator (the CLI prints a ConfigError and exits 2), not a driver traceback.
        raise ConfigError(BTREE_GIN_MISSING.format(error=str(exc.orig).strip().splitlines()[0])) from None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        statements = _SQLITE_UP
    else:
        _create_btree_gin()
        statements = _POSTGRES_UP
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    # btree_gin stays installed: other objects of the database may use it.
    statements = _SQLITE_DOWN if op.get_bind().dialect.name == "sqlite" else _POSTGRES_DOWN
    for statement in statements:
        op.execute(statement)

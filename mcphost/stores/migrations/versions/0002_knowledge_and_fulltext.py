"""Knowledge bases (kb_documents, kb_chunks) and full-text indexes over chunks and the transcript.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

SQLite: contentless FTS5 tables `kb_chunks_fts` and `transcript_fts` (porter stemming, Unicode
tokens), kept in step by AFTER INSERT/UPDATE/DELETE triggers; existing transcript rows are indexed here.
PostgreSQL: a stored generated `search_vector` tsvector column on each table with a GIN index.

Both dialects put one *scope token* into every indexed row: `k<kb>` for a chunk, `s<conversation,thread>`
for a transcript item (hex of the ids on SQLite, md5 on PostgreSQL). A search ANDs its words with the
token, so the index, not a post-filter, narrows it to one knowledge base or one conversation thread, and
its cost follows that scope rather than the whole table. The scope column carries no rank weight. The
expressions here must match the ones the stores use to query (`stores/_fulltext.py`).

Transcript text beyond the first 100,000 characters is not indexed (a tsvector is limited to 1 MiB).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEQ = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
PATH = sa.String(1024).with_variant(sa.VARCHAR(1024, collation="C"), "postgresql")
TOKENIZER = "porter unicode61 remove_diacritics 2"
INDEXED_CHARS = 100_000

_SQLITE_UP = [
    f"""CREATE VIRTUAL TABLE kb_chunks_fts USING fts5(
        scope, heading, text, content='', tokenize='{TOKENIZER}')""",
    """CREATE TRIGGER kb_chunks_fts_insert AFTER INSERT ON kb_chunks BEGIN
        INSERT INTO kb_chunks_fts(rowid, scope, heading, text)
        VALUES (new.chunk_id, 'k' || hex(new.kb_id), new.heading, new.text);
    END""",
    """CREATE TRIGGER kb_chunks_fts_delete AFTER DELETE ON kb_chunks BEGIN
        INSERT INTO kb_chunks_fts(kb_chunks_fts, rowid, scope, heading, text)
        VALUES ('delete', old.chunk_id, 'k' || hex(old.kb_id), old.heading, old.text);
    END""",
    """CREATE TRIGGER kb_chunks_fts_update AFTER UPDATE ON kb_chunks BEGIN
        INSERT INTO kb_chunks_fts(kb_chunks_fts, rowid, scope, heading, text)
        VALUES ('delete', old.chunk_id, 'k' || hex(old.kb_id), old.heading, old.text);
        INSERT INTO kb_chunks_fts(rowid, scope, heading, text)
        VALUES (new.chunk_id, 'k' || hex(new.kb_id), new.heading, new.text);
    END""",
    f"""CREATE VIRTUAL TABLE transcript_fts USING fts5(
        scope, content, content='', tokenize='{TOKENIZER}')""",
    f"""CREATE TRIGGER transcript_fts_insert AFTER INSERT ON transcript BEGIN
        INSERT INTO transcript_fts(rowid, scope, content)
        VALUES (new.seq, 's' || hex(new.conversation_id || ' ' || new.thread_id),
                substr(new.content, 1, {INDEXED_CHARS}));
    END""",
    f"""CREATE TRIGGER transcript_fts_delete AFTER DELETE ON transcript BEGIN
        INSERT INTO transcript_fts(transcript_fts, rowid, scope, content)
        VALUES ('delete', old.seq, 's' || hex(old.conversation_id || ' ' || old.thread_id),
                substr(old.content, 1, {INDEXED_CHARS}));
    END""",
    f"""CREATE TRIGGER transcript_fts_update AFTER UPDATE ON transcript BEGIN
        INSERT INTO transcript_fts(transcript_fts, rowid, scope, content)
        VALUES ('delete', old.seq, 's' || hex(old.conversation_id || ' ' || old.thread_id),
                substr(old.content, 1, {INDEXED_CHARS}));
        INSERT INTO transcript_fts(rowid, scope, content)
        VALUES (new.seq, 's' || hex(new.conversation_id || ' ' || new.thread_id),
                substr(new.content, 1, {INDEXED_CHARS}));
    END""",
    f"""INSERT INTO transcript_fts(rowid, scope, content)
        SELECT seq, 's' || hex(conversation_id || ' ' || thread_id), substr(content, 1, {INDEXED_CHARS})
        FROM transcript""",
]

_SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS transcript_fts_update",
    "DROP TRIGGER IF EXISTS transcript_fts_delete",
    "DROP TRIGGER IF EXISTS transcript_fts_insert",
    "DROP TABLE IF EXISTS transcript_fts",
    "DROP TRIGGER IF EXISTS kb_chunks_fts_update",
    "DROP TRIGGER IF EXISTS kb_chunks_fts_delete",
    "DROP TRIGGER IF EXISTS kb_chunks_fts_insert",
    "DROP TABLE IF EXISTS kb_chunks_fts",
]

_POSTGRES_UP = [
    """ALTER TABLE kb_chunks ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
        array_to_tsvector(ARRAY['k' || md5(kb_id)])
        || setweight(to_tsvector('english'::regconfig, heading), 'A')
        || to_tsvector('english'::regconfig, text)) STORED""",
    "CREATE INDEX ix_kb_chunks_search_vector ON kb_chunks USING gin (search_vector)",
    # More most-common lexemes in the planner's statistics: the knowledge store reads them to tell common
    # words from selective ones (stores/_knowledge_search.py, CANDIDATE_BUDGET).
    "ALTER TABLE kb_chunks ALTER COLUMN search_vector SET STATISTICS 1000",
    f"""ALTER TABLE transcript ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
        array_to_tsvector(ARRAY['s' || md5(conversation_id || ' ' || thread_id)])
        || to_tsvector('english'::regconfig, left(content, {INDEXED_CHARS}))) STORED""",
    "CREATE INDEX ix_transcript_search_vector ON transcript USING gin (search_vector)",
]

_POSTGRES_DOWN = [
    "DROP INDEX IF EXISTS ix_transcript_search_vector",
    "ALTER TABLE transcript DROP COLUMN IF EXISTS search_vector",
]


def upgrade() -> None:
    op.create_table(
        "kb_documents",
        sa.Column("doc_id", SEQ, autoincrement=True, nullable=False),
        sa.Column("kb_id", sa.String(100), nullable=False),
        sa.Column("path", PATH, nullable=False),
        sa.Column("title", sa.String(1000), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("chunker", sa.String(32), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("chunk_count", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("ingested_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("doc_id", name=op.f("pk_kb_documents")),
        sa.UniqueConstraint("kb_id", "path", name=op.f("uq_kb_documents_kb_id_path")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "kb_chunks",
        sa.Column("chunk_id", SEQ, autoincrement=True, nullable=False),
        sa.Column("doc_id", SEQ, nullable=False),
        sa.Column("kb_id", sa.String(100), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("heading", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["doc_id"],
            ["kb_documents.doc_id"],
            name=op.f("fk_kb_chunks_doc_id_kb_documents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("chunk_id", name=op.f("pk_kb_chunks")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_kb_chunks_doc_id_ordinal"), "kb_chunks", ["doc_id", "ordinal"])
    statements = _SQLITE_UP if op.get_bind().dialect.name == "sqlite" else _POSTGRES_UP
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    statements = _SQLITE_DOWN if op.get_bind().dialect.name == "sqlite" else _POSTGRES_DOWN
    for statement in statements:
        op.execute(statement)
    op.drop_index(op.f("ix_kb_chunks_doc_id_ordinal"), table_name="kb_chunks")
    op.drop_table("kb_chunks")
    op.drop_table("kb_documents")

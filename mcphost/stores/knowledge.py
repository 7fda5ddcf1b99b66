"""Knowledge bases: documents, their chunks, and full-text retrieval over the chunks.

Owns the `kb_documents` and `kb_chunks` tables and the search over them: FTS5 with BM25 on SQLite,
a GIN-indexed `tsvector` with `ts_rank_cd` on PostgreSQL (migration 0002). Does not read files, parse
or chunk them, or know where a knowledge base's files live (`mcphost/knowledge.py` does).

Invariants:
- A document and its chunks change together: `put_document` replaces a document's chunks and records
  its new content hash in one transaction, and `delete_document` removes both in one transaction. An
  ingest interrupted at any point leaves every document either at its old version or its new one,
  never half-chunked; its stored hash always describes the chunks stored.
- A search reads the full-text index only: the query's words are ANDed with the knowledge base's scope
  token, so its cost follows how many chunks of that knowledge base match, not the table's size.
  Ranking: SQLite `bm25()` with the heading weighted `HEADING_WEIGHT` times the text and the scope column 0;
  PostgreSQL `ts_rank_cd()` with the heading (weight A) at twice the text (weight D), normalized by
  document length. Scores are "higher is better" on both; ties go to the lower chunk id.
- Filters are applied inside the same query: a path glob (`*`, `?`, `[...]`, `[!...]`; `*` also matches `/`), a
  path prefix (an index range on byte order), and metadata equality on the document's metadata, where a
  list value matches when it contains the wanted value.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    ColumnElement,
    Float,
    Integer,
    Text,
    cast,
    column,
    delete,
    exists,
    func,
    insert,
    literal,
    literal_column,
    select,
    table,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR

from mcphost.errors import InvalidArgumentError
from mcphost.protocol import JSONObject
from mcphost.stores._cursor import check_limit
from mcphost.stores._fulltext import fts5_match, kb_scope_sqlite, pg_scope_match, pg_words_query, query_terms
from mcphost.stores._sql import lock_in_transaction
from mcphost.stores.engine import Database
from mcphost.stores.tables import KbChunkRow, KbDocumentRow

HEADING_WEIGHT = 2.0
MAX_SEARCH_LIMIT = 50
MetadataValue = str | int | float | bool
_PG_WEIGHTS = "'{0.5, 0.5, 0.5, 1.0}'::float4[]"
"""ts_rank_cd weights for labels {D, C, B, A}: text is D, the heading A."""
_PG_NORMALIZATION = 1
"""ts_rank_cd normalization: divide by 1 + log(document length)."""


class KnowledgeDocument(BaseModel):
    """A stored document of a knowledge base."""

    model_config = ConfigDict(frozen=True)

    doc_id: int
    kb_id: str
    path: str
    title: str
    format: str
    content_hash: str
    chunker: str
    size: int
    chunk_count: int
    metadata: JSONObject
    ingested_at: float


class ChunkDraft(BaseModel):
    """A chunk on its way into the store (its id and ordinal are assigned there)."""

    model_config = ConfigDict(frozen=True)

    heading: str
    text: str
    metadata: JSONObject


class StoredChunk(BaseModel):
    model_config = ConfigDict(frozen=True)

    chunk_id: int
    ordinal: int
    heading: str
    text: str
    metadata: JSONObject


class KnowledgeHit(BaseModel):
    """One retrieved chunk with its document and its relevance (higher is better)."""

    model_config = ConfigDict(frozen=True)

    chunk_id: int
    kb_id: str
    path: str
    title: str
    ordinal: int
    heading: str
    text: str
    score: float
    metadata: JSONObject
    """The chunk's own metadata (heading path, source lines)."""
    document_metadata: JSONObject


class KnowledgeBaseStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    kb_id: str
    documents: int
    chunks: int
    bytes: int
    last_ingested_at: float | None


class BulkDocument(BaseModel):
    """A document with its chunks for `bulk_load` (imports and benchmarks)."""

    model_config = ConfigDict(frozen=True)

    path: str
    title: str
    format: str = "text"
    content_hash: str
    chunker: str
    size: int
    metadata: JSONObject = {}
    chunks: list[ChunkDraft]


def _document(row: KbDocumentRow) -> KnowledgeDocument:
    return KnowledgeDocument(
        doc_id=row.doc_id,
        kb_id=row.kb_id,
        path=row.path,
        title=row.title,
        format=row.format,
        content_hash=row.content_hash,
        chunker=row.chunker,
        size=row.size,
        chunk_count=row.chunk_count,
        metadata=row.meta,
        ingested_at=row.ingested_at,
    )


def glob_to_regex(pattern: str) -> str:
    """A POSIX regular expression (PostgreSQL `~`) matching what SQLite's GLOB matches for `pattern`."""
    out = ["^"]
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body.startswith(("^", "!"))
            body = body[1:] if negate else body
            body = body.replace("\\", "\\\\")
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end
        elif char.isalnum() or char in "/_- ":
            out.append(char)
        else:
            out.append("\\" + char)
        i += 1
    out.append("$")
    return "".join(out)


def _check_metadata_key(key: str) -> str:
    if not key or len(key) > 64 or not all(c.isalnum() or c in "_.-" for c in key):
        raise InvalidArgumentError(
            f"Metadata filter key {key[:80]!r} is not valid; use 1-64 letters, digits, '_', '.' or '-'.",
            details={"field": "filters.metadata"},
        )
    return key


class KnowledgeStore:
    """Store documents and chunks; retrieve chunks by full-text relevance."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- documents -------------------------------------------------------------------------------------

    async def fingerprints(self, kb_id: str) -> dict[str, tuple[str, str]]:
        """path → (content_hash, chunker) of every document of the knowledge base."""
        query = select(KbDocumentRow.path, KbDocumentRow.content_hash, KbDocumentRow.chunker).where(
            KbDocumentRow.kb_id == kb_id
        )
        async with self._db.read() as session:
            rows = (await session.execute(query)).all()
        return {row.path: (row.content_hash, row.chunker) for row in rows}

    async def put_document(
        self,
        *,
        kb_id: str,
        path: str,
        title: str,
        format: str,
        content_hash: str,
        chunker: str,
        size: int,
        metadata: JSONObject,
        chunks: Sequence[ChunkDraft],
    ) -> KnowledgeDocument:
        """Store a document and its chunks, replacing any earlier version of it, in one transaction."""
        now = time.time()
        values: dict[str, Any] = {
            "title": title[:1000],
            "format": format,
            "content_hash": content_hash,
            "chunker": chunker,
            "size": size,
            "chunk_count": len(chunks),
            "meta": metadata,
            "ingested_at": now,
        }
        async with self._db.write() as session:
            await lock_in_transaction(session, self._db.dialect, "kb_document", f"{kb_id}\0{path}")
            doc_id = (
                await session.execute(
                    select(KbDocumentRow.doc_id).where(
                        KbDocumentRow.kb_id == kb_id, KbDocumentRow.path == path
                    )
                )
            ).scalar_one_or_none()
            if doc_id is None:
                doc_id = (
                    await session.execute(
                        insert(KbDocumentRow)
                        .values(kb_id=kb_id, path=path, **values)
                        .returning(KbDocumentRow.doc_id)
                    )
                ).scalar_one()
            else:
                await session.execute(delete(KbChunkRow).where(KbChunkRow.doc_id == doc_id))
                await session.execute(
                    update(KbDocumentRow).where(KbDocumentRow.doc_id == doc_id).values(**values)
                )
            if chunks:
                await session.execute(
                    insert(KbChunkRow),
                    [
                        {
                            "doc_id": doc_id,
                            "kb_id": kb_id,
                            "ordinal": ordinal,
                            "heading": chunk.heading,
                            "text": chunk.text,
                            "meta": chunk.metadata,
                        }
                        for ordinal, chunk in enumerate(chunks)
                    ],
                )
            row = (
                await session.execute(select(KbDocumentRow).where(KbDocumentRow.doc_id == doc_id))
            ).scalar_one()
            return _document(row)

    async def delete_document(self, kb_id: str, path: str) -> bool:
        """Remove a document and its chunks in one transaction; whether it existed."""
        async with self._db.write() as session:
            await lock_in_transaction(session, self._db.dialect, "kb_document", f"{kb_id}\0{path}")
            doc_id = (
                await session.execute(
                    select(KbDocumentRow.doc_id).where(
                        KbDocumentRow.kb_id == kb_id, KbDocumentRow.path == path
                    )
                )
            ).scalar_one_or_none()
            if doc_id is None:
                return False
            # Chunks first and explicitly: their delete trigger keeps the FTS5 index in step.
            await session.execute(delete(KbChunkRow).where(KbChunkRow.doc_id == doc_id))
            await session.execute(delete(KbDocumentRow).where(KbDocumentRow.doc_id == doc_id))
            return True

    async def document(self, kb_id: str, path: str) -> KnowledgeDocument | None:
        query = select(KbDocumentRow).where(KbDocumentRow.kb_id == kb_id, KbDocumentRow.path == path)
        async with self._db.read() as session:
            row = (await session.execute(query)).scalar_one_or_none()
        return None if row is None else _document(row)

    async def documents(
        self, kb_id: str, *, after: str | None = None, limit: int = 100
    ) -> list[KnowledgeDocument]:
        """Documents in path order, after `after` (keyset on the (kb_id, path) unique index)."""
        query = select(KbDocumentRow).where(KbDocumentRow.kb_id == kb_id)
        if after is not None:
            query = query.where(KbDocumentRow.path > after)
        query = query.order_by(KbDocumentRow.path).limit(check_limit(limit, 1000))
        async with self._db.read() as session:
            rows = (await session.execute(query)).scalars().all()
        return [_document(row) for row in rows]

    async def chunks(self, kb_id: str, path: str) -> list[StoredChunk]:
        """A document's chunks in order (empty when there is no such document)."""
        query = (
            select(KbChunkRow)
            .join(KbDocumentRow, KbDocumentRow.doc_id == KbChunkRow.doc_id)
            .where(KbDocumentRow.kb_id == kb_id, KbDocumentRow.path == path)
            .order_by(KbChunkRow.ordinal)
        )
        async with self._db.read() as session:
            rows = (await session.execute(query)).scalars().all()
        return [
            StoredChunk(
                chunk_id=r.chunk_id, ordinal=r.ordinal, heading=r.heading, text=r.text, metadata=r.meta
            )
            for r in rows
        ]

    async def stats(self, kb_ids: Iterable[str] | None = None) -> list[KnowledgeBaseStats]:
        """Document and chunk counts per knowledge base that has documents (O(documents))."""
        query = select(
            KbDocumentRow.kb_id,
            func.count(),
            func.coalesce(func.sum(KbDocumentRow.chunk_count), 0),
            func.coalesce(func.sum(KbDocumentRow.size), 0),
            func.max(KbDocumentRow.ingested_at),
        ).group_by(KbDocumentRow.kb_id)
        if kb_ids is not None:
            query = query.where(KbDocumentRow.kb_id.in_(list(kb_ids)))
        async with self._db.read() as session:
            rows = (await session.execute(query.order_by(KbDocumentRow.kb_id))).all()
        return [
            KnowledgeBaseStats(
                kb_id=kb, documents=int(docs), chunks=int(chunks), bytes=int(size), last_ingested_at=last
            )
            for kb, docs, chunks, size, last in rows
        ]

    async def bulk_load(self, kb_id: str, documents: Sequence[BulkDocument]) -> int:
        """Insert new documents and their chunks in one transaction with batched statements; how many
        chunks. For imports and benchmarks: paths must not exist in the knowledge base yet."""
        now = time.time()
        async with self._db.write() as session:
            doc_ids = (
                (
                    await session.execute(
                        insert(KbDocumentRow).returning(KbDocumentRow.doc_id, sort_by_parameter_order=True),
                        [
                            {
                                "kb_id": kb_id,
                                "path": d.path,
                                "title": d.title,
                                "format": d.format,
                                "content_hash": d.content_hash,
                                "chunker": d.chunker,
                                "size": d.size,
                                "chunk_count": len(d.chunks),
                                "meta": d.metadata,
                                "ingested_at": now,
                            }
                            for d in documents
                        ],
                    )
                )
                .scalars()
                .all()
            )
            rows = [
                {
                    "doc_id": doc_id,
                    "kb_id": kb_id,
                    "ordinal": ordinal,
                    "heading": chunk.heading,
                    "text": chunk.text,
                    "meta": chunk.metadata,
                }
                for doc_id, d in zip(doc_ids, documents, strict=True)
                for ordinal, chunk in enumerate(d.chunks)
            ]
            if rows:
                await session.execute(insert(KbChunkRow), rows)
        return len(rows)

    # -- retrieval -------------------------------------------------------------------------------------

    async def search(
        self,
        kb_id: str,
        query: str,
        *,
        limit: int = 5,
        path_glob: str | None = None,
        path_prefix: str | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> list[KnowledgeHit]:
        """The `limit` (1..50) chunks of `kb_id` most relevant to `query`, best first.

        Raises:
            InvalidArgumentError: a query without words, or a bad filter.
        """
        check_limit(limit, MAX_SEARCH_LIMIT)
        terms = query_terms(query)
        if self._db.dialect == "sqlite":
            fts = literal_column("kb_chunks_fts")
            rowid = table("kb_chunks_fts", column("rowid", Integer)).c.rowid
            score: ColumnElement[float] = -func.bm25(fts, 0.0, HEADING_WEIGHT, 1.0, type_=Float)
            match = fts.op("MATCH", is_comparison=True)(
                fts5_match(kb_scope_sqlite(kb_id), terms, ("heading", "text"))
            )
            stmt = (
                select(
                    KbChunkRow,
                    KbDocumentRow.path,
                    KbDocumentRow.title,
                    KbDocumentRow.meta,
                    score.label("score"),
                )
                .select_from(table("kb_chunks_fts", column("rowid", Integer)))
                .join(KbChunkRow, KbChunkRow.chunk_id == rowid)
            )
        else:
            vector = literal_column("kb_chunks.search_vector", type_=TSVECTOR)
            words = pg_words_query(terms)
            match = pg_scope_match(vector, literal("k") + func.md5(cast(literal(kb_id), Text)), words)
            score = func.ts_rank_cd(
                literal_column(_PG_WEIGHTS), vector, words, _PG_NORMALIZATION, type_=Float
            )
            stmt = select(
                KbChunkRow, KbDocumentRow.path, KbDocumentRow.title, KbDocumentRow.meta, score.label("score")
            ).select_from(KbChunkRow)
        stmt = stmt.join(KbDocumentRow, KbDocumentRow.doc_id == KbChunkRow.doc_id).where(match)
        for condition in self._filters(path_glob, path_prefix, metadata or {}):
            stmt = stmt.where(condition)
        stmt = stmt.order_by(literal_column("score").desc(), KbChunkRow.chunk_id).limit(limit)
        async with self._db.read() as session:
            rows = (await session.execute(stmt)).all()
        return [
            KnowledgeHit(
                chunk_id=chunk.chunk_id,
                kb_id=kb_id,
                path=path,
                title=title,
                ordinal=chunk.ordinal,
                heading=chunk.heading,
                text=chunk.text,
                score=float(f"{float(found):.6g}"),
                metadata=chunk.meta,
                document_metadata=doc_meta,
            )
            for chunk, path, title, doc_meta, found in rows
        ]

    def _filters(
        self, path_glob: str | None, path_prefix: str | None, metadata: Mapping[str, MetadataValue]
    ) -> list[ColumnElement[bool]]:
        conditions: list[ColumnElement[bool]] = []
        if path_glob is not None:
            if self._db.dialect == "sqlite":
                # SQLite negates a class with "^" only; accept fnmatch's "!" too, as glob_to_regex does.
                glob = path_glob.replace("[!", "[^")
                conditions.append(KbDocumentRow.path.op("GLOB", is_comparison=True)(glob))
            else:
                conditions.append(KbDocumentRow.path.regexp_match(glob_to_regex(path_glob)))
        if path_prefix:
            conditions.append(KbDocumentRow.path >= path_prefix)
            conditions.append(KbDocumentRow.path < path_prefix + "\U0010ffff")
        for key, value in metadata.items():
            _check_metadata_key(key)
            if self._db.dialect == "sqlite":
                found = func.json_each(KbDocumentRow.meta, f'$."{key}"').table_valued("value")
                conditions.append(exists(select(literal(1)).select_from(found).where(found.c.value == value)))
            else:
                wanted = cast(literal(json.dumps(value)), JSONB)
                conditions.append(cast(KbDocumentRow.meta, JSONB)[key].op("@>", is_comparison=True)(wanted))
        return conditions

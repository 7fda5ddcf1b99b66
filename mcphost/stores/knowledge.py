"""Knowledge bases: documents, their chunks, and full-text retrieval over the chunks.

Owns the `kb_documents` and `kb_chunks` tables and the search over them: FTS5 with BM25 on SQLite, a
GIN-indexed `tsvector` with `ts_rank_cd` on PostgreSQL (migration 0002), planned and run by
`_knowledge_search.KnowledgeSearch`. Does not read files, parse or chunk them, or know where a knowledge
base's files live (`mcphost/knowledge/bases.py` does).

Invariants:
- A document and its chunks change together: `put_document` replaces a document's chunks and records
  its new content hash in one transaction, and `delete_document` removes both in one transaction. An
  ingest interrupted at any point leaves every document either at its old version or its new one,
  never half-chunked; its stored hash always describes the chunks stored.
- A search never returns a chunk of another knowledge base, whatever the chunks' text says. How a search
  is planned, scoped, ranked and filtered on each dialect is `_knowledge_search.py`'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, func, insert, select, text, update

from mcphost.protocol import JSONObject
from mcphost.stores._cursor import check_limit
from mcphost.stores._fulltext import query_terms
from mcphost.stores._knowledge_search import KnowledgeHit, KnowledgeSearch, MetadataValue
from mcphost.stores._sql import lock_in_transaction, scan_whole_tables
from mcphost.stores.engine import Database
from mcphost.stores.tables import KbChunkRow, KbDocumentRow

MAX_SEARCH_LIMIT = 50


class KnowledgeDocument(BaseModel):
    """A stored document of a knowledge base."""

    model_config = ConfigDict(frozen=True, defer_build=True)

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

    model_config = ConfigDict(frozen=True, defer_build=True)

    heading: str
    text: str
    metadata: JSONObject


class StoredChunk(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    chunk_id: int
    ordinal: int
    heading: str
    text: str
    metadata: JSONObject


class KnowledgeBaseStats(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    kb_id: str
    documents: int
    chunks: int
    bytes: int
    last_ingested_at: float | None


class BulkDocument(BaseModel):
    """A document with its chunks for `bulk_load` (imports and benchmarks)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

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


class KnowledgeStore:
    """Store documents and chunks; retrieve chunks by full-text relevance."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._search = KnowledgeSearch(db)

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

    async def has_documents(self, kb_id: str) -> bool:
        """Whether the knowledge base holds any document (one probe of the (kb_id, path) index)."""
        query = select(KbDocumentRow.doc_id).where(KbDocumentRow.kb_id == kb_id).limit(1)
        async with self._db.read() as session:
            return (await session.execute(query)).first() is not None

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
            if kb_ids is None:  # every document
                await scan_whole_tables(session, self._db.dialect)
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

    async def optimize(self) -> None:
        """Compact the full-text index after a bulk load: FTS5 merges its segments into one; PostgreSQL
        moves the GIN pending list into the index and refreshes the planner's statistics."""
        async with self._db.write() as session:
            if self._db.dialect == "sqlite":
                await session.execute(text("INSERT INTO kb_chunks_fts(kb_chunks_fts) VALUES ('optimize')"))
            else:
                await session.execute(
                    text("SELECT gin_clean_pending_list('ix_kb_chunks_search_vector'::regclass)")
                )
                await session.execute(text("ANALYZE kb_documents"))
                await session.execute(text("ANALYZE kb_chunks"))

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
        return await self._search.search(
            kb_id, query_terms(query), limit, path_glob, path_prefix, metadata or {}
        )

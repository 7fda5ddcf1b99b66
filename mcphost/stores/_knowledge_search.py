"""The knowledge search planner: how one search over `kb_chunks` is planned, scoped, ranked and filtered.

Owns `KnowledgeSearch` (the plans of a search, its statements on each dialect, the filters, and the sizes
and lexeme statistics it plans with, cached for `STATS_TTL_S`) and `KnowledgeHit`. Does not own the
documents and chunks or their writes (`knowledge.py`, whose `KnowledgeStore.search` checks the limit and
calls `KnowledgeSearch.search`), nor the query words (`_fulltext.py`).

Invariants:
- A search never returns a chunk of another knowledge base, whatever the chunks' text says: the scope is
  a filter on columns, never words of the searched text. SQLite: the base's token is matched only in
  the FTS5 `scope` column (`_fulltext.fts5_match`) and `kb_id` is checked on every joined row (a base
  believed alone in the index is checked hit by hit instead, and searched again with fresh sizes when a
  hit belongs to a base added since they were cached). PostgreSQL: `kb_id = :kb` ANDed with the words'
  `@@`, both served by the GIN index on (kb_id, search_vector). Either way the index narrows the search
  to the base, so its cost follows how many chunks of that knowledge base match, not the table's size.
  Ranking: SQLite `bm25()` with the heading weighted `HEADING_WEIGHT` times the text and the scope column
  0; PostgreSQL `ts_rank_cd()` with the heading (weight A) at twice the text (weight D), normalized by
  document length. Scores are "higher is better" on both; ties go to the lower chunk id.
- Candidates are bounded so a search stays fast as a knowledge base grows (the idea of Elasticsearch's
  `cutoff_frequency`). Once a knowledge base holds more than `CANDIDATE_BUDGET` chunks, a word found in
  more than that many chunks is *common*: only chunks holding at least one *selective* word are ranked;
  when that gives fewer than `limit` hits, chunks holding all the common words are ranked too. Word
  counts come from bounded FTS5 probes (SQLite) or from the planner's most-common-lexeme statistics of
  the tsvector column (PostgreSQL, refreshed by ANALYZE; without statistics every word is selective; it
  judges by the whole table). Small knowledge bases are ranked exhaustively, every word counting.
- SQLite specifics, because FTS5's `bm25()` reads the full document list of every phrase of the
  expression on each query (for its IDF): past the budget, common words are left out of the rank (on
  PostgreSQL they still count), and when one knowledge base is most of the index its scope token is left
  out of the expression too (`kb_id` on the joined row is then the only scope check). The FTS5 table is ranked
  alone in a subquery and only its best rows are joined (`WINDOW_FACTOR` times `limit` when filters
  follow, all of them again when those leave too few).
- Filters are applied inside the same query: a path glob (`*`, `?`, `[...]`, `[!...]`; `*` also matches `/`), a
  path prefix (an index range on byte order), and metadata equality on the document's metadata, where a
  list value matches when it contains the wanted value.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    ColumnElement,
    Float,
    Integer,
    Select,
    cast,
    column,
    exists,
    func,
    literal,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.errors import InvalidArgumentError
from mcphost.protocol import JSONObject
from mcphost.stores._fulltext import (
    TS_CONFIG,
    fts5_match,
    kb_scope_sqlite,
    pg_matches,
    pg_words_query,
)
from mcphost.stores.engine import Database
from mcphost.stores.tables import KbChunkRow, KbDocumentRow

HEADING_WEIGHT = 2.0
CANDIDATE_BUDGET = 2_000
"""Past this many chunks a word is "common" and no longer picks candidates on its own (it still ranks)."""
STATS_TTL_S = 60.0
WINDOW_FACTOR = 10
MetadataValue = str | int | float | bool
_PG_WEIGHTS = "'{0.5, 0.5, 0.5, 1.0}'::float4[]"
"""ts_rank_cd weights for labels {D, C, B, A}: text is D, the heading A."""
_PG_NORMALIZATION = 1
"""ts_rank_cd normalization: divide by 1 + log(document length)."""


@dataclass(frozen=True)
class _Plan:
    """The words a chunk must hold (any of them, or all) to be ranked, and how the statement is built."""

    required: list[str]
    all_terms: bool
    scope_in_index: bool = True
    """SQLite: AND the scope token (scope column only) in the MATCH, or leave it out (see `_sqlite_plans`);
    kb_id is checked on the joined row either way."""
    alone: bool = False
    """SQLite: the knowledge base was the whole index when its size was cached: no scope token and no kb_id
    in the statement; `KnowledgeStore.search` checks each hit's kb_id."""
    rank_all: bool = True
    """Whether every query word counts in the rank, or only the required ones (SQLite, past the budget)."""

    @property
    def in_scope(self) -> bool:
        """SQLite: whether the match alone yields only the base's chunks (so its best rows are the hits)."""
        return self.scope_in_index or self.alone


def _split(
    terms: list[str],
    frequencies: Mapping[str, int],
    *,
    scope_in_index: bool,
    rank_all: bool,
    alone: bool = False,
) -> list[_Plan]:
    """Selective words first (any of them), then, when those find too few, all the common words."""
    selective = [t for t in terms if 0 < frequencies[t] <= CANDIDATE_BUDGET]
    common = [t for t in terms if frequencies[t] > CANDIDATE_BUDGET]
    plans: list[_Plan] = []
    if selective:
        plans.append(_Plan(selective, False, scope_in_index=scope_in_index, rank_all=rank_all, alone=alone))
    if common:
        plans.append(_Plan(common, True, scope_in_index=scope_in_index, rank_all=rank_all, alone=alone))
    return plans


class KnowledgeHit(BaseModel):
    """One retrieved chunk with its document and its relevance (higher is better)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

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


class KnowledgeSearch:
    """Searches of one database's knowledge bases, with the sizes and statistics their plans need."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lexeme_stats: tuple[float, tuple[float, dict[str, float]] | None] | None = None
        self._sizes_cache: dict[str, tuple[float, tuple[int, int]]] = {}

    async def search(
        self,
        kb_id: str,
        terms: list[str],
        limit: int,
        path_glob: str | None,
        path_prefix: str | None,
        metadata: Mapping[str, MetadataValue],
    ) -> list[KnowledgeHit]:
        """The `limit` chunks of `kb_id` most relevant to `terms`, best first, within the filters."""
        conditions = self.filters(path_glob, path_prefix, metadata)
        found = await self._search(kb_id, terms, conditions, limit)
        if found is None:
            # The cached sizes called this base the whole index, and another base has been added since.
            self._sizes_cache.pop(kb_id, None)
            found = await self._search(kb_id, terms, conditions, limit)
            assert found is not None, "fresh sizes cannot be stale"
        return sorted(found.values(), key=lambda h: (-h.score, h.chunk_id))[:limit]

    async def _search(
        self, kb_id: str, terms: list[str], conditions: list[ColumnElement[bool]], limit: int
    ) -> dict[int, KnowledgeHit] | None:
        """The hits of every plan until `limit` are found; None when a row of another base came back (only
        possible in a plan that believed the base alone in the index: see `_statement`)."""
        found: dict[int, KnowledgeHit] = {}
        async with self._db.read() as session:
            for plan in await self._plans(session, kb_id, terms):
                rows = (await session.execute(self._statement(kb_id, terms, plan, conditions, limit))).all()
                if len(rows) < limit and self._db.dialect == "sqlite" and (conditions or not plan.in_scope):
                    # The pre-ranked window may have held too few chunks passing the filters: rank them all.
                    unbounded = self._statement(kb_id, terms, plan, conditions, limit, bounded=False)
                    rows = (await session.execute(unbounded)).all()
                for chunk, path, title, doc_meta, score in rows:
                    if chunk.kb_id != kb_id:
                        return None
                    found.setdefault(
                        chunk.chunk_id,
                        KnowledgeHit(
                            chunk_id=chunk.chunk_id,
                            kb_id=chunk.kb_id,
                            path=path,
                            title=title,
                            ordinal=chunk.ordinal,
                            heading=chunk.heading,
                            text=chunk.text,
                            score=float(f"{float(score):.6g}"),
                            metadata=chunk.meta,
                            document_metadata=doc_meta,
                        ),
                    )
                if len(found) >= limit:
                    break
        return found

    async def _plans(self, session: AsyncSession, kb_id: str, terms: list[str]) -> list[_Plan]:
        """Which words a chunk must hold to be ranked at all (see the module docstring)."""
        if self._db.dialect == "sqlite":
            return await self._sqlite_plans(session, kb_id, terms)
        frequencies = await self._pg_frequencies(session, kb_id, terms)
        if frequencies is None:
            return [_Plan(required=terms, all_terms=False)]
        return _split(terms, frequencies, scope_in_index=True, rank_all=True)

    async def _sqlite_plans(self, session: AsyncSession, kb_id: str, terms: list[str]) -> list[_Plan]:
        """SQLite's plans. FTS5's `bm25()` counts, for every phrase of the expression, the rows holding it
        (its IDF) on each query: a phrase in a million rows costs a scan of a million entries. So past the
        budget the expression holds neither common words (they are left out of the rank) nor, when the
        knowledge base is most of the index, its scope token (kb_id is then checked on the joined row)."""
        kb_chunks, all_chunks = await self._sizes(session, kb_id)
        if kb_chunks <= CANDIDATE_BUDGET:
            return [_Plan(required=terms, all_terms=False)]
        scope_in_index = kb_chunks * 2 <= all_chunks
        scope = kb_scope_sqlite(kb_id)
        probe = text(
            "SELECT count(*) FROM (SELECT 1 FROM kb_chunks_fts WHERE kb_chunks_fts MATCH :m LIMIT :n)"
        )
        frequencies: dict[str, int] = {}
        for term in terms:
            match = fts5_match(scope if scope_in_index else None, [term])
            found = await session.execute(probe, {"m": match, "n": CANDIDATE_BUDGET + 1})
            frequencies[term] = int(found.scalar_one())
        alone = kb_chunks == all_chunks
        return _split(terms, frequencies, scope_in_index=scope_in_index, rank_all=False, alone=alone)

    async def _sizes(self, session: AsyncSession, kb_id: str) -> tuple[int, int]:
        """(chunks of the knowledge base, chunks of every knowledge base), cached for `STATS_TTL_S`."""
        now = time.monotonic()
        cached = self._sizes_cache.get(kb_id)
        if cached is not None and now - cached[0] < STATS_TTL_S:
            return cached[1]
        rows = (
            await session.execute(
                select(
                    KbDocumentRow.kb_id == kb_id, func.coalesce(func.sum(KbDocumentRow.chunk_count), 0)
                ).group_by(KbDocumentRow.kb_id == kb_id)
            )
        ).all()
        mine = sum(int(total) for is_mine, total in rows if is_mine)
        sizes = (mine, sum(int(total) for _, total in rows))
        self._sizes_cache[kb_id] = (now, sizes)
        return sizes

    async def _pg_frequencies(
        self, session: AsyncSession, kb_id: str, terms: list[str]
    ) -> dict[str, int] | None:
        """Estimated chunks holding each word, from the planner's statistics of the tsvector column (its
        most common lexemes and their frequencies; a lexeme not among them counts as rare), or None when
        there are no statistics yet or the table is within the budget."""
        stats = await self._pg_lexeme_stats(session)
        if stats is None:
            return None
        rows, common = stats
        if rows <= CANDIDATE_BUDGET:
            return None
        lexemes = (
            await session.execute(
                text(
                    "SELECT w, plainto_tsquery(CAST(:config AS regconfig), w)::text "
                    "FROM unnest(CAST(:words AS text[])) AS w"
                ),
                {"config": TS_CONFIG, "words": terms},
            )
        ).all()
        out: dict[str, int] = {}
        for word, tsquery in lexemes:
            found = re.findall(r"'((?:[^']|'')*)'", tsquery or "")
            out[word] = 0 if not found else round(min(common.get(x, 0.0) for x in found) * rows) or 1
        return out

    async def _pg_lexeme_stats(self, session: AsyncSession) -> tuple[float, dict[str, float]] | None:
        now = time.monotonic()
        if self._lexeme_stats is not None and now - self._lexeme_stats[0] < STATS_TTL_S:
            return self._lexeme_stats[1]
        row = (
            await session.execute(
                text(
                    "SELECT c.reltuples, s.most_common_elems::text::text[], s.most_common_elem_freqs "
                    "FROM pg_class c LEFT JOIN pg_stats s ON s.schemaname = current_schema() "
                    "AND s.tablename = 'kb_chunks' AND s.attname = 'search_vector' "
                    "WHERE c.oid = CAST('kb_chunks' AS regclass)"
                )
            )
        ).one()
        stats: tuple[float, dict[str, float]] | None = None
        if row[1] is not None and row[2] is not None and row[0] > 0:
            stats = (float(row[0]), dict(zip(row[1], row[2], strict=False)))
        self._lexeme_stats = (now, stats)
        return stats

    def _statement(
        self,
        kb_id: str,
        terms: list[str],
        plan: _Plan,
        conditions: list[ColumnElement[bool]],
        limit: int,
        *,
        bounded: bool = True,
    ) -> Select[KbChunkRow, str, str, dict[str, Any], float]:
        """The ranking statement of one plan. On SQLite the FTS5 table is ranked alone first, in a
        subquery keeping its best rows (`limit` of them when nothing filters them, `WINDOW_FACTOR` times
        that when filters or the kb_id check follow; all of them when not `bounded`), so only those rows
        are joined and read, not every candidate."""
        scored = [t for t in terms if t not in plan.required] if plan.rank_all else []
        score: ColumnElement[float]
        if self._db.dialect == "sqlite":
            fts: ColumnElement[object] = literal_column("kb_chunks_fts")
            source = table("kb_chunks_fts", column("rowid", Integer))
            score = -func.bm25(fts, 0.0, HEADING_WEIGHT, 1.0, type_=Float)
            expression = fts5_match(
                kb_scope_sqlite(kb_id) if plan.scope_in_index else None,
                plan.required,
                all_terms=plan.all_terms,
                scored=scored if plan.scope_in_index else [],
            )
            match = fts.op("MATCH", is_comparison=True)(expression)
            filtered = bool(conditions) or not plan.in_scope
            size = None if not bounded else (limit * WINDOW_FACTOR if filtered else limit)
            ranked = (
                select(source.c.rowid.label("chunk_id"), score.label("score"))
                .select_from(source)
                .where(match)
            )
            if size is not None:
                ranked = ranked.order_by(score.desc(), source.c.rowid).limit(size)
            best = ranked.subquery("best")
            stmt = (
                select(KbChunkRow, KbDocumentRow.path, KbDocumentRow.title, KbDocumentRow.meta, best.c.score)
                .select_from(best)
                .join(KbChunkRow, KbChunkRow.chunk_id == best.c.chunk_id)
            )
            # With the scope in the match this repeats it on the row; without, it is the scope. A base
            # alone in the index is not checked here: `search` checks each hit's kb_id instead and starts
            # again with fresh sizes when one belongs to a base added since they were cached, so its
            # window stays `limit` and needs no second ranking.
            if not plan.alone:
                stmt = stmt.where(KbChunkRow.kb_id == kb_id)
        else:
            from sqlalchemy.dialects.postgresql import TSVECTOR  # loaded on PostgreSQL only

            vector = literal_column("kb_chunks.search_vector", type_=TSVECTOR)
            required = pg_words_query(plan.required, all_terms=plan.all_terms)
            score = func.ts_rank_cd(
                literal_column(_PG_WEIGHTS), vector, pg_words_query(terms), _PG_NORMALIZATION, type_=Float
            )
            stmt = (
                select(
                    KbChunkRow,
                    KbDocumentRow.path,
                    KbDocumentRow.title,
                    KbDocumentRow.meta,
                    score.label("score"),
                )
                .select_from(KbChunkRow)
                .where(KbChunkRow.kb_id == kb_id, pg_matches(vector, required))
            )
        stmt = stmt.join(KbDocumentRow, KbDocumentRow.doc_id == KbChunkRow.doc_id)
        for condition in conditions:
            stmt = stmt.where(condition)
        return stmt.order_by(literal_column("score", Float).desc(), KbChunkRow.chunk_id).limit(limit)

    def filters(
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
                from sqlalchemy.dialects.postgresql import JSONB  # loaded on PostgreSQL only

                wanted = cast(literal(json.dumps(value)), JSONB)
                conditions.append(cast(KbDocumentRow.meta, JSONB)[key].op("@>", is_comparison=True)(wanted))
        return conditions

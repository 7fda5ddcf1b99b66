"""Full-text search never leaves its scope: a conversation thread (history) or a knowledge base.

The scope is a filter on indexed columns, never words of the searched document, so text cannot forge
it: a row of another scope that holds this scope's old index token (`s`/`k` + hex of the ids, as the
SQLite index had it, or + md5, as the PostgreSQL one did) is still another scope's row, and a query's
own text (quotes, `:`, column names, `OR`, `NEAR`, `*`, other scopes' tokens) cannot widen the search.
A property test draws texts made of exactly such pieces and checks every hit of every search.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from mcphost.errors import InvalidArgumentError
from mcphost.stores import Stores, open_stores
from mcphost.stores import _knowledge_search as knowledge_search
from mcphost.stores.knowledge import BulkDocument, ChunkDraft, KnowledgeStore
from mcphost.stores.transcript import TranscriptDraft
from tests.mcphost.stores.test_transcript_search import migrate_to


def thread_tokens(conversation_id: str, thread_id: str | None = None) -> list[str]:
    """Every form a thread's scope token had in an index: hex (SQLite) and md5 (PostgreSQL)."""
    key = f"{conversation_id} {thread_id or ''}"
    return [
        "s" + key.encode().hex(),
        "s" + key.encode().hex().upper(),
        "s" + hashlib.md5(key.encode()).hexdigest(),
    ]


def kb_tokens(kb_id: str) -> list[str]:
    return [
        "k" + kb_id.encode().hex(),
        "k" + kb_id.encode().hex().upper(),
        "k" + hashlib.md5(kb_id.encode()).hexdigest(),
    ]


def injections(own: list[str], other: list[str]) -> list[str]:
    """Queries that would widen an FTS5 MATCH or a tsquery if any of their text reached the syntax."""
    o, m = other[0], own[0]
    return [
        f'"{o}"',
        f'secret" OR "{o}',
        f"scope : {o}",
        f"{{scope}} : {o}",
        "{scope content}: secret",
        f"content : {m}",
        f"secret OR {o}",
        f"{m} OR secret",
        f"NEAR({m} secret, 100)",
        f"NEAR({o} secret)",
        "secret*",
        f"{o}*",
        f"{m[:4]}*",
        "^secret",
        "- secret",
        "secret AND NOT lighthouse",
        f"secret & {o}:*",
        f"!{m} | secret",
        "secret <-> lighthouse",
        "') OR 1=1 --",
        f"{m} {o} secret lighthouse",
        " ".join(other),
        " ".join(own),
    ]


# -- history ---------------------------------------------------------------------------------------------


async def test_query_text_cannot_widen_a_history_search(stores: Stores) -> None:
    t = stores.transcript
    a, b = thread_tokens("conv-a"), thread_tokens("conv-b")
    await t.append(conversation_id="conv-a", role="user", content="lighthouse keeper")
    await t.append(conversation_id="conv-b", role="user", content=f"secret lighthouse {' '.join(a + b)}")
    for query in injections(a, b):
        try:
            hits = await t.search("conv-a", query=query, limit=50)
        except InvalidArgumentError:
            continue
        assert {(h.record.conversation_id, h.record.thread_id) for h in hits} <= {("conv-a", None)}, query
    assert [h.record.content for h in await t.search("conv-a", query=" ".join(b) + " lighthouse")] == [
        "lighthouse keeper"
    ]


# -- knowledge -------------------------------------------------------------------------------------------


def _doc(path: str, *texts: str, heading: str = "") -> BulkDocument:
    return BulkDocument(
        path=path,
        title=path,
        content_hash=hashlib.sha256("".join(texts).encode()).hexdigest(),
        chunker="test",
        size=sum(len(x) for x in texts),
        chunks=[ChunkDraft(heading=heading, text=x, metadata={}) for x in texts],
    )


@pytest.mark.parametrize("budget", [2_000, 1], ids=["exhaustive", "past-the-budget"])
async def test_a_planted_kb_token_does_not_bring_another_knowledge_bases_chunks(
    stores: Stores, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    """Small bases are ranked exhaustively; past the candidate budget SQLite has other plans (the scope in
    the match, or a base that is most of the index): every one stays within the base."""
    monkeypatch.setattr(knowledge_search, "CANDIDATE_BUDGET", budget)
    store = KnowledgeStore(stores.db)
    planted = " ".join(kb_tokens("kb-a"))
    await store.bulk_load("kb-a", [_doc("kb-a/quokka.md", "the quokka of a", "quokka quokka habitat of a")])
    await store.bulk_load(
        "kb-b",
        [_doc("kb-b/leak.md", f"{planted} quokka secret of b"), _doc("kb-b/h.md", "x", heading=planted)],
    )
    await store.bulk_load("kb-c", [_doc(f"kb-c/{i}.md", f"{planted} quokka filler {i}") for i in range(6)])
    await store.optimize()
    for kb in ("kb-a", "kb-b", "kb-c"):
        for query in ["quokka", "quokka habitat", "secret quokka", planted, "filler"]:
            hits = await store.search(kb, query, limit=20)
            assert all(h.path.startswith(f"{kb}/") and h.kb_id == kb for h in hits), (kb, query, hits)
    assert {h.path for h in await store.search("kb-a", "quokka")} == {"kb-a/quokka.md"}
    assert await store.search("kb-a", "secret filler") == []
    assert len(await store.search("kb-c", "quokka", limit=50)) == 6


async def test_query_text_cannot_widen_a_knowledge_search(stores: Stores) -> None:
    store = KnowledgeStore(stores.db)
    a, b = kb_tokens("kb-a"), kb_tokens("kb-b")
    await store.bulk_load("kb-a", [_doc("kb-a/l.md", "lighthouse keeper")])
    await store.bulk_load(
        "kb-b", [_doc("kb-b/s.md", f"secret lighthouse {' '.join(a + b)}", heading="scope")]
    )
    for query in [*injections(a, b), "heading : secret", "{heading text}: secret", "text:secret"]:
        try:
            hits = await store.search("kb-a", query, limit=50)
        except InvalidArgumentError:
            continue
        assert {h.path for h in hits} <= {"kb-a/l.md"}, query


async def test_a_base_that_was_alone_in_the_index_does_not_see_a_base_added_since(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store caches the bases' sizes for a while; a base added meanwhile must not show through."""
    monkeypatch.setattr(knowledge_search, "CANDIDATE_BUDGET", 1)
    store = KnowledgeStore(stores.db)
    await store.bulk_load("solo", [_doc(f"solo/{i}.md", f"walrus notes {i}") for i in range(4)])
    await store.optimize()
    assert len(await store.search("solo", "walrus", limit=10)) == 4
    await store.bulk_load("late", [_doc(f"late/{i}.md", f"walrus secret {i}") for i in range(8)])
    await store.optimize()
    hits = await store.search("solo", "walrus secret", limit=10)
    assert sorted(h.path for h in hits) == [f"solo/{i}.md" for i in range(4)]


# -- the migration ---------------------------------------------------------------------------------------


async def test_rows_indexed_before_0004_are_rebuilt_into_column_scoped_indexes(
    database_url: str, tmp_path: Path
) -> None:
    async with open_stores(database_url, tmp_path):
        pass
    await migrate_to(database_url, "0003")
    async with open_stores(database_url, tmp_path, migrate=False) as old:
        await old.transcript.append(conversation_id="conv-a", role="user", content="an old lighthouse")
        planted = " ".join(thread_tokens("conv-a"))
        await old.transcript.append(
            conversation_id="conv-b", role="user", content=f"{planted} lighthouse of b"
        )
        await old.transcript.append(
            conversation_id="a b", thread_id="c", role="user", content="lighthouse ab c"
        )
        store = KnowledgeStore(old.db)
        await store.bulk_load("kb-a", [_doc("kb-a/1.md", "old quokka")])
        await store.bulk_load("kb-b", [_doc("kb-b/1.md", f"{' '.join(kb_tokens('kb-a'))} quokka of b")])
    await migrate_to(database_url, "head")
    async with open_stores(database_url, tmp_path, migrate=False) as new:
        assert [h.record.content for h in await new.transcript.search("conv-a", query="lighthouse")] == [
            "an old lighthouse"
        ]
        assert [h.record.content for h in await new.transcript.search("a b", "c", query="lighthouse")] == [
            "lighthouse ab c"
        ]
        assert await new.transcript.search("a", "b c", query="lighthouse") == []
        await new.transcript.append(conversation_id="conv-a", role="user", content="a new lighthouse")
        assert len(await new.transcript.search("conv-a", query="lighthouse")) == 2
        assert [h.path for h in await KnowledgeStore(new.db).search("kb-a", "quokka")] == ["kb-a/1.md"]


# -- the property ----------------------------------------------------------------------------------------

VOCABULARY = ["zebra", "quokka", "walrus", "lighthouse", "penguin"]
OPERATORS = ['"', "*", ":", "(", ")", "{", "}", "^", "-", "+", "'", "&", "|", "!", "<->", ":*", ",", "\\"]
WORDS = [
    "OR",
    "AND",
    "NOT",
    "NEAR",
    "NEAR(",
    "scope",
    "content",
    "heading",
    "text",
    "{scope}",
    "scope:",
    "s",
    "k",
]
THREADS: list[tuple[int, str | None]] = [(c, t) for c in range(3) for t in (None, "t1")]
KBS = 4
TOKENS_PER_SCOPE = 3
_examples = itertools.count()

Piece = str | int
"""A whitespace-free piece of a text, or the index of a scope token (the ids are known only in the test)."""


def _pieces(scopes: int, size: int) -> st.SearchStrategy[list[Piece]]:
    junk = st.text(alphabet="\"*:(){}^-+'&|!<>,.;_ab01", min_size=1, max_size=6)
    piece: st.SearchStrategy[Piece] = st.one_of(
        st.sampled_from(VOCABULARY),
        st.sampled_from(OPERATORS),
        st.sampled_from(WORDS),
        junk,
        st.integers(0, scopes * TOKENS_PER_SCOPE - 1),
    )
    return st.lists(piece, min_size=1, max_size=size)


def _texts(scopes: int) -> st.SearchStrategy[list[tuple[int, list[Piece]]]]:
    return st.lists(st.tuples(st.integers(0, scopes - 1), _pieces(scopes, 8)), min_size=1, max_size=24)


def _queries(scopes: int) -> st.SearchStrategy[list[list[Piece]]]:
    return st.lists(_pieces(scopes, 4), min_size=1, max_size=4)


def _render(pieces: list[Piece], tokens: list[str]) -> str:
    return " ".join(tokens[p] if isinstance(p, int) else p for p in pieces)


def _expected(rows: list[str], word: str) -> set[int]:
    """The rows holding `word` as a whole whitespace-separated piece: a search for it must find them."""
    return {i for i, text in enumerate(rows) if word in text.split(" ")}


PROPERTY = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    # No shrinking: each example is a database round trip, and shrinking one took minutes; the failing
    # example is reported as drawn.
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PROPERTY
@given(texts=_texts(len(THREADS)), queries=_queries(len(THREADS)))
async def test_every_history_hit_belongs_to_the_searched_thread(
    stores: Stores, texts: list[tuple[int, list[Piece]]], queries: list[list[Piece]]
) -> None:
    prefix = f"p{next(_examples)}"
    scopes = [(f"{prefix}-conv-{c}", t) for c, t in THREADS]
    tokens = [tok for cid, t in scopes for tok in thread_tokens(cid, t)]
    rows = [(o, _render(p, tokens)) for o, p in texts]
    now = time.time()
    await stores.transcript.bulk_append(
        [
            TranscriptDraft(
                conversation_id=scopes[o][0], thread_id=scopes[o][1], role="user", content=x, created_at=now
            )
            for o, x in rows
        ]
    )
    for index, (cid, thread) in enumerate(scopes):
        for query in [_render(q, tokens) for q in queries] + VOCABULARY:
            try:
                hits = await stores.transcript.search(cid, thread, query=query, limit=50)
            except InvalidArgumentError:
                continue
            assert all((h.record.conversation_id, h.record.thread_id) == (cid, thread) for h in hits), (
                cid,
                thread,
                query,
                [(h.record.conversation_id, h.record.thread_id, h.record.content) for h in hits],
            )
            if query in VOCABULARY:
                mine = [x for o, x in rows if o == index]
                found = {h.record.content for h in hits}
                assert {mine[i] for i in _expected(mine, query)} <= found, (query, mine, found)


@PROPERTY
@given(texts=_texts(KBS), queries=_queries(KBS), budget=st.sampled_from([2_000, 2]))
async def test_every_knowledge_hit_belongs_to_the_searched_base(
    stores: Stores, texts: list[tuple[int, list[Piece]]], queries: list[list[Piece]], budget: int
) -> None:
    prefix = f"p{next(_examples)}"
    kbs = [f"{prefix}-kb-{k}" for k in range(KBS)]
    tokens = [tok for kb in kbs for tok in kb_tokens(kb)]
    rows = [(o, _render(p, tokens)) for o, p in texts]
    store = KnowledgeStore(stores.db)
    for k, kb in enumerate(kbs):
        mine = [x for o, x in rows if o == k]
        if mine:
            await store.bulk_load(kb, [_doc(f"{kb}/{i}.md", x) for i, x in enumerate(mine)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(knowledge_search, "CANDIDATE_BUDGET", budget)
        for k, kb in enumerate(kbs):
            for query in [_render(q, tokens) for q in queries] + VOCABULARY:
                try:
                    hits = await store.search(kb, query, limit=50)
                except InvalidArgumentError:
                    continue
                assert all(h.path.startswith(f"{kb}/") and h.kb_id == kb for h in hits), (
                    kb,
                    query,
                    [(h.path, h.text) for h in hits],
                )
                if query in VOCABULARY and budget == 2_000:
                    mine = [x for o, x in rows if o == k]
                    found = {h.path for h in hits}
                    assert {f"{kb}/{i}.md" for i in _expected(mine, query)} <= found, (query, mine, found)

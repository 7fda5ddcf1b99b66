"""The knowledge store: documents replaced with their chunks atomically, full-text ranking, filters, scope."""

from __future__ import annotations

import hashlib

import pytest

from mcphost.errors import InvalidArgumentError
from mcphost.stores import Stores
from mcphost.stores import _knowledge_search as knowledge_search
from mcphost.stores._knowledge_search import glob_to_regex
from mcphost.stores.knowledge import BulkDocument, ChunkDraft, KnowledgeStore


def _store(stores: Stores) -> KnowledgeStore:
    return KnowledgeStore(stores.db)


def _chunk(text: str, heading: str = "", **metadata: str | int) -> ChunkDraft:
    return ChunkDraft(heading=heading, text=text, metadata=dict(metadata))


async def _put(
    store: KnowledgeStore,
    path: str,
    chunks: list[ChunkDraft],
    *,
    kb_id: str = "docs",
    metadata: dict[str, object] | None = None,
) -> None:
    text = "".join(c.text for c in chunks)
    await store.put_document(
        kb_id=kb_id,
        path=path,
        title=path.rsplit("/", 1)[-1],
        format="markdown",
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        chunker="test",
        size=len(text),
        metadata=metadata or {},  # pyright: ignore[reportArgumentType]
        chunks=chunks,
    )


async def test_a_document_is_stored_with_its_chunks_in_order(stores: Stores) -> None:
    store = _store(stores)
    await _put(store, "a.md", [_chunk("first part", "A", start_line=1), _chunk("second part", "A > B")])
    doc = await store.document("docs", "a.md")
    assert doc is not None
    assert (doc.chunk_count, doc.format, doc.title) == (2, "markdown", "a.md")
    chunks = await store.chunks("docs", "a.md")
    assert [(c.ordinal, c.heading, c.text) for c in chunks] == [
        (0, "A", "first part"),
        (1, "A > B", "second part"),
    ]
    assert chunks[0].metadata == {"start_line": 1}
    assert await store.fingerprints("docs") == {"a.md": (doc.content_hash, "test")}


async def test_replacing_a_document_replaces_its_chunks_in_the_index(stores: Stores) -> None:
    store = _store(stores)
    await _put(store, "a.md", [_chunk("the walrus sings loudly")])
    assert [h.text for h in await store.search("docs", "walrus")] == ["the walrus sings loudly"]
    await _put(store, "a.md", [_chunk("the penguin dances"), _chunk("quietly at night")])
    assert await store.search("docs", "walrus") == []
    assert [h.text for h in await store.search("docs", "penguin")] == ["the penguin dances"]
    assert len(await store.chunks("docs", "a.md")) == 2


async def test_deleting_a_document_removes_it_from_search(stores: Stores) -> None:
    store = _store(stores)
    await _put(store, "a.md", [_chunk("narwhal tusks")])
    assert await store.delete_document("docs", "a.md") is True
    assert await store.delete_document("docs", "a.md") is False
    assert await store.search("docs", "narwhal") == []
    assert await store.document("docs", "a.md") is None
    assert await store.stats() == []


async def test_search_ranks_more_relevant_chunks_first(stores: Stores) -> None:
    store = _store(stores)
    await _put(store, "cats.md", [_chunk("Cats purr. A cat purrs when content; cats purr often.")])
    await _put(store, "dogs.md", [_chunk("Dogs bark at the mail carrier and sometimes at cats.")])
    await _put(store, "birds.md", [_chunk("Birds sing in the morning.")])
    hits = await store.search("docs", "why do cats purr")
    assert [h.path for h in hits] == ["cats.md", "dogs.md"]
    assert hits[0].score > hits[1].score > 0
    assert hits[0].title == "cats.md"


async def test_stemming_matches_other_forms_of_a_word(stores: Stores) -> None:
    store = _store(stores)
    await _put(store, "a.md", [_chunk("The server reconnected after connections failed.")])
    assert [h.path for h in await store.search("docs", "reconnecting connection failure")] == ["a.md"]


async def test_heading_words_count_and_weigh_more(stores: Stores) -> None:
    store = _store(stores)
    await _put(store, "a.md", [_chunk("Set the timeout value in the config file.", "Installation")])
    await _put(store, "b.md", [_chunk("Installation is done with a package manager.", "Overview")])
    hits = await store.search("docs", "installation")
    assert {h.path for h in hits} == {"a.md", "b.md"}
    hit = (await store.search("docs", "installation timeout"))[0]
    assert hit.path == "a.md"
    assert hit.heading == "Installation"


async def test_search_stays_within_its_knowledge_base(stores: Stores) -> None:
    store = _store(stores)
    await _put(store, "a.md", [_chunk("shared secret word zanzibar")], kb_id="one")
    await _put(store, "a.md", [_chunk("zanzibar again")], kb_id="two")
    await _put(store, "a.md", [_chunk("zanzibar")], kb_id="one-two")
    assert [h.text for h in await store.search("one", "zanzibar")] == ["shared secret word zanzibar"]
    assert [h.kb_id for h in await store.search("two", "zanzibar")] == ["two"]
    assert await store.search("three", "zanzibar") == []


async def test_query_syntax_is_never_interpreted(stores: Stores) -> None:
    store = _store(stores)
    await _put(store, "a.md", [_chunk('quotes "and" parens (NEAR) scope : text* OR AND NOT')])
    for query in ['"x', "scope : x", "a OR b AND", "NEAR(", "text*", "'; DROP TABLE kb_chunks; --", "-x ^y"]:
        await store.search("docs", query)
    assert [h.path for h in await store.search("docs", "parens NEAR")] == ["a.md"]


async def test_a_query_without_words_is_invalid(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError, match="no words"):
        await _store(stores).search("docs", "  ?! ...")


async def test_stop_words_are_ignored_unless_nothing_else_is_left(stores: Stores) -> None:
    store = _store(stores)
    await _put(store, "a.md", [_chunk("the quick brown fox")])
    await _put(store, "b.md", [_chunk("the lazy dog and the cat")])
    assert [h.path for h in await store.search("docs", "the fox")] == ["a.md"]


async def test_filters_by_path_glob_prefix_and_metadata(stores: Stores) -> None:
    store = _store(stores)
    await _put(
        store, "guides/install.md", [_chunk("install the gadget")], metadata={"tags": ["setup", "intro"]}
    )
    await _put(store, "guides/deep/tune.md", [_chunk("tune the gadget")], metadata={"level": "advanced"})
    await _put(store, "api/gadget.md", [_chunk("gadget api reference")], metadata={"level": 2, "draft": True})
    await _put(store, "Guides/odd.md", [_chunk("gadget in a differently cased folder")])

    async def paths(**filters: object) -> list[str]:
        hits = await store.search("docs", "gadget", limit=10, **filters)  # pyright: ignore[reportArgumentType]
        return sorted(h.path for h in hits)

    assert await paths(path_glob="guides/*") == ["guides/deep/tune.md", "guides/install.md"]
    assert await paths(path_glob="guides/*.md") == ["guides/deep/tune.md", "guides/install.md"]
    assert await paths(path_glob="*/[a-h]*.md") == ["api/gadget.md", "guides/deep/tune.md"]
    assert await paths(path_glob="api/gadget.m?") == ["api/gadget.md"]
    assert await paths(path_glob="[!g]*") == ["Guides/odd.md", "api/gadget.md"]
    assert await paths(path_prefix="guides/") == ["guides/deep/tune.md", "guides/install.md"]
    assert await paths(path_prefix="guides/deep") == ["guides/deep/tune.md"]
    assert await paths(metadata={"level": "advanced"}) == ["guides/deep/tune.md"]
    assert await paths(metadata={"level": 2}) == ["api/gadget.md"]
    assert await paths(metadata={"draft": True}) == ["api/gadget.md"]
    assert await paths(metadata={"tags": "setup"}) == ["guides/install.md"]
    assert await paths(metadata={"tags": "missing"}) == []
    assert await paths(metadata={"level": "advanced"}, path_prefix="api/") == []


async def test_a_bad_metadata_key_is_invalid(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError, match="Metadata filter key"):
        await _store(stores).search("docs", "x", metadata={'a"b': "c"})


def test_globs_translate_to_anchored_regular_expressions() -> None:
    assert glob_to_regex("guides/*.md") == "^guides/.*\\.md$"
    assert glob_to_regex("a?[!x]b[^y]") == "^a.[^x]b[^y]$"
    assert glob_to_regex("(x)+") == "^\\(x\\)\\+$"


async def test_stats_count_documents_and_chunks_per_knowledge_base(stores: Stores) -> None:
    store = _store(stores)
    await _put(store, "a.md", [_chunk("one"), _chunk("two")], kb_id="k1")
    await _put(store, "b.md", [_chunk("three")], kb_id="k1")
    await _put(store, "a.md", [_chunk("four")], kb_id="k2")
    stats = {s.kb_id: (s.documents, s.chunks) for s in await store.stats()}
    assert stats == {"k1": (2, 3), "k2": (1, 1)}
    assert [s.kb_id for s in await store.stats(["k2"])] == ["k2"]
    assert [d.path for d in await store.documents("k1")] == ["a.md", "b.md"]
    assert [d.path for d in await store.documents("k1", after="a.md")] == ["b.md"]


async def test_bulk_load_indexes_every_chunk(stores: Stores) -> None:
    store = _store(stores)
    docs = [
        BulkDocument(
            path=f"doc-{i}.txt",
            title=f"doc {i}",
            content_hash=str(i),
            chunker="bulk",
            size=10,
            chunks=[ChunkDraft(heading="", text=f"common word{i} part{j}", metadata={}) for j in range(3)],
        )
        for i in range(20)
    ]
    assert await store.bulk_load("bulk", docs) == 60
    await store.optimize()
    assert len(await store.search("bulk", "common", limit=50)) == 50
    assert [h.path for h in await store.search("bulk", "word7")] == ["doc-7.txt"] * 3


async def test_past_the_candidate_budget_common_words_rank_but_do_not_select(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(knowledge_search, "CANDIDATE_BUDGET", 3)
    store = _store(stores)
    for i in range(8):
        await _put(store, f"common-{i}.md", [_chunk(f"the gadget manual page {i} with filler words")])
    await _put(store, "both.md", [_chunk("the gadget has a zeppelin mode")])
    await _put(store, "rare.md", [_chunk("a zeppelin and nothing else")])
    await _put(store, "elsewhere.md", [_chunk("zeppelin gadget zeppelin")], kb_id="other")
    await store.optimize()  # PostgreSQL judges words by the planner's statistics

    top = await store.search("docs", "gadget zeppelin", limit=2)
    assert {h.path for h in top} == {"both.md", "rare.md"}
    more = await store.search("docs", "gadget zeppelin", limit=5)
    assert {h.path for h in more[:2]} == {"both.md", "rare.md"}
    assert len(more) == 5
    assert all(h.path.startswith("common-") for h in more[2:])
    only_common = await store.search("docs", "gadget manual", limit=10)
    assert {h.path for h in only_common} == {f"common-{i}.md" for i in range(8)}
    assert await store.search("docs", "zzzmissing gadget", limit=3) != []
    # "docs" is most of the index, so SQLite checks kb_id after matching: nothing of "other" leaks in,
    # and filters that leave fewer hits than the window rank everything again.
    assert all(h.kb_id == "docs" for h in await store.search("docs", "zeppelin gadget", limit=20))
    assert [h.path for h in await store.search("other", "zeppelin")] == ["elsewhere.md"]
    assert [h.path for h in await store.search("docs", "gadget", path_glob="common-7.md")] == ["common-7.md"]


async def test_a_knowledge_base_alone_in_the_index_is_searched_without_its_scope(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(knowledge_search, "CANDIDATE_BUDGET", 3)
    store = _store(stores)
    assert await store.has_documents("solo") is False
    for i in range(6):
        await _put(store, f"page-{i}.md", [_chunk(f"widget notes {i}")], kb_id="solo")
    await _put(store, "special.md", [_chunk("the widget quasar")], kb_id="solo")
    await store.optimize()
    assert await store.has_documents("solo") is True
    assert [h.path for h in await store.search("solo", "quasar widget", limit=1)] == ["special.md"]
    assert len(await store.search("solo", "widget", limit=10)) == 7
    assert [h.path for h in await store.search("solo", "widget", path_prefix="special")] == ["special.md"]

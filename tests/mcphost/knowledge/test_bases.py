"""Knowledge bases end to end on real files and both databases: incremental ingest, interruption,
skipped files, retrieval with filters."""

from __future__ import annotations

import hashlib
from pathlib import Path

import anyio
import pytest

from mcphost.config import KnowledgeBaseConfig
from mcphost.errors import ConfigError, InvalidArgumentError, NotFoundError
from mcphost.knowledge import bases as knowledge
from mcphost.knowledge.bases import IngestProgress, KnowledgeBases
from mcphost.knowledge.chunking import PARSERS, chunk_document
from mcphost.stores import Stores


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


DOCS: dict[str, str | bytes] = {
    "docs/install.md": "---\ntags: [setup]\naudience: admin\n---\n# Install\n\nRun the quokka installer.\n",
    "docs/usage.md": "# Usage\n\n## Flags\n\nThe --verbose flag prints more.\n",
    "docs/api/reference.html": "<html><head><title>API</title></head><body><h1>API</h1>"
    "<p>The quokka endpoint answers.</p></body></html>",
    "notes.txt": "Plain notes about penguins.\n\nSecond paragraph.\n",
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    base = tmp_path / "kb"
    _write(base, DOCS)
    return base


def _bases(stores: Stores, root: Path, paths: list[str] | None = None) -> KnowledgeBases:
    config = KnowledgeBaseConfig(
        name="Docs", description="Product docs", paths=paths or ["docs", "notes.txt"]
    )
    return KnowledgeBases(stores.db, {"docs": config}, base_dir=root)


async def test_ingest_then_reingest_is_incremental(stores: Stores, root: Path) -> None:
    kb = _bases(stores, root)
    first = await kb.ingest("docs")
    assert first.added == ["docs/api/reference.html", "docs/install.md", "docs/usage.md", "notes.txt"]
    assert first.chunks == 4
    assert first.skipped == []

    again = await kb.ingest("docs")
    assert (again.added, again.updated, again.deleted) == ([], [], [])
    assert len(again.unchanged) == 4

    (root / "docs/usage.md").write_text("# Usage\n\nNow with a walrus.\n")
    (root / "docs/install.md").unlink()
    _write(root, {"docs/new.md": "# New\n\nfresh page\n"})
    third = await kb.ingest("docs")
    assert (third.added, third.updated, third.deleted) == (
        ["docs/new.md"],
        ["docs/usage.md"],
        ["docs/install.md"],
    )
    assert third.unchanged == ["docs/api/reference.html", "notes.txt"]
    assert [c.document for c in await kb.retrieve("docs", "walrus")] == ["docs/usage.md"]
    assert await kb.retrieve("docs", "installer") == []
    info = (await kb.describe())[0]
    assert (info.kb_id, info.documents, info.chunks) == ("docs", 4, 4)


async def test_a_new_chunker_version_rechunks_unchanged_files(
    stores: Stores, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = _bases(stores, root)
    await kb.ingest("docs")
    monkeypatch.setattr(knowledge, "CHUNKER_VERSION", "v-next")
    report = await kb.ingest("docs")
    assert len(report.updated) == 4


async def test_ingesting_given_paths_deletes_only_below_them(stores: Stores, root: Path) -> None:
    kb = _bases(stores, root)
    await kb.ingest("docs")
    (root / "notes.txt").unlink()
    (root / "docs/usage.md").unlink()
    report = await kb.ingest("docs", [str(root / "docs" / "api"), "docs/usage.md"])
    assert report.deleted == ["docs/usage.md"]
    assert report.unchanged == ["docs/api/reference.html"]
    assert {d.path for d in await kb.store.documents("docs")} == {
        "docs/api/reference.html",
        "docs/install.md",
        "notes.txt",
    }
    globbed = await kb.ingest("docs", ["*.txt"])
    assert globbed.deleted == ["notes.txt"]


async def test_unreadable_binary_and_foreign_files_are_reported_and_skipped(
    stores: Stores, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = _bases(stores, root)
    await kb.ingest("docs")
    _write(
        root,
        {
            "docs/image.png": b"\x89PNG\r\n\x1a\n\0\0",
            "docs/binary.md": b"# looks like markdown\0\0\0",
            "docs/latin1.txt": "caf\xe9".encode("latin-1"),
            "docs/.hidden/secret.md": "# hidden",
        },
    )
    (root / "docs/usage.md").write_text("# Usage\n\nchanged but unreadable\n")
    # The suite may run as root, which reads mode-000 files, so the read failure is injected.
    real_read = anyio.Path.read_bytes

    async def read_bytes(self: anyio.Path) -> bytes:
        if self.name == "usage.md":
            raise PermissionError(13, "Permission denied")
        return await real_read(self)

    monkeypatch.setattr(anyio.Path, "read_bytes", read_bytes)
    seen: list[IngestProgress] = []
    report = await kb.ingest("docs", on_progress=seen.append)
    reasons = {s.path: s.reason for s in report.skipped}
    assert reasons == {
        "docs/binary.md": "binary file",
        "docs/image.png": "unsupported file type '.png'",
        "docs/latin1.txt": "not UTF-8 text",
        "docs/usage.md": "cannot be read: Permission denied",
    }
    assert [p.outcome for p in seen].count("skipped") == 4
    assert seen[-1].done == seen[-1].total == 7
    # What was stored for a skipped file stays as it was.
    assert [c.document for c in await kb.retrieve("docs", "flag")] == ["docs/usage.md"]
    assert report.deleted == []


async def test_missing_paths_are_reported(stores: Stores, root: Path) -> None:
    kb = _bases(stores, root, paths=["docs", "nowhere", "gone/*.md"])
    report = await kb.ingest("docs")
    assert [s.path for s in report.skipped] == ["nowhere", "gone/*.md"]
    assert len(report.added) == 3


async def _consistent(kb: KnowledgeBases, versions: dict[str, set[bytes]]) -> None:
    """Every stored document is exactly one version of its file: hash and chunks agree."""
    for doc in await kb.store.documents("docs", limit=1000):
        matching = [v for v in versions[doc.path] if hashlib.sha256(v).hexdigest() == doc.content_hash]
        assert matching, f"{doc.path} is stored at a hash no version of the file has"
        fmt = doc.format
        parsed = PARSERS[fmt](matching[0].decode(), Path(doc.path).stem)
        expected = [(c.heading, c.text) for c in chunk_document(parsed)]
        stored = [(c.heading, c.text) for c in await kb.store.chunks("docs", doc.path)]
        assert stored == expected, doc.path
        assert doc.chunk_count == len(stored)


async def test_an_interrupted_ingest_leaves_a_consistent_knowledge_base(stores: Stores, root: Path) -> None:
    names = [f"docs/page{i}.md" for i in range(8)]
    old = {n: f"# Page {n}\n\n" + "old text about otters. " * 80 for n in names}
    new = {n: f"# Page {n}\n\n" + "new text about beavers. " * 120 for n in names}
    _write(root, old)  # pyright: ignore[reportArgumentType]
    kb = _bases(stores, root)
    await kb.ingest("docs")
    versions = {n: {v.encode()} for n, v in old.items()}
    for name in names:
        versions[name].add(new[name].encode())
    for name, data in DOCS.items():
        versions[name] = {data if isinstance(data, bytes) else data.encode()}
    _write(root, new)  # pyright: ignore[reportArgumentType]
    (root / "docs/usage.md").unlink()

    for stop_after in range(1, 12):
        # Interrupt at a different point each time (a cancel lands in the middle of the next write),
        # then check that the knowledge base is consistent.
        _write(root, {n: (old if stop_after % 2 else new)[n] for n in names})  # pyright: ignore[reportArgumentType]
        with anyio.CancelScope() as scope:

            def stop(progress: IngestProgress, n: int = stop_after, s: anyio.CancelScope = scope) -> None:
                if progress.done >= n:
                    s.cancel()

            await kb.ingest("docs", on_progress=stop)
        assert scope.cancelled_caught
        await _consistent(kb, versions)

    for step in range(1, 40):
        # Interrupt after a growing delay, so cancellation also lands inside transactions.
        _write(root, {n: (old if step % 2 else new)[n] for n in names})  # pyright: ignore[reportArgumentType]
        with anyio.move_on_after(step * 0.004):
            await kb.ingest("docs")
        await _consistent(kb, versions)

    _write(root, new)  # pyright: ignore[reportArgumentType]
    final = await kb.ingest("docs")
    await _consistent(kb, versions)
    again = await kb.ingest("docs")
    assert (again.added, again.updated, again.deleted) == ([], [], [])
    assert final.deleted == [] or final.deleted == ["docs/usage.md"]
    assert "docs/usage.md" not in {d.path for d in await kb.store.documents("docs", limit=1000)}


async def test_retrieval_returns_chunks_with_document_and_location(stores: Stores, root: Path) -> None:
    kb = _bases(stores, root)
    await kb.ingest("docs")
    hits = await kb.retrieve("docs", "quokka", top_k=5)
    assert {h.document for h in hits} == {"docs/install.md", "docs/api/reference.html"}
    install = next(h for h in hits if h.document == "docs/install.md")
    assert install.chunk_id.startswith("kbc_")
    assert install.text == "Run the quokka installer."
    assert install.score > 0
    assert install.metadata["heading_path"] == ["Install"]
    assert (install.metadata["start_line"], install.metadata["end_line"]) == (7, 7)
    assert install.metadata["tags"] == ["setup"]
    assert install.metadata["format"] == "markdown"
    assert install.metadata["title"] == "Install"
    usage = (await kb.retrieve("docs", "verbose flag"))[0]
    assert usage.metadata["heading"] == "Usage > Flags"


async def test_retrieval_filters_on_path_and_metadata(stores: Stores, root: Path) -> None:
    kb = _bases(stores, root)
    await kb.ingest("docs")

    async def documents(filters: dict[str, object]) -> list[str]:
        hits = await kb.retrieve("docs", "quokka", filters=filters)  # pyright: ignore[reportArgumentType]
        return sorted(h.document for h in hits)

    assert await documents({"path": "docs/api/*"}) == ["docs/api/reference.html"]
    assert await documents({"path_prefix": "docs/install"}) == ["docs/install.md"]
    assert await documents({"metadata": {"tags": "setup"}}) == ["docs/install.md"]
    assert await documents({"metadata": {"audience": "admin", "format": "markdown"}}) == ["docs/install.md"]
    assert await documents({"metadata": {"format": "html"}}) == ["docs/api/reference.html"]
    with pytest.raises(InvalidArgumentError, match="Known filters"):
        await documents({"author": "me"})
    with pytest.raises(InvalidArgumentError, match="metadata"):
        await documents({"metadata": {"nested": {"a": 1}}})


async def test_unknown_and_never_ingested_knowledge_bases_are_not_found(stores: Stores, root: Path) -> None:
    kb = _bases(stores, root)
    with pytest.raises(NotFoundError, match="not been ingested"):
        await kb.retrieve("docs", "quokka")
    with pytest.raises(NotFoundError, match="not configured"):
        await kb.retrieve("other", "quokka")
    with pytest.raises(NotFoundError, match="not configured"):
        await kb.ingest("other")
    await kb.ingest("docs")
    assert await kb.retrieve("docs", "zzzunknownword") == []


async def test_a_knowledge_base_without_paths_cannot_be_ingested(stores: Stores, root: Path) -> None:
    kb = KnowledgeBases(stores.db, {"empty": KnowledgeBaseConfig(name="Empty")}, base_dir=root)
    with pytest.raises(ConfigError, match="has no paths"):
        await kb.ingest("empty")

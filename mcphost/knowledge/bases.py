"""Knowledge bases: ingest files (Markdown, plain text, HTML), chunk them, retrieve chunks by relevance.

Owns what a knowledge base's documents are (the files its `[knowledge.<kb_id>]` paths name), how a file
is found, read and checked, incremental re-ingest (parsing and chunking are `chunking.py`), and
the retrieval API the facts server and the CLI use. Does not own SQL or ranking (`stores/knowledge.py`),
nor who may retrieve (the run grant; the facts server checks it first).

Invariants:
- Chunks follow the document's structure (`chunking.py`): never across a heading, whole paragraphs
  with overlap, each with its heading path and source lines.
- Ingest is incremental and safe to interrupt: a document whose bytes and chunker version are unchanged
  is skipped; a changed one is replaced, and a removed one deleted, each in one transaction of its own.
  Stopping at any moment leaves every document at its old or its new version, and running again
  finishes the job.
- A file that cannot be read, is binary (a NUL byte), is not UTF-8, is larger than `MAX_FILE_BYTES` or
  has a type we do not parse is reported and skipped; whatever was stored for it before stays as it was.
- Document paths are POSIX paths relative to the knowledge base's base folder (the config file's
  folder), absolute when outside it, so the same file always has the same key.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcphost.common.fielddocs import DocumentedModel
from mcphost.common.validation import problems
from mcphost.config import KnowledgeBaseConfig, Settings
from mcphost.errors import ConfigError, InvalidArgumentError, NotFoundError
from mcphost.knowledge.chunking import CHUNKER_VERSION, PARSERS, chunk_document
from mcphost.protocol import JSONObject
from mcphost.protocol.facts import KnowledgeChunk
from mcphost.stores import Database
from mcphost.stores.knowledge import KnowledgeBaseStats, KnowledgeStore

MAX_FILE_BYTES = 16 * 1024 * 1024
FORMATS: Mapping[str, str] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".rst": "text",
    ".html": "html",
    ".htm": "html",
}
"""File suffix → how the file is parsed."""
IngestOutcome = Literal["added", "updated", "unchanged", "deleted", "skipped"]


# -- ingest ----------------------------------------------------------------------------------------------


class SkippedFile(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    path: str
    reason: str


class IngestReport(BaseModel):
    """What one ingest did."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    kb_id: str
    added: list[str] = Field(default_factory=list[str])
    updated: list[str] = Field(default_factory=list[str])
    unchanged: list[str] = Field(default_factory=list[str])
    deleted: list[str] = Field(default_factory=list[str])
    skipped: list[SkippedFile] = Field(default_factory=list[SkippedFile])
    chunks: int = 0
    """Chunks written for the added and updated documents."""
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class IngestProgress:
    """One document done: `done` of `total`, what happened to it and why when it was skipped."""

    done: int
    total: int
    path: str
    outcome: IngestOutcome
    detail: str | None = None


ProgressFn = Callable[[IngestProgress], Awaitable[None] | None]


@dataclass(frozen=True)
class _Source:
    """A file found by a scan, keyed by its document path."""

    key: str
    file: Path


class KnowledgeFilters(DocumentedModel):
    """The `filters` of a retrieval."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    path: str | None = Field(default=None, min_length=1, max_length=1024)
    """A glob on the document path: `*` (also across `/`), `?`, `[abc]`, `[!abc]`."""
    path_prefix: str | None = Field(default=None, min_length=1, max_length=1024)
    """Only documents whose path starts with this."""
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict[str, str | int | float | bool])
    """Equality on document metadata (front matter, `format`, `extension`); a list value matches when it
    contains the wanted value."""


class KnowledgeBaseInfo(BaseModel):
    """A configured knowledge base and what is stored for it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    kb_id: str
    name: str
    description: str
    paths: list[str]
    documents: int = 0
    chunks: int = 0
    bytes: int = 0
    last_ingested_at: float | None = None


class KnowledgeBases:
    """Every configured knowledge base over one database."""

    def __init__(
        self, db: Database, configs: Mapping[str, KnowledgeBaseConfig], *, base_dir: Path, source: str = ""
    ) -> None:
        self.store = KnowledgeStore(db)
        self._configs = dict(configs)
        self._base = _normalized(base_dir)
        self._source = source or "the config"

    @classmethod
    def from_settings(cls, db: Database, settings: Settings) -> KnowledgeBases:
        """The knowledge bases of a config; relative paths are relative to the config file's folder
        (the working folder for the embedded default)."""
        source = Path(settings.source)
        base = source.parent if source.is_file() else Path.cwd()
        return cls(db, settings.knowledge, base_dir=base, source=settings.source)

    def config(self, kb_id: str) -> KnowledgeBaseConfig:
        found = self._configs.get(kb_id)
        if found is None:
            known = ", ".join(sorted(self._configs)) or "none"
            raise NotFoundError(
                f"Knowledge base {kb_id!r} is not configured; configured: {known}. "
                f"Add a [knowledge.{kb_id}] table to {self._source}.",
                details={"kb_id": kb_id},
            )
        return found

    async def describe(self) -> list[KnowledgeBaseInfo]:
        """Every configured knowledge base with its stored counts."""
        stats: dict[str, KnowledgeBaseStats] = {s.kb_id: s for s in await self.store.stats(self._configs)}
        out: list[KnowledgeBaseInfo] = []
        for kb_id, cfg in sorted(self._configs.items()):
            s = stats.get(kb_id)
            out.append(
                KnowledgeBaseInfo(
                    kb_id=kb_id,
                    name=cfg.name,
                    description=cfg.description,
                    paths=list(cfg.paths),
                    documents=s.documents if s else 0,
                    chunks=s.chunks if s else 0,
                    bytes=s.bytes if s else 0,
                    last_ingested_at=s.last_ingested_at if s else None,
                )
            )
        return out

    # -- scanning ----------------------------------------------------------------------------------------

    def _key(self, file: Path) -> str:
        absolute = _normalized(file)
        try:
            return absolute.relative_to(self._base).as_posix()
        except ValueError:
            return absolute.as_posix()

    def _resolve(self, spec: str) -> Path:
        path = Path(spec).expanduser()
        return _normalized(path if path.is_absolute() else self._base / path)

    def _scan(self, specs: Sequence[str]) -> tuple[list[_Source], list[SkippedFile]]:
        found: dict[str, _Source] = {}
        skipped: list[SkippedFile] = []
        for spec in specs:
            target = self._resolve(spec)
            matches = (
                [Path(m) for m in sorted(glob.glob(str(target), recursive=True))]
                if glob.has_magic(spec)
                else [target]
            )
            if not matches or not all(m.exists() for m in matches):
                skipped.append(SkippedFile(path=spec, reason="no such file or directory"))
            for match in matches:
                files = sorted(p for p in match.rglob("*") if p.is_file()) if match.is_dir() else [match]
                for file in files:
                    if match.is_dir() and any(part.startswith(".") for part in file.relative_to(match).parts):
                        continue  # hidden files and folders (.git, .DS_Store) inside a folder
                    if file.is_file():
                        found.setdefault(self._key(file), _Source(self._key(file), file))
        return sorted(found.values(), key=lambda s: s.key), skipped

    def _in_scope(self, key: str, specs: Sequence[str]) -> bool:
        """Whether a stored document falls under one of the path specs an ingest was given."""
        absolute = Path(key) if Path(key).is_absolute() else self._base / key
        for spec in specs:
            target = self._resolve(spec)
            if glob.has_magic(spec):
                if fnmatch.fnmatchcase(str(absolute), str(target)):
                    return True
            elif absolute == target or target in absolute.parents:
                return True
        return False

    # -- ingest ------------------------------------------------------------------------------------------

    async def ingest(
        self, kb_id: str, paths: Sequence[str] | None = None, *, on_progress: ProgressFn | None = None
    ) -> IngestReport:
        """Bring the knowledge base in line with its files: `paths` (files, folders or globs) or, without
        them, its configured paths. Documents under those paths that no longer exist are deleted."""
        started = time.perf_counter()
        config = self.config(kb_id)  # an unconfigured knowledge base is never ingested by accident
        specs = list(paths) if paths else list(config.paths)
        if not specs:
            raise ConfigError(
                f"Knowledge base {kb_id!r} has no paths; set paths = [...] in its [knowledge.{kb_id}] table "
                "or pass files and folders to ingest."
            )
        sources, skipped = await anyio.to_thread.run_sync(self._scan, specs)
        known = await self.store.fingerprints(kb_id)
        seen = {s.key for s in sources}
        removed = [
            key for key in sorted(known) if key not in seen and (not paths or self._in_scope(key, specs))
        ]
        total = len(sources) + len(removed)
        report = _Tally(kb_id, skipped=list(skipped))
        done = 0
        for source in sources:
            outcome, detail = await self._ingest_one(kb_id, source, known.get(source.key), report)
            done += 1
            await _notify(on_progress, IngestProgress(done, total, source.key, outcome, detail))
        for key in removed:
            await self.store.delete_document(kb_id, key)
            report.deleted.append(key)
            done += 1
            await _notify(on_progress, IngestProgress(done, total, key, "deleted"))
        return report.finish(time.perf_counter() - started)

    async def _ingest_one(
        self, kb_id: str, source: _Source, known: tuple[str, str] | None, report: _Tally
    ) -> tuple[IngestOutcome, str | None]:
        fmt = FORMATS.get(source.file.suffix.lower())
        if fmt is None:
            return report.skip(source.key, f"unsupported file type {source.file.suffix or '(none)'!r}")
        try:
            data = await anyio.Path(source.file).read_bytes()
        except OSError as exc:
            return report.skip(source.key, f"cannot be read: {exc.strerror or exc}")
        if len(data) > MAX_FILE_BYTES:
            return report.skip(source.key, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        if b"\0" in data[:8192]:
            return report.skip(source.key, "binary file")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            return report.skip(source.key, "not UTF-8 text")
        digest = hashlib.sha256(data).hexdigest()
        if known == (digest, CHUNKER_VERSION):
            report.unchanged.append(source.key)
            return "unchanged", None
        title = source.file.stem
        parsed = await anyio.to_thread.run_sync(PARSERS[fmt], text, title)
        chunks = await anyio.to_thread.run_sync(chunk_document, parsed)
        metadata: JSONObject = {**parsed.metadata, "format": fmt, "extension": source.file.suffix.lower()}
        await self.store.put_document(
            kb_id=kb_id,
            path=source.key,
            title=parsed.title,
            format=fmt,
            content_hash=digest,
            chunker=CHUNKER_VERSION,
            size=len(data),
            metadata=metadata,
            chunks=chunks,
        )
        report.chunks += len(chunks)
        outcome: IngestOutcome = "added" if known is None else "updated"
        (report.added if known is None else report.updated).append(source.key)
        return outcome, f"{len(chunks)} chunks"

    # -- retrieval ---------------------------------------------------------------------------------------

    async def retrieve(
        self, kb_id: str, query: str, *, top_k: int = 5, filters: JSONObject | None = None
    ) -> list[KnowledgeChunk]:
        """The `top_k` chunks of `kb_id` most relevant to `query`, best first.

        Raises:
            NotFoundError: the knowledge base is not configured, or has never been ingested.
            InvalidArgumentError: a query without words, or filters that are not `KnowledgeFilters`.
        """
        self.config(kb_id)
        try:
            wanted = KnowledgeFilters.model_validate(filters or {})
        except ValidationError as exc:
            found = "; ".join(str(p) for p in problems(exc, root="filters"))
            raise InvalidArgumentError(
                f"Invalid filters: {found}. Known filters: path (glob), path_prefix, metadata.",
                details={"field": "filters"},
            ) from None
        hits = await self.store.search(
            kb_id,
            query,
            limit=top_k,
            path_glob=wanted.path,
            path_prefix=wanted.path_prefix,
            metadata=wanted.metadata,
        )
        if not hits and not await self.store.has_documents(kb_id):
            raise NotFoundError(
                f"Knowledge base {kb_id!r} has not been ingested yet; run `mcphost kb ingest {kb_id}`.",
                details={"kb_id": kb_id},
            )
        return [
            KnowledgeChunk(
                chunk_id=f"kbc_{hit.chunk_id}",
                document=hit.path,
                text=hit.text,
                score=hit.score,
                metadata={
                    **hit.document_metadata,
                    "title": hit.title,
                    "heading": hit.heading,
                    **hit.metadata,
                    "chunk_index": hit.ordinal,
                },
            )
            for hit in hits
        ]


@dataclass
class _Tally:
    kb_id: str
    added: list[str] = field(default_factory=list[str])
    updated: list[str] = field(default_factory=list[str])
    unchanged: list[str] = field(default_factory=list[str])
    deleted: list[str] = field(default_factory=list[str])
    skipped: list[SkippedFile] = field(default_factory=list[SkippedFile])
    chunks: int = 0

    def skip(self, key: str, reason: str) -> tuple[IngestOutcome, str]:
        self.skipped.append(SkippedFile(path=key, reason=reason))
        return "skipped", reason

    def finish(self, elapsed_s: float) -> IngestReport:
        return IngestReport(
            kb_id=self.kb_id,
            added=self.added,
            updated=self.updated,
            unchanged=self.unchanged,
            deleted=self.deleted,
            skipped=self.skipped,
            chunks=self.chunks,
            elapsed_s=round(elapsed_s, 3),
        )


def _normalized(path: Path) -> Path:
    """`path` made absolute with `.` and `..` folded lexically (symlinks are left as they are, so a
    document's key does not depend on where a link points)."""
    return Path(os.path.normpath(path.absolute()))


async def _notify(on_progress: ProgressFn | None, progress: IngestProgress) -> None:
    if on_progress is None:
        return
    result = on_progress(progress)
    if result is not None:
        await result

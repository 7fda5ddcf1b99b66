"""Retrieval quality: recall@5 and MRR of `knowledge_retrieve` on labelled queries, on each database.

The corpus is `examples/knowledge/mcphost/` (110 documents: mcphost's design documents by section and its
module docstrings, see `knowledge_corpus.py`). `QUERIES` are questions a runner might ask, written in
other words than the documents use, each labelled with every document that answers it. A query counts as
found at rank r when the r-th chunk `knowledge_retrieve` returns (top_k=5, as a runner gets by default)
comes from one of its documents. recall@5 is the share of queries found within the top 5; MRR is the mean
of 1/r (0 when not found in the top 10).

    uv run python -m bench.knowledge_quality [--sqlite-only] [--verbose]

Not one of `python -m bench`'s benchmarks (those compare a subject with a baseline in time); its
`run(cfg)` returns rows of the same table shape, which `main` prints.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from bench._config import BenchConfig
from bench._databases import DialectName, dialects, workspace
from bench._stats import Row, Stat, judge
from mcphost.config import KnowledgeBaseConfig
from mcphost.knowledge.bases import KnowledgeBases
from mcphost.stores import open_stores

CORPUS = Path(__file__).resolve().parents[1] / "examples" / "knowledge" / "mcphost"
KB_ID = "mcphost-docs"
RECALL_TARGET = 0.8
DEPTH = 10


@dataclass(frozen=True)
class LabelledQuery:
    query: str
    relevant: frozenset[str]
    """Document paths (relative to the corpus folder) that answer the query."""


def q(query: str, *relevant: str) -> LabelledQuery:
    return LabelledQuery(query, frozenset(relevant))


QUERIES: tuple[LabelledQuery, ...] = (
    q("how is a run token kept and checked", "design/10-10-security.md", "code/mcphost.grants.md"),
    q(
        "what happens to runs still going when the host process dies",
        "code/mcphost.stores.hosts.md",
        "design/03-3-one-run-end-to-end.md",
    ),
    q(
        "resume the same Claude Code session on the next turn",
        "code/runners.claude_code.md",
        "protocol/09-9-external-harness-projection.md",
        "readme/09-claude-code-and-codex-as-runners.md",
        "code/runners.harness.md",
    ),
    q("maximum size of one result a runner emits", "protocol/04-4-the-result-stream-agentrunresult.md"),
    q(
        "shape of an error returned by a tool call",
        "protocol/05-5-errors.md",
        "code/mcphost.facts._results.md",
    ),
    q("paging with opaque cursors instead of offsets", "code/mcphost.stores._cursor.md"),
    q(
        "sqlite write ahead log and lock waiting",
        "code/mcphost.stores.engine.md",
        "design/04-4-data-model-stores.md",
    ),
    q(
        "serialize writers across processes on postgres",
        "code/mcphost.stores._sql.md",
        "code/mcphost.stores.engine.md",
        "code/mcphost.stores.audit.md",
        "code/mcphost.stores.runs.md",
    ),
    q(
        "connect a stdio-only MCP client to the HTTP endpoint",
        "code/bridge.md",
        "code/bridge.relay.md",
        "code/bridge.__main__.md",
    ),
    q(
        "how many tool calls per second may a run make",
        "code/mcphost.facts._limits.md",
        "protocol/07-7-the-per-run-mcp-server.md",
    ),
    q("choosing the agent when an event matches more than one", "code/mcphost.bindings.md"),
    q(
        "plugin process exits unexpectedly and is started again",
        "code/mcphost.plugins.md",
        "design/06-6-runners.md",
        "protocol/08-8-stdio-plugin-runners.md",
    ),
    q(
        "keys of conversation and actor state are namespaced",
        "protocol/07-7-the-per-run-mcp-server.md",
        "code/mcphost.stores._keys.md",
        "code/mcphost.stores.state.md",
    ),
    q(
        "artifact bytes stored by hash and checked when read",
        "code/mcphost.stores.artifacts.md",
        "code/mcphost.stores.blobs.md",
    ),
    q(
        "manifest permissions are an upper bound",
        "protocol/02-2-runner-ids-and-manifests.md",
        "protocol/06-6-the-run-grant-authorization-snapshot.md",
    ),
    q(
        "runner built for another protocol major version",
        "protocol/01-1-versioning.md",
        "code/mcphost.registry.md",
    ),
    q(
        "override settings from environment variables",
        "code/mcphost.config.md",
        "design/08-8-configuration.md",
        "readme/03-configuration.md",
    ),
    q(
        "refuse to listen on a public address without an api key",
        "design/07-7-http-api-api-py.md",
        "code/mcphost.app.md",
        "readme/03-configuration.md",
        "readme/08-serving-over-http-mcphost-serve-send-grant.md",
    ),
    q(
        "resume a stream of run results after a dropped connection",
        "code/mcphost.api.md",
        "design/07-7-http-api-api-py.md",
        "readme/08-serving-over-http-mcphost-serve-send-grant.md",
        "code/mcphost.stores.results.md",
        "protocol/04-4-the-result-stream-agentrunresult.md",
    ),
    q(
        "splitting documents into passages along headings",
        "code/mcphost.chunking.md",
        "code/mcphost.knowledge.md",
    ),
    q(
        "an upstream tool server that never answers",
        "code/mcphost.gateway.md",
        "code/mcphost.upstream.md",
    ),
    q(
        "ranking search hits bm25 and ts_rank_cd",
        "code/mcphost.stores.knowledge.md",
        "code/mcphost.stores._fulltext.md",
        "code/mcphost.stores.transcript.md",
    ),
    q(
        "the default agent that works with no language model",
        "code/runners.memo.md",
        "readme/07-runners-that-read-host-facts-runapi-memo-and-the-local-agent.md",
    ),
    q(
        "use ollama or another openai compatible endpoint",
        "code/runners.local_agent.md",
        "code/runners._openai_chat.md",
        "readme/07-runners-that-read-host-facts-runapi-memo-and-the-local-agent.md",
    ),
    q(
        "run codex exec as the agent",
        "code/runners.codex.md",
        "readme/09-claude-code-and-codex-as-runners.md",
    ),
    q("structured concurrency rules for background tasks", "style/05-async-resources.md"),
    q("strict static type checking of tests", "style/03-types-and-data.md", "style/06-tests-and-tooling.md"),
    q(
        "which package may import which",
        "design/02-2-layout.md",
        "style/01-layout-and-naming.md",
    ),
    q("are action requests carried out by the host", "protocol/04-4-the-result-stream-agentrunresult.md"),
    q(
        "protection against DNS rebinding",
        "code/mcphost.facts.server.md",
        "design/05-5-the-per-run-mcp-server-facts.md",
        "code/mcphost.app.md",
    ),
    q(
        "audit record of each MCP call with an argument hash",
        "code/mcphost.stores.audit.md",
        "code/mcphost.facts._dispatch.md",
        "code/mcphost.facts._audit.md",
        "protocol/07-7-the-per-run-mcp-server.md",
        "code/mcphost.facts._results.md",
    ),
    q(
        "a second message arrives while the conversation still has a run going",
        "code/mcphost.orchestrator.md",
        "code/mcphost.stores.runs.md",
        "design/08-8-configuration.md",
        "readme/03-configuration.md",
    ),
    q(
        "let an IDE read one conversation through MCP",
        "readme/08-serving-over-http-mcphost-serve-send-grant.md",
        "code/mcphost.app.md",
        "code/mcphost.cli.md",
    ),
    q(
        "fields of the context a runner receives at start",
        "protocol/03-3-the-run-context-agentruncontext.md",
        "code/mcphost.protocol.context.md",
        "code/mcphost.context.md",
    ),
    q("writing my own runner class in python", "code/runners.sdk.md", "readme/05-writing-a-plugin-runner.md"),
    q(
        "newline delimited json rpc between host and plugin",
        "protocol/08-8-stdio-plugin-runners.md",
        "code/mcphost.plugins.md",
    ),
    q("run several host replicas on one database", "design/09-9-scale-and-deployment.md"),
    q(
        "files written into the harness working folder",
        "protocol/09-9-external-harness-projection.md",
        "code/runners._harness_files.md",
        "code/runners.harness.md",
    ),
    q("prometheus metrics", "code/mcphost.api.md", "design/07-7-http-api-api-py.md"),
    q(
        "how long can transcript item content be",
        "protocol/07-7-the-per-run-mcp-server.md",
        "code/mcphost.facts._history.md",
    ),
    q(
        "stop a run that takes too long",
        "code/mcphost.orchestrator.md",
        "design/03-3-one-run-end-to-end.md",
        "style/05-async-resources.md",
    ),
)


@dataclass(frozen=True)
class QueryResult:
    query: LabelledQuery
    rank: int | None
    """1-based rank of the first chunk from a relevant document within the top DEPTH, or None."""
    documents: list[str]
    latency_ms: float


@dataclass(frozen=True)
class Quality:
    dialect: DialectName
    results: list[QueryResult]
    chunks: int

    @property
    def recall_at_5(self) -> float:
        return sum(1 for r in self.results if r.rank is not None and r.rank <= 5) / len(self.results)

    @property
    def mrr(self) -> float:
        return sum(1 / r.rank for r in self.results if r.rank is not None) / len(self.results)


def knowledge_bases(db: object, root: Path = CORPUS) -> KnowledgeBases:
    config = KnowledgeBaseConfig(name="mcphost docs", description="mcphost's own documentation", paths=["."])
    return KnowledgeBases(db, {KB_ID: config}, base_dir=root)  # pyright: ignore[reportArgumentType]


async def evaluate(kb: KnowledgeBases, dialect: DialectName) -> Quality:
    results: list[QueryResult] = []
    for labelled in QUERIES:
        started = time.perf_counter()
        chunks = await kb.retrieve(KB_ID, labelled.query, top_k=DEPTH)
        latency = (time.perf_counter() - started) * 1000
        documents = [c.document for c in chunks]
        rank = next((i + 1 for i, d in enumerate(documents) if d in labelled.relevant), None)
        results.append(QueryResult(labelled, rank, documents, latency))
    stats = await kb.store.stats([KB_ID])
    return Quality(dialect, results, stats[0].chunks if stats else 0)


async def measure(dialect: DialectName, tmp_root: Path | None = None) -> Quality:
    """Ingest the corpus into a fresh database of `dialect` and evaluate every query."""
    missing = [p for labelled in QUERIES for p in labelled.relevant if not (CORPUS / p).is_file()]
    if missing:
        raise RuntimeError(f"labelled documents missing from {CORPUS}: {', '.join(sorted(set(missing)))}")
    async with workspace(dialect, tmp_root) as ws, open_stores(ws.database_url, ws.data_dir) as stores:
        kb = knowledge_bases(stores.db)
        await kb.ingest(KB_ID)
        return await evaluate(kb, dialect)


async def run(cfg: BenchConfig) -> list[Row]:
    rows: list[Row] = []
    for dialect in cfg.dialects:
        quality = await measure(dialect, cfg.tmp_root)
        n = len(quality.results)
        rows.append(
            Row(
                benchmark="knowledge-quality",
                case=f"{dialect}: {n} queries, 110 documents, {quality.chunks} chunks",
                baseline_label="",
                subject_label="recall@5",
                baseline=None,
                subject=Stat(p50=quality.recall_at_5, tail=quality.recall_at_5, n=n, unit="recall@5"),
                higher_is_better=True,
                target=f"recall@5 ≥ {RECALL_TARGET}",
                verdict=judge(quality.recall_at_5 >= RECALL_TARGET),
                extra={
                    "mrr": round(quality.mrr, 3),
                    "retrieve_p50_ms": round(sorted(r.latency_ms for r in quality.results)[n // 2], 2),
                },
            )
        )
    return rows


def _report(quality: Quality, verbose: bool) -> None:
    print(
        f"{quality.dialect}: recall@5 = {quality.recall_at_5:.3f}, MRR = {quality.mrr:.3f} "
        f"({len(quality.results)} queries, {quality.chunks} chunks)"
    )
    for r in quality.results:
        if verbose or r.rank is None or r.rank > 5:
            mark = "  " if r.rank is not None and r.rank <= 5 else "✗ "
            print(f"  {mark}{r.rank or '-':>2}  {r.query.query}")
            if verbose or r.rank is None or r.rank > 5:
                print(f"        got: {', '.join(r.documents[:5])}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Retrieval quality of knowledge_retrieve on labelled queries."
    )
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL even when configured")
    parser.add_argument("--verbose", action="store_true", help="show every query, not only the misses")
    args = parser.parse_args(argv)

    async def go() -> None:
        for dialect in dialects(args.sqlite_only):
            _report(await measure(dialect), args.verbose)

    anyio.run(go, backend="asyncio")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Knowledge bases and upstream tool servers: `kb ingest`, `kb list`, `kb search` and `tools`.

Owns showing ingest progress, the knowledge base listings and search hits, and the catalog of the
configured upstream MCP tool servers. Does not own ingesting, chunking or retrieval (`mcphost.knowledge`)
nor connecting upstreams (`mcphost.gateway`).

Invariants: progress goes to stderr (redrawn in place only on a terminal); `tools` exits 1 when any
configured server is unavailable.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, TextIO

from mcphost.app import open_database
from mcphost.cli._common import EXIT_FAILED, EXIT_OK, dump, short
from mcphost.config import Settings
from mcphost.errors import ConfigError
from mcphost.gateway.host_tools import Gateway, UpstreamState
from mcphost.knowledge.bases import IngestProgress, KnowledgeBases


class _IngestBar:
    """Ingest progress on stderr: a bar redrawn in place on a terminal, one line per document otherwise."""

    WIDTH = 24

    def __init__(self, kb_id: str, out: TextIO | None = None) -> None:
        self._kb = kb_id
        self._out = out or sys.stderr
        self._tty = self._out.isatty()

    def __call__(self, p: IngestProgress) -> None:
        detail = f" ({p.detail})" if p.detail else ""
        if not self._tty:
            if p.outcome != "unchanged":
                print(f"{p.done}/{p.total} {p.outcome:<9} {p.path}{detail}", file=self._out, flush=True)
            return
        filled = self.WIDTH * p.done // max(p.total, 1)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        line = f"\r{self._kb} [{bar}] {p.done}/{p.total} {p.outcome:<9} {p.path}"[:160]
        self._out.write(line.ljust(160) + ("\n" if p.done == p.total else ""))
        self._out.flush()


def _kb_filters(args: argparse.Namespace) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    if args.path:
        filters["path"] = args.path
    if args.prefix:
        filters["path_prefix"] = args.prefix
    meta: dict[str, Any] = {}
    pairs: list[str] = args.meta or []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--meta takes KEY=VALUE; got {pair!r}")
        meta[key] = value
    if meta:
        filters["metadata"] = meta
    return filters


async def cmd_kb(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        kb = KnowledgeBases.from_settings(stores.db, settings)
        if args.kb_command == "list":
            bases = await kb.describe()
            if args.json:
                dump({"knowledge_bases": [b.model_dump(mode="json") for b in bases]})
                return EXIT_OK
            if not bases:
                print(
                    f"no knowledge bases in {settings.source}; add a [knowledge.<kb_id>] table",
                    file=sys.stderr,
                )
            for b in bases:
                when = (
                    time.strftime("%Y-%m-%d %H:%M", time.localtime(b.last_ingested_at))
                    if b.last_ingested_at
                    else "never ingested"
                )
                print(f"{b.kb_id:<20} {b.documents:>6} docs {b.chunks:>7} chunks  {when}  {b.name}")
                print(f"{'':<20} paths: {', '.join(b.paths) or '-'}")
            return EXIT_OK
        if args.kb_command == "ingest":
            # PATHs on the command line are relative to the working folder (configured ones to the config).
            paths = [os.path.join(os.getcwd(), p) for p in args.paths]
            report = await kb.ingest(
                args.kb_id, paths or None, on_progress=None if args.json else _IngestBar(args.kb_id)
            )
            if args.json:
                dump(report.model_dump(mode="json"))
                return EXIT_OK
            print(
                f"{args.kb_id}: {len(report.added)} added, {len(report.updated)} updated, "
                f"{len(report.unchanged)} unchanged, {len(report.deleted)} deleted, {len(report.skipped)} skipped; "
                f"{report.chunks} chunks written in {report.elapsed_s:.1f} s",
                file=sys.stderr,
            )
            for skipped in report.skipped:
                print(f"  skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
            return EXIT_OK
        chunks = await kb.retrieve(
            args.kb_id, args.query, top_k=args.top_k, filters=_kb_filters(args) or None
        )
    if args.json:
        dump({"chunks": [c.model_dump(mode="json") for c in chunks]})
        return EXIT_OK
    if not chunks:
        print("no matching chunks", file=sys.stderr)
    for rank, chunk in enumerate(chunks, 1):
        meta = chunk.metadata
        lines = f"lines {meta.get('start_line')}-{meta.get('end_line')}" if "start_line" in meta else ""
        print(f"{rank}. {chunk.document}  {meta.get('heading', '')}  {lines}  (score {chunk.score:.4g})")
        print("   " + short(" ".join(chunk.text.split()), 300))
    return EXIT_OK


async def cmd_tools(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.tools:
        print(f"no tool servers in {settings.source}; add a [tools.<server>] table", file=sys.stderr)
        if args.json:
            dump({"servers": []})
        return EXIT_OK
    gateway = Gateway.from_settings(settings)
    async with gateway.running():
        servers = await gateway.catalog(timeout=args.timeout)
    if args.json:
        dump({"servers": [s.model_dump(mode="json") for s in servers]})
    else:
        for s in servers:
            state = s.state.value if s.state is UpstreamState.READY else f"{s.state.value}: {s.last_error}"
            print(f"{s.server:<16} {s.transport:<5} {short(s.target, 50):<50} {state}")
            for tool in s.tools:
                print(f"  {tool.name:<36} {short(tool.description or '', 80)}")
    return EXIT_OK if all(s.state is UpstreamState.READY for s in servers) else EXIT_FAILED

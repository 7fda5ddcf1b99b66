"""knowledge-scale: `knowledge_retrieve` and `history_search` on a small database versus a big one.

Two databases of one dialect are prepared side by side and queried alternately, call by call (ABBA):
*small* holds `small` chunks / transcript rows, *big* holds `big` (10k and 1M in the full run, 10k and
100k with `--quick`). Three cases:

- `knowledge, one big KB`: a single knowledge base made of the 110-document corpus
  (`examples/knowledge/mcphost/`) plus filler documents up to the size. Filler is text-like: 40 % stop
  words, 10 % (`REAL_SHARE`) the corpus's own words at their corpus frequencies, so every query word
  also occurs in the filler, the commoner ones in tens of thousands of chunks at 1M, and 50 % words of a
  Zipf-distributed synthetic vocabulary of 100k words (a big knowledge base has a big vocabulary).
- `knowledge, other KBs grow`: the queried base stays the corpus plus filler up to `small` chunks; the rest
  of the big database is other knowledge bases. What a host with many tenants sees.
- `history_search`: the run's conversation holds 2,000 messages (sentences of the corpus); the rest of
  the rows are other conversations of filler text.

Queries are the 41 labelled questions of `knowledge_quality.py` (top_k=5) for knowledge, and their first
three content words for history search. Target: the big database's p50 within 3x of the small one's.
The recall@5 of the labelled queries on the big single knowledge base is reported as a note.
Rows are bulk-loaded through the stores' batched `bulk_load`/`bulk_append`.

    uv run python -m bench.knowledge_scale [--quick] [--sqlite-only]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import random
import re
import sys
import time
from collections import Counter
from collections.abc import AsyncGenerator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from bench._alternate import Samples, interleave
from bench._config import BenchConfig
from bench._databases import DialectName, dialects, workspace
from bench._stats import Row, Stat, judge
from bench.knowledge_quality import CORPUS, KB_ID, QUERIES, evaluate, knowledge_bases
from mcphost.knowledge.bases import KnowledgeBases
from mcphost.stores import Stores, open_stores
from mcphost.stores._fulltext import STOP_WORDS
from mcphost.stores.knowledge import BulkDocument, ChunkDraft
from mcphost.stores.transcript import TranscriptDraft

NAME = "knowledge-scale"
TARGET_RATIO = 3.0
CHUNKS_PER_DOC = 10
WORDS_PER_CHUNK = 60
CONVERSATION = "conv-target"
CONVERSATION_ROWS = 2_000
OTHER_CONVERSATION_ROWS = 500
BATCH_DOCS = 2_000
BATCH_ROWS = 20_000
SYNTHETIC_WORDS = 100_000
REAL_SHARE = 0.1
"""Share of a filler chunk's words drawn from the corpus vocabulary (by corpus frequency)."""
SIZES: dict[str, tuple[int, int]] = {
    "full": (10_000, 1_000_000),
    "quick": (10_000, 100_000),
    "tiny": (1_000, 5_000),
}
CALLS: dict[str, int] = {"full": 200, "quick": 120, "tiny": 10}
_WORD = re.compile(r"[a-z][a-z0-9_]+")


class TextModel:
    """Text-like filler: stop words, the corpus's own words by frequency, a synthetic Zipf tail."""

    def __init__(self, corpus: Path, seed: int = 7) -> None:
        counts: Counter[str] = Counter()
        sentences: list[str] = []
        for path in sorted(corpus.rglob("*.md")):
            text = path.read_text(encoding="utf-8").split("---\n", 2)[-1]
            counts.update(w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS and len(w) > 2)
            sentences.extend(
                s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 40 <= len(s.strip()) <= 300
            )
        self.rng = random.Random(seed)
        self.sentences = sentences
        self.real, real_weights = zip(*counts.most_common(), strict=True)
        self.real_cum = list(itertools.accumulate(real_weights))
        syllables = ["ka", "lo", "mi", "ne", "su", "ra", "to", "vi", "da", "pe", "zu", "go", "fi", "ba", "ho"]
        self.synthetic = [
            "".join(syllables[(i // int(len(syllables) ** k)) % len(syllables)] for k in range(4))
            + str(i % 7)
            for i in range(SYNTHETIC_WORDS)
        ]
        self.synthetic_cum = list(itertools.accumulate(1 / (r + 1) ** 1.07 for r in range(SYNTHETIC_WORDS)))
        self.stop = sorted(STOP_WORDS)

    def filler(self, words: int = WORDS_PER_CHUNK) -> str:
        n_stop, n_real = int(words * 0.4), int(words * REAL_SHARE)
        picked = (
            self.rng.choices(self.stop, k=n_stop)
            + self.rng.choices(self.real, cum_weights=self.real_cum, k=n_real)
            + self.rng.choices(self.synthetic, cum_weights=self.synthetic_cum, k=words - n_stop - n_real)
        )
        self.rng.shuffle(picked)
        return " ".join(picked) + "."

    def message(self) -> str:
        return " ".join(self.rng.sample(self.sentences, self.rng.randint(1, 3)))


def _filler_documents(model: TextModel, prefix: str, chunks: int) -> list[BulkDocument]:
    docs: list[BulkDocument] = []
    for d in range(0, chunks, CHUNKS_PER_DOC):
        parts = [model.filler() for _ in range(min(CHUNKS_PER_DOC, chunks - d))]
        digest = hashlib.sha256("".join(parts).encode()).hexdigest()
        docs.append(
            BulkDocument(
                path=f"filler/{prefix}/{d // CHUNKS_PER_DOC:07d}.txt",
                title=f"filler {prefix} {d // CHUNKS_PER_DOC}",
                content_hash=digest,
                chunker="bench",
                size=sum(len(p) for p in parts),
                chunks=[ChunkDraft(heading="", text=p, metadata={}) for p in parts],
            )
        )
    return docs


async def _fill_kb(kb: KnowledgeBases, kb_id: str, model: TextModel, prefix: str, chunks: int) -> None:
    while chunks > 0:
        take = min(chunks, BATCH_DOCS * CHUNKS_PER_DOC)
        await kb.store.bulk_load(kb_id, _filler_documents(model, prefix, take))
        prefix, chunks = prefix + "+", chunks - take


async def _fill_transcript(stores: Stores, model: TextModel, rows: int, *, target: bool) -> None:
    now = time.time()
    conversation = 0
    while rows > 0:
        batch: list[TranscriptDraft] = []
        for _ in range(min(rows, BATCH_ROWS)):
            if target:
                batch.append(
                    TranscriptDraft(
                        conversation_id=CONVERSATION, role="user", content=model.message(), created_at=now
                    )
                )
            else:
                conversation += 1
                cid = f"conv-{conversation // OTHER_CONVERSATION_ROWS:06d}"
                batch.append(
                    TranscriptDraft(
                        conversation_id=cid, role="user", content=model.filler(25), created_at=now
                    )
                )
        await stores.transcript.bulk_append(batch)
        rows -= len(batch)


@dataclass
class Prepared:
    stores: Stores
    kb: KnowledgeBases
    size: int
    load_s: float


async def _prepare(stores: Stores, model: TextModel, size: int, small: int, *, case: str) -> Prepared:
    started = time.perf_counter()
    kb = knowledge_bases(stores.db)
    if case == "history":
        await _fill_transcript(stores, model, CONVERSATION_ROWS, target=True)
        await _fill_transcript(stores, model, size - CONVERSATION_ROWS, target=False)
        await stores.transcript.optimize_search()
    else:
        await kb.ingest(KB_ID)
        corpus_chunks = (await kb.store.stats([KB_ID]))[0].chunks
        own = size if case == "one-kb" else small
        await _fill_kb(kb, KB_ID, model, "own", own - corpus_chunks)
        others = size - own
        for n in range((others + 199_999) // 200_000):
            await _fill_kb(kb, f"other-{n}", model, f"other{n}", min(200_000, others - n * 200_000))
        await kb.store.optimize()
    return Prepared(stores, kb, size, time.perf_counter() - started)


@asynccontextmanager
async def _databases(
    dialect: DialectName, sizes: tuple[int, int], model: TextModel, case: str, tmp_root: Path | None
) -> AsyncGenerator[tuple[Prepared, Prepared]]:
    async with AsyncExitStack() as stack:
        prepared: list[Prepared] = []
        for size in sizes:
            ws = await stack.enter_async_context(workspace(dialect, tmp_root))
            stores = await stack.enter_async_context(open_stores(ws.database_url, ws.data_dir))
            print(f"   {dialect} {case}: loading {size:,} …", file=sys.stderr, flush=True)
            prepared.append(await _prepare(stores, model, size, sizes[0], case=case))
        yield prepared[0], prepared[1]


def _history_queries() -> list[str]:
    out: list[str] = []
    for labelled in QUERIES:
        words = [w for w in _WORD.findall(labelled.query.lower()) if w not in STOP_WORDS]
        out.append(" ".join(words[:3]) or labelled.query)
    return out


async def _measure(small: Prepared, big: Prepared, case: str, calls: int) -> Samples:
    samples = Samples([], [], 0)
    queries = itertools.cycle(QUERIES)
    history = itertools.cycle(_history_queries())
    for _ in range(calls):
        if case == "history":
            text = next(history)

            async def search_small(t: str = text) -> object:
                return await small.stores.transcript.search(CONVERSATION, query=t, limit=10)

            async def search_big(t: str = text) -> object:
                return await big.stores.transcript.search(CONVERSATION, query=t, limit=10)

            await interleave(search_small, search_big, 1, samples)
        else:
            text = next(queries).query

            async def retrieve_small(t: str = text) -> object:
                return await small.kb.retrieve(KB_ID, t, top_k=5)

            async def retrieve_big(t: str = text) -> object:
                return await big.kb.retrieve(KB_ID, t, top_k=5)

            await interleave(retrieve_small, retrieve_big, 1, samples)
    return samples


CASES: dict[str, str] = {
    "one-kb": "knowledge_retrieve, one big KB",
    "other-kbs": "knowledge_retrieve, other KBs grow",
    "history": "history_search",
}


async def run(cfg: BenchConfig, cases: Sequence[str] = tuple(CASES)) -> list[Row]:
    sizes = SIZES.get(cfg.preset, SIZES["full"])
    calls = CALLS.get(cfg.preset, CALLS["full"])
    model = TextModel(CORPUS)
    rows: list[Row] = []
    for dialect in cfg.dialects:
        for case in cases:
            async with _databases(dialect, sizes, model, case, cfg.tmp_root) as (small, big):
                for _ in range(5):  # warm-up: caches and plans, both sides
                    await _measure(small, big, case, 2)
                samples = await _measure(small, big, case, calls)
                extra: dict[str, float | str] = {
                    "load_small_s": round(small.load_s, 1),
                    "load_big_s": round(big.load_s, 1),
                }
                if case == "one-kb":
                    quality = await evaluate(big.kb, dialect)
                    extra["recall@5_big"] = round(quality.recall_at_5, 3)
                    extra["mrr_big"] = round(quality.mrr, 3)
            base = Stat.of(samples.baseline, "ms")
            subject = Stat.of(samples.subject, "ms")
            ratio = subject.p50 / base.p50 if base.p50 else float("inf")
            rows.append(
                Row(
                    benchmark=NAME,
                    case=f"{dialect}: {CASES[case]}",
                    baseline_label=f"{sizes[0]:,} rows",
                    subject_label=f"{sizes[1]:,} rows",
                    baseline=base,
                    subject=subject,
                    target=f"p50 ratio ≤ {TARGET_RATIO:g}x",
                    verdict=judge(ratio <= TARGET_RATIO),
                    extra=extra,
                )
            )
            print(
                f"   {rows[-1].case}: {base.show()} vs {subject.show()} ({ratio:.2f}x)",
                file=sys.stderr,
                flush=True,
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    from bench._report import table

    parser = argparse.ArgumentParser(description="knowledge_retrieve and history_search at two data sizes.")
    parser.add_argument(
        "--quick", action="store_true", help=f"{SIZES['quick'][0]:,} vs {SIZES['quick'][1]:,} rows"
    )
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL even when configured")
    parser.add_argument(
        "--case", choices=list(CASES), action="append", help="only these cases (default: all)"
    )
    args = parser.parse_args(argv)
    preset = "quick" if args.quick else "full"
    from bench._config import PRESETS

    cfg = BenchConfig(sizes=PRESETS[preset], preset=preset, dialects=tuple(dialects(args.sqlite_only)))
    started = time.perf_counter()
    rows = anyio.run(run, cfg, tuple(args.case or CASES), backend="asyncio")
    print(table(rows))
    print(
        f"\n{time.perf_counter() - started:.0f} s; `uv run python -m bench.knowledge_scale {' '.join(argv or sys.argv[1:])}`"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

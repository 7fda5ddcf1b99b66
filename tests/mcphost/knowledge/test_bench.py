"""The knowledge benchmarks run end to end at a tiny size (they prove they work; nothing here judges
speed or quality — `bench/README.md` reports the numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench._config import TINY, BenchConfig
from bench._databases import dialects
from bench.knowledge_quality import CORPUS, QUERIES
from bench.knowledge_quality import run as run_quality
from bench.knowledge_scale import CASES
from bench.knowledge_scale import run as run_scale

pytestmark = pytest.mark.timeout(600)


def test_every_labelled_document_is_in_the_corpus() -> None:
    assert len(QUERIES) >= 30
    assert len(list(CORPUS.rglob("*.md"))) >= 50
    for labelled in QUERIES:
        assert labelled.relevant
        for path in labelled.relevant:
            assert (CORPUS / path).is_file(), path


async def test_quality_reports_recall_and_mrr_per_database(tmp_path: Path) -> None:
    cfg = BenchConfig(sizes=TINY, preset="tiny", dialects=tuple(dialects()), tmp_root=tmp_path)
    rows = await run_quality(cfg)
    assert [row.case.split(":")[0] for row in rows] == list(cfg.dialects)
    for row in rows:
        assert 0 <= row.subject.p50 <= 1
        assert 0 <= float(row.extra["mrr"]) <= 1
        json.dumps(row.to_json())


async def test_scale_compares_two_sizes_in_every_case(tmp_path: Path) -> None:
    cfg = BenchConfig(sizes=TINY, preset="tiny", dialects=("sqlite",), tmp_root=tmp_path)
    rows = await run_scale(cfg)
    assert [row.case for row in rows] == [f"sqlite: {name}" for name in CASES.values()]
    for row in rows:
        assert row.baseline is not None
        assert row.baseline.n == row.subject.n > 0
        assert row.verdict in ("met", "missed")

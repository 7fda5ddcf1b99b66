"""bench/peers runs end to end at its smallest size: the mcphost side, the statement floor, scale-out.

Proves the benchmark works; judges no speed. LangGraph lives in its own uv project
(`bench/peers/langgraph/`) that the product and CI never install: the peer half runs only where that
environment exists, and is otherwise skipped with a note (which is checked).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import anyio
import pytest

from bench._databases import postgres_server_url
from bench._stats import Row
from bench.peers import PRESETS, PeerConfig, run
from bench.peers.__main__ import main
from bench.peers._floor import Replayer, capture, cpu_ms_per_run, sampled
from bench.peers._servers import peer_available

pytestmark = pytest.mark.timeout(600)
TINY = PRESETS["tiny"]


def _cases(rows: list[Row]) -> list[str]:
    return [row.case for row in rows]


def _number(row: Row, key: str) -> float:
    value = row.extra[key]
    assert isinstance(value, float), (key, value)
    return value


def _finite(row: Row) -> bool:
    sides = [row.subject] + ([row.baseline] if row.baseline is not None else [])
    return all(s.n > 0 and math.isfinite(s.p50) and math.isfinite(s.tail) for s in sides)


async def test_the_mcphost_side_and_the_floor_run_without_the_peer(tmp_path: Path) -> None:
    cfg = PeerConfig(sizes=TINY, dialects=("sqlite",), peer=False, tmp_root=tmp_path)
    rows = await run(cfg)
    expected = [
        f"sqlite, c={c}: {what}"
        for c in TINY.concurrencies
        for what in ("runs/s", "host CPU per run", "latency")
    ]
    assert _cases(rows) == [
        *expected,
        "sqlite: RSS growth over the measured runs",
        "sqlite: CPU per echo run, raw-statement floor",
    ]
    assert all(_finite(row) for row in rows), rows
    assert all(row.baseline is None for row in rows[:-1])  # no peer measured, so no ratio claimed
    rates = [row for row in rows if row.case.endswith("runs/s")]
    assert all(row.subject.p50 > 0 for row in rates)
    assert all(_number(row, "mcphost_runs") >= 1 for row in rates)
    floor = rows[-1]
    assert floor.baseline is not None
    assert floor.baseline.p50 > 0
    # Sampled in one block after each of mcphost's rounds at the top concurrency, not after them all.
    assert floor.baseline.n == max(1, TINY.floor_runs // TINY.rounds) * TINY.rounds
    assert _number(floor, "transactions_per_run") >= 1
    assert _number(floor, "statements_per_run") > _number(floor, "transactions_per_run")
    top, lowest = max(TINY.concurrencies), min(TINY.concurrencies)
    cpu_at = {
        c: next(r for r in rows if r.case == f"sqlite, c={c}: host CPU per run").subject
        for c in (top, lowest)
    }
    assert floor.subject.p50 == pytest.approx(cpu_at[top].p50)  # judged at the highest concurrency
    assert floor.subject_label == f"mcphost serve, c={top}"
    assert _number(floor, f"distance_at_c{lowest}") == pytest.approx(cpu_at[lowest].p50 / floor.baseline.p50)
    assert any("not requested" in note for note in cfg.skipped)
    assert any("scale-out: needs PostgreSQL" in note for note in cfg.skipped)
    json.dumps([row.to_json() for row in rows])


async def test_a_sampled_floor_replays_in_blocks_with_new_ids_and_removes_its_files(tmp_path: Path) -> None:
    async with sampled(tmp_path) as floor:
        database = floor.replayer.con.execute("PRAGMA database_list").fetchone()[2]
        before = floor.replayer.con.execute("SELECT count(*) FROM runs").fetchone()[0]
        first = await floor.block(2)
        in_thread = await floor.block(2, hop=False)
        last = await floor.block(1)
        assert [len(first), len(in_thread), len(last)] == [2, 2, 1]
        assert floor.hopping == first + last  # the blocks with a hop, in order
        assert floor.next_run == 5  # each replay its own ids: no insert hit a key of an earlier one
        after = floor.replayer.con.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert after - before == 5  # one run inserted per replay
    assert not await anyio.Path(database).parent.exists()


async def test_a_captured_run_replays_with_new_ids_each_time(tmp_path: Path) -> None:
    cap, path, folder = await capture(tmp_path)
    assert folder.exists()
    assert any(i.startswith("run_") for i in cap.ids)
    assert any(sql.startswith("BEGIN IMMEDIATE") for tx in cap.transactions for sql, _, _ in tx)
    replayer = Replayer(cap, path)
    try:
        samples = await cpu_ms_per_run(replayer, 3, 0, hop=True)
        runs_replayed = replayer.con.execute("SELECT count(*) FROM runs WHERE run_id LIKE '%-r_'").fetchone()
    finally:
        replayer.close()
    assert len(samples) == 3
    assert runs_replayed == (3,)  # every replay inserted its own run row: ids were renamed, not reused


@pytest.mark.postgres
@pytest.mark.skipif(postgres_server_url() is None, reason="needs MCPHOST_TEST_POSTGRES_URL")
async def test_scale_out_runs_two_processes_on_one_postgres_database(tmp_path: Path) -> None:
    cfg = PeerConfig(sizes=TINY, dialects=("sqlite", "postgres"), peer=False, tmp_root=tmp_path)
    rows = await run(cfg)
    scaleout = rows[-1]
    assert scaleout.case.startswith(f"postgres, c={TINY.scaleout_concurrency}: scale-out on")
    assert scaleout.baseline is not None
    assert scaleout.baseline.p50 > 0
    assert scaleout.subject.p50 > 0
    assert _number(scaleout, "cores") >= 1
    assert any(row.case.startswith("postgres, c=1") for row in rows)


@pytest.mark.skipif(
    peer_available() is not None, reason="LangGraph's environment (bench/peers/langgraph) is absent"
)
def test_the_command_line_compares_with_langgraph_when_it_is_installed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "peers.json"
    assert main(["--tiny", "--sqlite-only", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| peers | sqlite, c=1: runs/s |" in printed
    doc = json.loads(out.read_text())
    assert doc["settings"]["langgraph"]["n_jobs_per_worker"] >= 1
    first = doc["rows"][0]
    assert first["baseline_label"] == "LangGraph inmem"
    assert first["ratio"] is not None

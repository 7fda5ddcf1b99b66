"""Every benchmark runs end to end at a tiny size and returns well-formed rows.

These prove the benchmarks work; they never judge speed (no timing assertions: targets live in
`bench/`, reported, not enforced). PostgreSQL halves run when `MCPHOST_TEST_POSTGRES_URL` is set.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import BENCHMARKS, run_benchmark
from bench.__main__ import main
from bench._config import TINY, BenchConfig
from bench._databases import DialectName, dialects
from bench._host import baseline_context
from bench._stats import Row, Stat, percentile
from bench._stdio import StdioDriver

pytestmark = pytest.mark.timeout(300)


def tiny(tmp_path: Path, *only: DialectName) -> BenchConfig:
    return BenchConfig(sizes=TINY, preset="tiny", dialects=only or tuple(dialects()), tmp_root=tmp_path)


def _finite(stat: Stat) -> bool:
    return stat.n > 0 and math.isfinite(stat.p50) and math.isfinite(stat.tail)


def check(rows: list[Row], benchmark: str) -> None:
    assert rows, f"{benchmark} returned no rows"
    for row in rows:
        assert row.benchmark == benchmark
        assert _finite(row.subject), row
        if row.baseline is not None:
            assert _finite(row.baseline), row
        json.dumps(row.to_json())  # results.json can hold it


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([5.0], 99) == 5.0
    assert Stat.of([1.0, 2.0, 3.0, 4.0], "runs/s", higher_is_better=True).tail < 1.1


async def test_the_baseline_driver_runs_the_echo_plugin_without_a_host() -> None:
    async with StdioDriver.open() as driver:
        results = await driver.run("default", baseline_context("hi", "c1"))
    assert [r["type"] for r in results][-1] == "run.completed"
    assert any(r["type"] == "message.completed" for r in results)


async def test_run_overhead_measures_host_and_direct_runs(tmp_path: Path) -> None:
    rows = await run_benchmark("run-overhead", tiny(tmp_path))
    check(rows, "run-overhead")
    first = rows[0]
    transactions = first.extra["transactions_per_run"]
    assert isinstance(transactions, float)
    assert transactions > 0
    assert first.verdict in ("met", "missed")


async def test_throughput_measures_each_concurrency_and_memory(tmp_path: Path) -> None:
    rows = await run_benchmark("throughput", tiny(tmp_path, "sqlite"))
    check(rows, "throughput")
    cases = [row.case for row in rows]
    assert [c for c in cases if "memory" not in c] == [f"sqlite, c={c}" for c in TINY.concurrencies]
    assert any("memory" in c for c in cases)


async def test_scale_compares_a_small_and_a_big_database(tmp_path: Path) -> None:
    rows = await run_benchmark("scale", tiny(tmp_path))
    check(rows, "scale")
    assert {row.verdict for row in rows} <= {"met", "missed"}


@pytest.mark.slow
async def test_startup_measures_mcphost_run(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, "sqlite")
    rows = await run_benchmark("startup", cfg)
    check(rows, "startup")
    targets = {row.case: row for row in rows if row.case.startswith("target: ")}
    assert sorted(targets) == [
        "target: cold mcphost run hello",
        "target: import mcphost.app",
        "target: mcphost send",
        "target: mcphost serve healthy",
    ]
    for row in targets.values():  # each a same-run ratio against its bare import, judged against its target
        assert row.ratio is not None, row
        assert row.target is not None, row
        assert row.verdict in ("met", "missed"), row


async def test_mcp_call_runs_or_says_why_not(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, "sqlite")
    rows = await run_benchmark("mcp-call", cfg)
    if not rows:
        assert cfg.skipped, "mcp-call returned nothing without saying why"
    else:
        check(rows, "mcp-call")


def test_the_command_line_writes_a_table_and_results_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    assert main(["run-overhead", "--tiny", "--sqlite-only", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| run-overhead | sqlite, c=1 |" in printed
    doc = json.loads(out.read_text())
    assert doc["preset"] == "tiny"
    assert doc["machine"]["nproc"] >= 1
    assert {row["benchmark"] for row in doc["rows"]} == {"run-overhead"}


def test_every_benchmark_is_named_once() -> None:
    assert list(BENCHMARKS) == [
        "run-overhead",
        "throughput",
        "mcp-call",
        "scale",
        "startup",
        "bridge",
        "tracing",
        "warm",
        "models",
        "runtimes",
    ]


async def test_bridge_times_ten_cold_starts_to_the_tools_list_answer_in_both_eras(tmp_path: Path) -> None:
    rows = await run_benchmark("bridge", tiny(tmp_path, "sqlite"))
    check(rows, "bridge")
    assert [row.case.split(", ")[1].split(" ")[0] for row in rows] == ["2025-11-25", "2026-07-28"]
    for row in rows:
        assert row.baseline is not None
        assert (row.subject.n, row.baseline.n) == (10, 10)
        assert row.verdict in ("met", "missed")


async def test_tracing_compares_off_with_the_noop_api_and_on(tmp_path: Path) -> None:
    rows = await run_benchmark("tracing", tiny(tmp_path, "sqlite"))
    check(rows, "tracing")
    assert [r.subject_label for r in rows] == [
        "tracing off (default)",
        "tracing on (SDK, batch, spans dropped)",
    ]


@pytest.mark.slow
async def test_warm_compares_cold_and_warm_turns_of_each_harness(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, "sqlite")
    rows = await run_benchmark("warm", cfg)
    if not rows:
        pytest.skip("; ".join(cfg.skipped))
    check(rows, "warm")
    for row in rows:
        assert float(row.extra["warm_process_rss_mb"]) > 0  # the warm process was alive and measured


async def test_models_compares_proxied_calls_with_the_upstream_and_loses_no_stream(tmp_path: Path) -> None:
    rows = await run_benchmark("models", tiny(tmp_path))
    check(rows, "models")
    per_dialect = [
        "non-streamed, no budget",
        "non-streamed, no budget, CPU",
        "non-streamed, with a budget",
        "non-streamed, with a budget, CPU",
        "streamed, time to first token",
        f"{TINY.models_streams} concurrent streams, burst",
        "models_invoke over MCP, whole",
        "models_invoke over MCP, streamed with progress",
    ]
    assert [row.case for row in rows] == [f"{d}, {case}" for d in dialects() for case in per_dialect]
    for row in (row for row in rows if "models_invoke" in row.case):
        assert row.baseline is not None
        samples = TINY.models_calls * TINY.models_rounds  # the warm-up round is not counted
        assert (row.baseline.n, row.subject.n) == (samples, samples)
        assert float(row.extra["client_cpu_tool_p50_ms"]) > 0  # the MCP client ran on its own thread
    bursts = [row for row in rows if "concurrent" in row.case]
    for row in bursts:
        assert row.verdict == "met", row.extra  # every stream ended and every call has its usage row
        assert row.extra["streams"] == TINY.models_streams * TINY.models_stream_rounds
    assert all(row.verdict in ("met", "missed") for row in rows if row.target is not None)


@pytest.mark.slow
async def test_runtimes_compares_runs_on_runtime_daemons_with_local_runs_in_one_serve(tmp_path: Path) -> None:
    rows = await run_benchmark("runtimes", tiny(tmp_path))
    check(rows, "runtimes")
    c = TINY.runtimes_concurrency
    per_dialect = [
        "c=1, run latency",
        "c=1, host CPU per run",
        *(f"{n} runtime{'s' if n > 1 else ''}, c={c}" for n in TINY.runtimes_daemons),
    ]
    assert [row.case for row in rows] == [f"{d}, {case}" for d in dialects() for case in per_dialect]
    for row in rows:
        assert row.baseline is not None
        if row.target is not None:
            assert row.verdict in ("met", "missed"), row
    for row in (row for row in rows if row.case.endswith("run latency")):
        # the daemon and its echo plugin did the remote runs' work, and were measured doing it
        assert float(row.extra["runtime_cpu_ms_per_run"]) > 0, row.extra
        assert float(row.extra["runtime_plugin_cpu_ms_per_run"]) > 0, row.extra
        assert float(row.extra["host_plugin_cpu_ms_per_run_local"]) > 0, row.extra

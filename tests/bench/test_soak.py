"""bench/peers/soak runs end to end at its smallest size: memory over many runs, one long conversation.

Proves the benchmark works and reads what it claims (RSS per block, every turn timed); judges no speed.
The LangGraph half runs only where its environment (`bench/peers/langgraph/`) is installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import aiohttp
import anyio
import pytest

from bench._stats import judge
from bench.peers._servers import Server, peer_available
from bench.peers.soak import KEPT_ERRORS, PRESETS, TURN_WARMUP, SoakConfig, SoakSide, main, run, thread_row

pytestmark = pytest.mark.timeout(600)
TINY = PRESETS["tiny"]


async def test_the_mcphost_side_measures_memory_per_block_and_every_turn(tmp_path: Path) -> None:
    cfg = SoakConfig(sizes=TINY, dialects=("sqlite",), peer=False, tmp_root=tmp_path)
    memory, thread = await run(cfg)
    assert (
        memory.case == f"sqlite: RSS growth over {TINY.runs - TINY.block} runs after {TINY.block} to warm up"
    )
    blocks = str(memory.extra["mcphost_rss_mib_per_block"]).split()
    assert len(blocks) == TINY.runs // TINY.block
    assert all(float(b) > 10 for b in blocks)  # a served host and its plugin: tens of MiB, never zero
    assert memory.extra["mcphost_failed_runs"] == 0
    assert memory.baseline is None  # no peer measured, so no ratio claimed
    assert thread.subject.n == TINY.turns + TURN_WARMUP
    assert thread.extra["mcphost_failed_turns"] == 0
    first, last = thread.extra["mcphost_first_tenth_p50_ms"], thread.extra["mcphost_last_tenth_p50_ms"]
    assert isinstance(first, float)
    assert isinstance(last, float)
    assert min(first, last) > 0
    assert thread.subject.p50 == pytest.approx(100 * (last / first - 1))
    assert cfg.skipped == ["soak / LangGraph: not requested (--no-peer)"]
    assert not [p async for p in anyio.Path(tmp_path).iterdir()]  # the database and servers' files are gone


def test_the_command_prints_the_table_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "soak.json"
    assert main(["--tiny", "--sqlite-only", "--no-peer", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "| soak | sqlite: latency growth over" in printed
    doc = json.loads(output.read_text())
    assert [row["case"].split(":")[0] for row in doc["rows"]] == ["sqlite", "sqlite"]


def test_part_turns_measures_only_the_long_conversation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "soak.json"
    assert main(["--tiny", "--part", "turns", "--sqlite-only", "--no-peer", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "RSS growth" not in printed
    doc = json.loads(output.read_text())
    [row] = doc["rows"]
    assert row["case"].startswith(f"sqlite: latency growth over {TINY.turns} turns")
    assert row["subject"]["n"] == TINY.turns + TURN_WARMUP
    assert doc["part"] == "turns"


def test_an_unknown_part_is_refused_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--tiny", "--part", "cpu"])
    assert exited.value.code == 2
    assert "invalid choice: 'cpu' (choose from 'all', 'memory', 'turns')" in capsys.readouterr().err


async def test_failed_turns_are_counted_and_their_first_messages_kept_in_the_row() -> None:
    failing = range(TURN_WARMUP + 2, TURN_WARMUP + 7)

    async def run_one(client: aiohttp.ClientSession, server: Server, conversation: str) -> None:
        turn = len(side.turn_ms) + side.failed_turns.count
        if turn in failing:
            raise RuntimeError(f"turn {turn} did not echo")

    # The side's server and client are only handed to run_one, which uses neither.
    side = SoakSide("mcphost serve", cast(Server, None), run_one, cast(aiohttp.ClientSession, None), str)
    for _ in range(TURN_WARMUP + 20):
        await side.turn("conversation")
    row = thread_row("sqlite", [side], 20)
    assert row.extra["mcphost_failed_turns"] == len(failing)
    assert row.extra["mcphost_first_errors"] == " | ".join(
        f"turn {turn} did not echo" for turn in failing[:KEPT_ERRORS]
    )
    assert row.verdict == judge(False)  # a failed turn fails the target, whatever the latency


@pytest.mark.skipif(
    peer_available() is not None, reason="LangGraph's environment (bench/peers/langgraph) is absent"
)
async def test_both_sides_alternate_when_the_peer_is_installed(tmp_path: Path) -> None:
    memory, thread = await run(SoakConfig(sizes=TINY, dialects=("sqlite",), tmp_root=tmp_path))
    assert memory.baseline is not None
    assert thread.baseline is not None
    assert len(str(memory.extra["langgraph_rss_mib_per_block"]).split()) == TINY.runs // TINY.block
    assert thread.baseline.n == TINY.turns + TURN_WARMUP

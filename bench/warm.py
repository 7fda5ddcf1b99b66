"""warm: the second and later turns of a warm Claude Code session versus cold spawns (issue 16).

One host (the harness plugins as `[[plugins]]`, SQLite) and the fake Anthropic Messages API of
`tests/fakes` in this process. Two agents on the pinned Claude Code CLI differ only in `warm`: the
baseline (`warm = false`) spawns `claude -p --resume` per turn, the subject (`warm = true`) writes each
turn to its conversation's long-lived `claude -p --input-format stream-json`. Each side first answers
one turn that is not measured (the cold side's session exists, the warm side's process is up); then
rounds alternate one turn of each (ABBA), timed from `Orchestrator.submit` to the run's end
(`run.completed`). Also reported: the resident memory of the warm process's group after the rounds.
The CLI missing is a skip with the reason, not an error.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench._alternate import alternate
from bench._config import BenchConfig
from bench._stats import Row, Stat, judge
from mcphost.common.procgroup import group_rss_mb

NAME = "warm"
TARGET = 5.0


async def run(cfg: BenchConfig) -> list[Row]:
    """Measure in a fresh folder under `cfg.tmp_root` (or the system's temp dir), removed afterwards:
    the CLIs write their homes, caches and session files there."""
    with tempfile.TemporaryDirectory(prefix="mcphost-bench-warm-", dir=cfg.tmp_root) as folder:
        return await _measure(cfg, Path(folder))


async def _measure(cfg: BenchConfig, root: Path) -> list[Row]:
    from tests.e2e.harness.hostkit import claude_agent, finished, harness_host, message, unique
    from tests.fakes.anthropic import fake_anthropic
    from tests.fakes.harness_support import cli_path
    from tests.fakes.script import Text, always

    if not cli_path("claude").is_file():
        cfg.skipped.append(f"{NAME}: the pinned Claude Code CLI is not installed (npm ci)")
        return []
    warm_pid = 0
    async with fake_anthropic(always(Text("ok"))) as fake:
        agents = [
            claude_agent("cold", fake.base_url, root / "harness"),
            claude_agent("warm", fake.base_url, root / "harness", warm=True),
        ]
        async with harness_host(root, agents) as host:
            conversations = {"cold": unique("cold"), "warm": unique("warm")}

            async def turn(agent: str) -> list[float]:
                nonlocal warm_pid
                started = time.perf_counter()
                admission = await host.orchestrator.submit(message(agent, conversations[agent], "next turn"))
                done = await finished(host, admission.run.run_id, timeout=120)
                elapsed = (time.perf_counter() - started) * 1000
                if done.run.status.value != "completed":
                    raise RuntimeError(f"{agent} turn ended {done.run.status.value}: {done.terminal}")
                external: dict[str, Any] = done.terminal.get("metadata", {}).get("external", {})
                if agent == "warm":
                    warm = external.get("warm")
                    if not isinstance(warm, dict):
                        raise RuntimeError(f"the warm agent's turn did not run warm: {done.terminal}")
                    warm_pid = int(warm["pid"])  # pyright: ignore[reportUnknownArgumentType] -- JSON metadata
                return [elapsed]

            async def cold() -> list[float]:
                return await turn("cold")

            async def warm() -> list[float]:
                return await turn("warm")

            samples = await alternate(cold, warm, rounds=cfg.sizes.warm_rounds, warmup=1, min_rounds=1)
            rss = group_rss_mb(warm_pid)
    baseline, subject = Stat.of(samples.baseline, "ms"), Stat.of(samples.subject, "ms")
    speedup = baseline.p50 / subject.p50 if subject.p50 else 0.0
    return [
        Row(
            benchmark=NAME,
            case="Claude Code 2nd+ turn to run.completed",
            baseline_label="cold spawn (claude -p --resume)",
            subject_label="warm process (stream-json stdin)",
            baseline=baseline,
            subject=subject,
            target=f"warm ≥ {TARGET:g}x faster",
            verdict=judge(speedup >= TARGET),
            extra={"speedup_x": round(speedup, 2), "warm_process_rss_mb": round(rss, 1)},
        )
    ]

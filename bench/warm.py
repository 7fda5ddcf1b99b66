"""warm: the second and later turns of a warm harness session versus cold spawns (issue 16), for Claude
Code and Codex.

Per harness, one host (the harness plugins as `[[plugins]]`, SQLite) and the harness's fake model API of
`tests/fakes` in this process (the Messages API for Claude Code, the Responses API for Codex). Two agents
on the pinned CLI differ only in `warm`: the baseline (`warm = false`) spawns the CLI per turn resuming
the session (`claude -p --resume`, `codex exec resume`), the subject (`warm = true`) hands each turn to
its conversation's long-lived process (`claude -p --input-format stream-json`, `codex app-server`). Each
side first answers one turn that is not measured (the cold side's session exists, the warm side's
process is up); then rounds alternate one turn of each (ABBA), timed from `Orchestrator.submit` to the
run's end (`run.completed`: `Orchestrator.wait` returns; what the run stored is read back after the clock
stopped). Also reported: the resident memory of the warm process's group after the
rounds. A harness whose CLI is missing is skipped with the reason, not an error.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio

from bench._alternate import alternate
from bench._config import BenchConfig
from bench._stats import Row, Stat, judge
from mcphost.common.procgroup import group_rss_mb

NAME = "warm"
TARGET = 5.0


@dataclass(frozen=True)
class Harness:
    """One harness measured: its CLI, its agents' factory, its fake model API and its labels."""

    label: str
    cli: str
    agent: Callable[..., dict[str, Any]]
    fake: Callable[[Any], AbstractAsyncContextManager[Any]]
    cold_label: str
    warm_label: str


def _harnesses() -> list[Harness]:
    from tests.e2e.harness.hostkit import claude_agent, codex_agent
    from tests.fakes.anthropic import fake_anthropic
    from tests.fakes.openai import fake_openai

    return [
        Harness(
            "Claude Code",
            "claude",
            claude_agent,
            fake_anthropic,
            "cold spawn (claude -p --resume)",
            "warm process (stream-json stdin)",
        ),
        Harness(
            "Codex",
            "codex",
            codex_agent,
            fake_openai,
            "cold spawn (codex exec resume)",
            "warm process (codex app-server)",
        ),
    ]


async def run(cfg: BenchConfig) -> list[Row]:
    """Measure in a fresh folder under `cfg.tmp_root` (or the system's temp dir), removed afterwards:
    the CLIs write their homes, caches and session files there."""
    from tests.fakes.harness_support import cli_path

    rows: list[Row] = []
    for harness in _harnesses():
        if not cli_path(harness.cli).is_file():
            cfg.skipped.append(f"{NAME}: the pinned {harness.label} CLI is not installed (npm ci)")
            continue
        with tempfile.TemporaryDirectory(prefix="mcphost-bench-warm-", dir=cfg.tmp_root) as folder:
            rows.append(await _measure(cfg, harness, Path(folder)))
    return rows


async def _measure(cfg: BenchConfig, harness: Harness, root: Path) -> Row:
    from tests.e2e.harness.hostkit import finished, harness_host, message, unique
    from tests.fakes.script import Text, always

    warm_pid = 0
    async with harness.fake(always(Text("ok"))) as fake:
        agents = [
            harness.agent("cold", fake.base_url, root / "harness"),
            harness.agent("warm", fake.base_url, root / "harness", warm=True),
        ]
        async with harness_host(root, agents) as host:
            conversations = {"cold": unique("cold"), "warm": unique("warm")}

            async def turn(agent: str) -> list[float]:
                nonlocal warm_pid
                started = time.perf_counter()
                admission = await host.orchestrator.submit(message(agent, conversations[agent], "next turn"))
                with anyio.fail_after(120):
                    await host.orchestrator.wait(admission.run.run_id)
                elapsed = (time.perf_counter() - started) * 1000
                done = await finished(host, admission.run.run_id)  # read back after the clock stopped
                if done.run.status.value != "completed":
                    raise RuntimeError(f"{agent} turn ended {done.run.status.value}: {done.terminal}")
                external: dict[str, Any] = done.terminal.get("metadata", {}).get("external", {})
                if agent == "warm":
                    warm = external.get("warm")
                    if not isinstance(warm, dict):
                        raise RuntimeError(f"the warm agent's turn did not run warm: {done.terminal}")
                    warm_pid = int(cast(dict[str, Any], warm)["pid"])
                return [elapsed]

            async def cold() -> list[float]:
                return await turn("cold")

            async def warm() -> list[float]:
                return await turn("warm")

            samples = await alternate(cold, warm, rounds=cfg.sizes.warm_rounds, warmup=1, min_rounds=1)
            rss = group_rss_mb(warm_pid)
    baseline, subject = Stat.of(samples.baseline, "ms"), Stat.of(samples.subject, "ms")
    speedup = baseline.p50 / subject.p50 if subject.p50 else 0.0
    return Row(
        benchmark=NAME,
        case=f"{harness.label} 2nd+ turn to run.completed",
        baseline_label=harness.cold_label,
        subject_label=harness.warm_label,
        baseline=baseline,
        subject=subject,
        target=f"warm ≥ {TARGET:g}x faster",
        verdict=judge(speedup >= TARGET),
        extra={"speedup_x": round(speedup, 2), "warm_process_rss_mb": round(rss, 1)},
    )

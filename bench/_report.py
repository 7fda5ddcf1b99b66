"""The output: a Markdown table on stdout and `bench/results.json` with every number behind it.

Owns formatting only. The table is Markdown so it can be pasted into `bench/README.md` as is; the JSON
adds the machine, the command and the full rows (sample counts, units, notes).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench._stats import Row, fmt

RESULTS = Path(__file__).parent / "results.json"


def load_average() -> str:
    """The 1/5/15-minute load averages: other work on the machine skews every number."""
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def machine() -> dict[str, str | int | float]:
    """What the numbers were measured on."""
    mem_kib = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "nproc": os.cpu_count() or 0,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _extra(row: Row) -> str:
    parts: list[str] = []
    for key, value in row.extra.items():
        parts.append(f"{key}={fmt(value)}" if isinstance(value, float | int) else f"{key}: {value}")
    return "; ".join(parts)


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table."""
    head = "| benchmark | case | baseline (p50 / tail) | subject (p50 / tail) | ratio | target | notes |"
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        base = "—" if row.baseline is None else f"{row.baseline.show()} · {row.baseline_label}"
        ratio = "—" if row.ratio is None else f"{row.ratio:.2f}x"
        target = "—" if row.target is None else f"{row.target}: **{row.verdict}**"
        lines.append(
            f"| {row.benchmark} | {row.case} | {base} | {row.subject.show()} · {row.subject_label} "
            f"| {ratio} | {target} | {_extra(row)} |"
        )
    return "\n".join(lines)


def write_json(
    rows: Sequence[Row],
    *,
    command: str,
    preset: str,
    elapsed_s: float,
    skipped: Sequence[str] = (),
    load_before: str = "",
    path: Path = RESULTS,
) -> None:
    doc = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "preset": preset,
        "elapsed_s": round(elapsed_s, 1),
        "machine": machine(),
        "load_average": {"before": load_before, "after": load_average()},
        "argv": sys.argv,
        "rows": [row.to_json() for row in rows],
        "skipped": list(skipped),
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")

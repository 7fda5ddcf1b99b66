"""The output: a Markdown table on stdout and `bench/results.json` with every number behind it.

Owns formatting only. The table is Markdown so it can be pasted into `bench/README.md` as is; the JSON
adds the machine, the command and the full rows (sample counts, units, notes).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from sqlalchemy.engine import make_url

from bench._databases import postgres_server_url
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


def command_line(module: str, argv: Sequence[str] | None, dialects: Sequence[str]) -> str:
    """The command that reproduces this run, with the PostgreSQL server it used (password hidden)."""
    command = f"uv run python -m {module} " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    server = postgres_server_url()
    if "postgres" in dialects and server is not None:
        shown = make_url(server).render_as_string(hide_password=True)
        command = f"MCPHOST_BENCH_POSTGRES_URL={shlex.quote(shown)} {command}"
    return command.strip()


def footer(*, load_before: str, dialects: Sequence[str], elapsed_s: float, command: str) -> str:
    """The line under a table: machine, load average before and after, databases, time, command."""
    info = machine()
    return (
        f"{info['nproc']} CPUs ({info['cpu']}), {info['memory_gib']} GiB, Python {info['python']}; "
        f"load average {load_before} before, {load_average()} after; "
        f"databases: {', '.join(dialects)}; {elapsed_s:.0f} s; `{command}`"
    )


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
    details: Mapping[str, object] | None = None,
) -> None:
    """Write the rows and their context to `path`; `details` adds keys of the caller's (e.g. settings)."""
    doc: dict[str, object] = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "preset": preset,
        "elapsed_s": round(elapsed_s, 1),
        "machine": machine(),
        "load_average": {"before": load_before, "after": load_average()},
        "argv": sys.argv,
        "rows": [row.to_json() for row in rows],
        "skipped": list(skipped),
        **(details or {}),
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def publish(
    rows: Sequence[Row],
    *,
    module: str,
    argv: Sequence[str] | None,
    preset: str,
    dialects: Sequence[str],
    skipped: Sequence[str],
    load_before: str,
    elapsed_s: float,
    path: Path,
    details: Mapping[str, object] | None = None,
) -> None:
    """Print the table, what was skipped, `details` and the footer; write the JSON to `path`."""
    command = command_line(module, argv, dialects)
    print(table(rows))
    for note in skipped:
        print(f"\nskipped {note}")
    for key, value in (details or {}).items():
        print(f"\n{key}: {value}")
    print("\n" + footer(load_before=load_before, dialects=dialects, elapsed_s=elapsed_s, command=command))
    write_json(
        rows,
        command=command,
        preset=preset,
        elapsed_s=elapsed_s,
        skipped=skipped,
        load_before=load_before,
        path=path,
        details=details,
    )

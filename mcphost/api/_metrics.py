"""`HostMetrics`: this process's counters, rendered as Prometheus text (format 0.0.4) for `/metrics`.

Owns the counters and their exposition: runs that ended here by status and their durations, events
admitted, MCP calls by tool and outcome, rows and bytes the retention job reclaimed by kind; active runs and plugin restarts/up are passed in at render time.
Does not own the endpoint (`_endpoints.metrics`) or when things are counted (`app.py` counts run ends and
audited MCP calls and the retention job's passes, the ingest endpoint admitted events).

Invariants:
- Counters only grow and are per process (never shared between replicas).
- Histogram buckets are cumulative: a run is counted in every bucket whose bound it is within.
- Label values are escaped (backslash, double quote, newline) before they are written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from mcphost.config import RETENTION_KINDS
from mcphost.models import Run

# -- metrics -----------------------------------------------------------------------------------------

DURATION_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_TERMINAL = ("completed", "failed", "cancelled")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class HostMetrics:
    """This process's counters, rendered as Prometheus text exposition (format 0.0.4)."""

    def __init__(self) -> None:
        self.runs_ended: Counter[str] = Counter()
        self.events_admitted: Counter[str] = Counter()
        self.mcp_calls: Counter[tuple[str, str]] = Counter()
        self.reclaimed_rows: Counter[str] = Counter()
        self.reclaimed_bytes: Counter[str] = Counter()
        self._buckets = [0] * len(DURATION_BUCKETS)
        self._duration_sum = 0.0
        self._duration_count = 0

    def run_ended(self, run: Run) -> None:
        """Count a run that reached a terminal status on this process."""
        self.runs_ended[run.status.value] += 1
        if run.ended_at is not None:
            duration = max(run.ended_at - (run.started_at or run.created_at), 0.0)
            self._duration_sum += duration
            self._duration_count += 1
            for i, bound in enumerate(DURATION_BUCKETS):
                if duration <= bound:
                    self._buckets[i] += 1

    def mcp_call(self, tool: str, outcome: str) -> None:
        self.mcp_calls[(tool, outcome)] += 1

    def reclaimed(self, kind: str, rows: int, size: int) -> None:
        """Count what one retention pass deleted of `kind` (rows, or folders and files; bytes)."""
        self.reclaimed_rows[kind] += rows
        self.reclaimed_bytes[kind] += size

    def render(self, *, active_runs: int, plugins: Sequence[tuple[str, int, bool]]) -> str:
        """The exposition; `plugins` are (name, restarts, up)."""
        out: list[str] = []

        def head(name: str, kind: str, text: str) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")

        head("mcphost_runs_total", "counter", "Runs that ended on this process, by final status.")
        for status in _TERMINAL:
            out.append(f'mcphost_runs_total{{status="{status}"}} {self.runs_ended[status]}')
        head("mcphost_runs_active", "gauge", "Runs queued or running on this process.")
        out.append(f"mcphost_runs_active {active_runs}")
        head(
            "mcphost_events_admitted_total",
            "counter",
            "Events accepted by POST /v1/events and POST /v1/hooks/{source}.",
        )
        for outcome in ("created", "replayed"):
            out.append(
                f'mcphost_events_admitted_total{{outcome="{outcome}"}} {self.events_admitted[outcome]}'
            )
        head("mcphost_run_duration_seconds", "histogram", "Run duration from start (or admission) to end.")
        # `run_ended` counts a run in every bucket whose bound it is within, so counts are cumulative.
        for bound, count in zip(DURATION_BUCKETS, self._buckets, strict=True):
            out.append(f'mcphost_run_duration_seconds_bucket{{le="{bound:g}"}} {count}')
        out.append(f'mcphost_run_duration_seconds_bucket{{le="+Inf"}} {self._duration_count}')
        out.append(f"mcphost_run_duration_seconds_sum {self._duration_sum:.6f}")
        out.append(f"mcphost_run_duration_seconds_count {self._duration_count}")
        head(
            "mcphost_mcp_calls_total",
            "counter",
            "Per-run MCP calls served by this process, by tool and outcome.",
        )
        for (tool, outcome), count in sorted(self.mcp_calls.items()):
            out.append(
                f'mcphost_mcp_calls_total{{tool="{_label(tool)}",outcome="{_label(outcome)}"}} {count}'
            )
        head(
            "mcphost_retention_reclaimed_rows_total",
            "counter",
            "Rows (for run_folders and harness_homes: folders and files) the retention job deleted, by kind.",
        )
        for kind in RETENTION_KINDS:
            out.append(f'mcphost_retention_reclaimed_rows_total{{kind="{kind}"}} {self.reclaimed_rows[kind]}')
        head("mcphost_retention_reclaimed_bytes_total", "counter", "Bytes the retention job freed, by kind.")
        for kind in RETENTION_KINDS:
            out.append(
                f'mcphost_retention_reclaimed_bytes_total{{kind="{kind}"}} {self.reclaimed_bytes[kind]}'
            )
        head("mcphost_plugin_restarts_total", "counter", "Restarts of each plugin process.")
        for name, restarts, _ in plugins:
            out.append(f'mcphost_plugin_restarts_total{{plugin="{_label(name)}"}} {restarts}')
        head("mcphost_plugin_up", "gauge", "1 when the plugin process is running.")
        for name, _, up in plugins:
            out.append(f'mcphost_plugin_up{{plugin="{_label(name)}"}} {int(up)}')
        return "\n".join(out) + "\n"

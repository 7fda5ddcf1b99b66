"""`HostMetrics`: this process's metrics for `/metrics`, kept and rendered by prometheus_client.

Owns the metrics: runs that ended here by status and their durations, events admitted, MCP calls by
tool and outcome, verified webhooks answered without a run, rows and bytes the retention job reclaimed
by kind, approval decisions taken here by decision, host model tokens and cost by model and agent, schedule fires this process claimed by outcome, HTTP
requests by method, route and status and their durations, outbound webhook deliveries by outcome and dead
letters by reason, `mcphost_build_info`,
and prometheus_client's process, platform and garbage-collector collectors; active runs and plugin
restarts/up and the failed ticks of periodic loops (`common/periodic.py`, per process: two hosts in one process
share them) are read at render time. Does not own the endpoint (`api._endpoints.metrics`) or when things are
counted (`app.py` counts run ends, audited MCP calls, the retention job's passes, the scheduler's fires and
the webhook sender's outcomes, `api._middleware` HTTP requests, the ingest endpoints admitted events,
`api._approvals` decisions). Lives outside `api` because a host counts without serving `/v1` (a one-shot
`mcphost run` serves only its run's endpoints).

Invariants:
- Each `HostMetrics` has its own registry: counters are per process (never shared between replicas) and
  two hosts in one process (tests) never see each other's counts.
- Every label value a status or outcome can take is present from the start (at 0), so a rate over a
  series that has not happened yet is 0, not absent.
- HTTP requests are labelled by route template (`/v1/runs/{run_id}`), never by raw path: the label
  set is bounded whatever clients send.
- `_created` series are not exported (`disable_created_metrics`): the exposition stays the 0.0.4 text it
  was, and no scraper needs them.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator, Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from mcphost import __version__
from mcphost.common.periodic import FAILURES as LOOP_FAILURES
from mcphost.config import RETENTION_KINDS
from mcphost.delivery import DELIVERY_OUTCOMES, DeliveryOutcome
from mcphost.models import Run

# -- metrics -----------------------------------------------------------------------------------------

disable_created_metrics()

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
DURATION_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_TERMINAL = ("completed", "failed", "cancelled", "parked")
APPROVAL_DECISIONS = ("approved", "denied", "answered")
"""`mcphost_approval_decisions_total` labels: `answered` is an `interaction` approved with an answer."""
FIRE_OUTCOMES = ("fired", "skipped", "refused")
"""`mcphost_schedule_fires_total` labels: emitted and admitted, skipped as a misfire, emitted and refused
(no agent takes it, a `reject` policy)."""
UNMATCHED_ROUTE = "<unmatched>"
"""The `route` label of a request no route matched (a 404)."""
_DEAD_LETTER_REASONS: dict[DeliveryOutcome, str] = {
    "dead": "failed",
    "expired": "expired",
    "unconfigured": "unconfigured",
}
"""The delivery outcomes that end a row dead, and the dead-letter reason each counts as."""


class _Live(Collector):
    """Values read when scraped: active runs, each plugin's restarts and state, loop failures."""

    def __init__(self) -> None:
        self.active_runs = 0
        self.plugins: Sequence[tuple[str, int, bool]] = ()

    def collect(self) -> Iterator[Metric]:
        active = GaugeMetricFamily("mcphost_runs_active", "Runs queued or running on this process.")
        active.add_metric([], self.active_runs)
        restarts = CounterMetricFamily(
            "mcphost_plugin_restarts", "Restarts of each plugin process.", labels=["plugin"]
        )
        up = GaugeMetricFamily(
            "mcphost_plugin_up", "1 when the plugin process is running.", labels=["plugin"]
        )
        for name, count, running in self.plugins:
            restarts.add_metric([name], count)
            up.add_metric([name], int(running))
        loops = CounterMetricFamily(
            "mcphost_loop_failures",
            "Failed ticks of this process's periodic loops (sweeps, scheduler, sender, ...), by loop name.",
            labels=["loop"],
        )
        for name, count in sorted(LOOP_FAILURES.items()):
            loops.add_metric([name], count)
        yield from (active, restarts, up, loops)


class HostMetrics:
    """This process's metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._runs = Counter(
            "mcphost_runs", "Runs that ended on this process, by final status.", ["status"], registry=r
        )
        self._events = Counter(
            "mcphost_events_admitted",
            "Events accepted by POST /v1/events and POST /v1/hooks/{source}.",
            ["outcome"],
            registry=r,
        )
        self._durations = Histogram(
            "mcphost_run_duration_seconds",
            "Run duration from start (or admission) to end.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._mcp_calls = Counter(
            "mcphost_mcp_calls",
            "Per-run MCP calls served by this process, by tool and outcome.",
            ["tool", "outcome"],
            registry=r,
        )
        self._requests = Counter(
            "mcphost_http_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self._latency = Histogram(
            "mcphost_http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template (a stream: until it ends).",
            ["method", "route"],
            registry=r,
        )
        Info("mcphost_build", "The running mcphost.", registry=r).info(
            {"version": __version__, "python": platform.python_version()}
        )
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self._live = _Live()
        r.register(self._live)
        for status in _TERMINAL:
            self._runs.labels(status)
        for outcome in ("created", "replayed"):
            self._events.labels(outcome)
        self._reclaimed_rows = Counter(
            "mcphost_retention_reclaimed_rows",
            "Rows (for run_folders and harness_homes: folders and files) the retention job deleted, by kind.",
            ["kind"],
            registry=r,
        )
        self._reclaimed_bytes = Counter(
            "mcphost_retention_reclaimed_bytes",
            "Bytes the retention job freed, by kind.",
            ["kind"],
            registry=r,
        )
        for kind in RETENTION_KINDS:
            self._reclaimed_rows.labels(kind)
            self._reclaimed_bytes.labels(kind)
        # Verified webhooks answered 200 without a run (`hooks.ignored`); `source` is a configured
        # [hooks.<source>] name (an unknown one is a 404 before this), so the label set stays bounded.
        self._hooks_ignored = Counter(
            "mcphost_hook_events_ignored",
            "Verified webhook deliveries answered without a run, by hook source and reason.",
            ["source", "reason"],
            registry=r,
        )
        self._deliveries_metrics()
        self._init_approvals_and_schedules()
        self._model_tokens = Counter(
            "mcphost_model_tokens",
            "Host model tokens spent through this process, by model id, agent and kind (input, output, cached).",
            ["model", "agent", "kind"],
            registry=r,
        )
        self._model_cost = Counter(
            "mcphost_model_cost_usd",
            "USD of host model calls made through this process, by model id and agent.",
            ["model", "agent"],
            registry=r,
        )

    def model_call(self, model: str, agent: str, tokens: tuple[int, int, int], cost_usd: float) -> None:
        """Count one host model call: its (input, output, cached) tokens and its cost. Models and agents
        are configured ids, so the label sets stay bounded."""
        for kind, count in zip(("input", "output", "cached"), tokens, strict=True):
            self._model_tokens.labels(model, agent, kind).inc(count)
        self._model_cost.labels(model, agent).inc(cost_usd)

    # -- approvals and schedule fires ------------------------------------------------------------------

    def _init_approvals_and_schedules(self) -> None:
        self._approval_decisions = Counter(
            "mcphost_approval_decisions",
            "Approvals decided through this process's API (POST /v1/approvals/{id}), by decision.",
            ["decision"],
            registry=self.registry,
        )
        self._schedule_fires = Counter(
            "mcphost_schedule_fires",
            "Schedule fires this process claimed (each fire is claimed by one replica), by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        for decision in APPROVAL_DECISIONS:
            self._approval_decisions.labels(decision)
        for outcome in FIRE_OUTCOMES:
            self._schedule_fires.labels(outcome)

    def approval_decided(self, decision: str) -> None:
        """Count a decision this process recorded (`approved`, `denied` or `answered`)."""
        self._approval_decisions.labels(decision).inc()

    def schedule_fired(self, outcome: str) -> None:
        """Count a fire this process's scheduler claimed (`fired`, `skipped` or `refused`)."""
        self._schedule_fires.labels(outcome).inc()

    def run_ended(self, run: Run) -> None:
        """Count a run that reached a terminal status on this process."""
        self._runs.labels(run.status.value).inc()
        if run.ended_at is not None:
            self._durations.observe(max(run.ended_at - (run.started_at or run.created_at), 0.0))

    def event_admitted(self, *, created: bool) -> None:
        self._events.labels("created" if created else "replayed").inc()

    def hook_ignored(self, source: str, reason: str) -> None:
        """Count a verified webhook answered without a run (`ping`, `event_not_selected`)."""
        self._hooks_ignored.labels(source, reason).inc()

    def mcp_call(self, tool: str, outcome: str) -> None:
        self._mcp_calls.labels(tool, outcome).inc()

    def reclaimed(self, kind: str, rows: int, size: int) -> None:
        """Count what one retention pass deleted of `kind` (rows, or folders and files; bytes)."""
        self._reclaimed_rows.labels(kind).inc(rows)
        self._reclaimed_bytes.labels(kind).inc(size)

    # -- outbound webhook deliveries (delivery.DeliverySender's outcomes) ------------------------------

    def _deliveries_metrics(self) -> None:
        self._delivery_outcomes = Counter(
            "mcphost_deliveries",
            "Claimed outbound webhook deliveries this process ended, by outcome: delivered, failed (a failed "
            "send, tried again later), dead (a failed send past max_age_s), expired (dead without a send), "
            "unconfigured (its URL left [[webhooks]]), superseded (sent, but the lease was taken over).",
            ["outcome"],
            registry=self.registry,
        )
        self._dead_letters = Counter(
            "mcphost_delivery_dead_letters",
            "Outbound webhook deliveries this process moved to dead, by reason: failed (the last send "
            "failed with no time left), expired (past expires_at before a send), unconfigured.",
            ["reason"],
            registry=self.registry,
        )
        for outcome in DELIVERY_OUTCOMES:
            self._delivery_outcomes.labels(outcome)
        for reason in _DEAD_LETTER_REASONS.values():
            self._dead_letters.labels(reason)

    def delivery(self, outcome: DeliveryOutcome) -> None:
        """Count what became of one claimed delivery (and a dead letter when it ended dead)."""
        self._delivery_outcomes.labels(outcome).inc()
        reason = _DEAD_LETTER_REASONS.get(outcome)
        if reason is not None:
            self._dead_letters.labels(reason).inc()

    # -- end of outbound webhook deliveries ------------------------------------------------------------

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's current value (`mcphost_runs_total`, status="completed"), None when absent."""
        return self.registry.get_sample_value(name, labels)

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self._requests.labels(method, route, str(status)).inc()
        self._latency.labels(method, route).observe(seconds)

    def render(self, *, active_runs: int, plugins: Sequence[tuple[str, int, bool]]) -> bytes:
        """The exposition (text format 0.0.4); `plugins` are (name, restarts, up)."""
        self._live.active_runs, self._live.plugins = active_runs, plugins
        return generate_latest(self.registry)

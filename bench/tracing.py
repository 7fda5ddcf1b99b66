"""tracing: the host's CPU per run with tracing off, against the OpenTelemetry no-op API and against on.

Subject and baseline are echo runs through one host (`orchestrator.submit` → `wait`, the run's close
included), each measured as this process's CPU time (`time.process_time`, all threads: the batch
exporter's thread counts too), one run per side per round, alternating:

- off vs no-op: tracing off (the default: `span` hands back one shared no-op, nothing of OpenTelemetry
  is called) against the OpenTelemetry API's `NoOpTracerProvider` in its place (every span created,
  none recorded). Off should cost no more than the no-op API, i.e. ratio ≤ 1.
- on vs off: an SDK `TracerProvider` with a `BatchSpanProcessor` and an exporter that drops the batch
  (what tracing costs this process, without the network) against off.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NoOpTracerProvider
from opentelemetry.trace import TracerProvider as ApiTracerProvider

from bench._alternate import alternate
from bench._config import BenchConfig
from bench._databases import DialectName, workspace
from bench._host import bench_host, host_run, message
from bench._stats import Row, Stat, judge
from mcphost import tracing
from mcphost.app import Host

NAME = "tracing"


class _Dropped(SpanExporter):
    """Accepts every batch and keeps nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        del spans
        return SpanExportResult.SUCCESS


async def run(cfg: BenchConfig) -> list[Row]:
    rows: list[Row] = []
    for dialect in cfg.dialects[:1]:  # the cost is the host's CPU, not the database's
        rows.extend(await _dialect(dialect, cfg))
    return rows


async def _dialect(dialect: DialectName, cfg: BenchConfig) -> list[Row]:
    sizes = cfg.sizes
    noop = NoOpTracerProvider()
    sdk = TracerProvider()
    sdk.add_span_processor(BatchSpanProcessor(_Dropped()))
    counter = itertools.count()
    try:
        async with workspace(dialect, cfg.tmp_root) as ws, bench_host(ws) as host:

            def side(provider: ApiTracerProvider | None) -> Callable[[], Awaitable[list[float]]]:
                async def measure() -> list[float]:
                    tracing.use(provider)
                    try:
                        return [await _cpu_ms(host, f"conv-{next(counter) % 8}")]
                    finally:
                        tracing.use(None)

                return measure

            rounds = max(sizes.overhead_runs, 3)
            first = await alternate(side(noop), side(None), rounds=rounds, warmup=sizes.overhead_warmup)
            second = await alternate(side(None), side(sdk), rounds=rounds, warmup=sizes.overhead_warmup)
    finally:
        sdk.shutdown()
    return [
        Row(
            benchmark=NAME,
            case=f"{dialect}, echo run, CPU",
            baseline_label="no-op OpenTelemetry API",
            subject_label="tracing off (default)",
            baseline=(noop_stat := Stat.of(first.baseline, "ms CPU")),
            subject=(off_stat := Stat.of(first.subject, "ms CPU")),
            target="off ≤ no-op at p50",
            verdict=judge(off_stat.p50 <= noop_stat.p50),
        ),
        Row(
            benchmark=NAME,
            case=f"{dialect}, echo run, CPU",
            baseline_label="tracing off (default)",
            subject_label="tracing on (SDK, batch, spans dropped)",
            baseline=Stat.of(second.baseline, "ms CPU"),
            subject=Stat.of(second.subject, "ms CPU"),
        ),
    ]


async def _cpu_ms(host: Host, conversation: str) -> float:
    start = time.process_time()
    run_id = await host_run(host, message("hello", conversation))
    await host.orchestrator.wait(run_id)
    return 1000 * (time.process_time() - start)

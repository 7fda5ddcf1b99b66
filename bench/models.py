"""models: a call of a host model through a run's model endpoint versus the same call to the upstream.

Upstream: the fake Anthropic Messages API of the tests (`tests.fakes.anthropic`) under uvicorn on
127.0.0.1, in this process. Subject: a real host (`bench_host` with the hold runner and `[models.fake]`
pointing at that fake) serving its app the way `mcphost run` does (`serve_locally`), called at
`/runs/{run_id}/models/anthropic/v1/messages` with the run's token while a hold run is active. Baseline:
the same request, from the same client, straight to the fake. Both sides are driven from this process,
so every number is this process's: the host's overhead is the subject's minus the baseline's.

- non-streamed: wall latency (p50, p95 in `extra`) and this process's CPU per call (`time.process_time`,
  all threads; the fake and the client count on both sides, so the difference is the host's), calls
  alternating in ABBA rounds; for an agent without a model budget (no reservation) and one with a daily
  budget it never reaches (each call reserved in the database first). Target: host CPU ≤ 1.5 ms p50.
- streamed: time to first token (the first body chunk of a `stream: true` call), the sides alternating
  call by call (ABBA). Target: ≤ +3 ms p50.
- 64 concurrent streams (`Sizes.models_streams`): a burst of streams at once, each read to its end,
  direct against proxied. Target: no loss — every proxied stream ends with `message_stop`, and once the
  run has ended (`orchestrator.wait`) every call has its usage row, `ok`, with the fake's tokens.
- the MCP model tools: `models_invoke` through the run's MCP server (the `mcp` SDK's `Client` over the
  host's HTTP app) against the same request straight to the fake, whole and streamed with progress
  notifications; latency and the host's CPU per call, the clients on a thread of their own (`_tools`).

Runs on every configured database (the reservation and the usage rows are database writes).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.to_thread
import httpx2

from bench._alternate import Samples, alternate
from bench._config import BenchConfig
from bench._databases import DialectName, workspace
from bench._host import bench_host, message
from bench._stats import Row, Stat, fmt, judge, percentile
from mcphost.app import Host
from mcphost.context import models_url
from mcphost.llm import ModelConfig

NAME = "models"
TARGET_CPU_MS = 1.5
TARGET_TTFT_MS = 3.0
HOLD_S = 600.0
BODY = {"model": "fake", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
STREAMED = {**BODY, "stream": True}
TOOL_ARGUMENTS = {"model": "fake", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
"""`models_invoke`'s arguments for the same request as `BODY`."""


@dataclass
class _Target:
    """Where a call goes and what it sends."""

    url: str
    headers: dict[str, str]


@dataclass
class _Run:
    run_id: str
    proxied: _Target
    mcp_url: str
    mcp_headers: dict[str, str]


async def run(cfg: BenchConfig) -> list[Row]:
    from mcphost.serving import serve_locally
    from tests.fakes.anthropic import fake_anthropic
    from tests.fakes.script import Text, always

    rows: list[Row] = []
    for dialect in cfg.dialects:
        async with fake_anthropic(always(Text("hello from the fake"))) as upstream:
            models = {
                "fake": ModelConfig.model_validate(
                    {"provider": "anthropic", "base_url": upstream.base_url, "model": "claude-fake"}
                )
            }
            async with (
                workspace(dialect, cfg.tmp_root) as ws,
                bench_host(ws, hold=True, models=models) as host,
                serve_locally(host),
                httpx2.AsyncClient(
                    timeout=httpx2.Timeout(30),
                    trust_env=False,
                    limits=httpx2.Limits(max_connections=256, max_keepalive_connections=256),
                ) as http,
            ):
                direct = _Target(f"{upstream.base_url}/v1/messages", {"x-api-key": "direct"})
                rows.extend(await _dialect(dialect, cfg, host, http, direct))
    return rows


@asynccontextmanager
async def _hold_run(host: Host, bot: str, conversation: str) -> AsyncGenerator[_Run, None]:
    """A hold run of `bot`, active for the block; cancelled and waited for (closed) on exit."""
    admission = await host.orchestrator.submit(message(str(HOLD_S), conversation, bot=bot))
    run_id = admission.run.run_id
    with anyio.fail_after(30):
        while (ctx := await host.orchestrator.context(run_id)) is None:  # noqa: ASYNC110  # no signal for "started"
            await anyio.sleep(0.005)
    mcp = ctx.context.mcp
    assert mcp is not None
    url = f"{models_url(host.orchestrator.public_url, run_id)}/anthropic/v1/messages"
    try:
        token = mcp.headers["Authorization"].removeprefix("Bearer ")
        yield _Run(run_id, _Target(url, {"x-api-key": token}), mcp.url, dict(mcp.headers))
    finally:
        await host.orchestrator.cancel(run_id, reason="benchmark case over")
        with anyio.fail_after(30):
            await host.orchestrator.wait(run_id)


async def _call(http: httpx2.AsyncClient, target: _Target) -> None:
    answer = await http.post(target.url, json=BODY, headers=target.headers)
    if answer.status_code != 200 or answer.json().get("type") != "message":
        raise RuntimeError(f"model call to {target.url} answered {answer.status_code}: {answer.text[:300]}")


async def _first_token_ms(http: httpx2.AsyncClient, target: _Target) -> float:
    """Milliseconds to the stream's first body chunk (the stream is then read to its end)."""
    start = time.perf_counter_ns()
    first: float | None = None
    async with http.stream("POST", target.url, json=STREAMED, headers=target.headers) as answer:
        async for _ in answer.aiter_raw():
            if first is None:
                first = (time.perf_counter_ns() - start) / 1e6
    if answer.status_code != 200 or first is None:
        raise RuntimeError(f"model stream to {target.url} answered {answer.status_code}")
    return first


async def _stream_ends(http: httpx2.AsyncClient, target: _Target) -> bool:
    """Read one stream to its end; whether it ended with `message_stop`."""
    async with http.stream("POST", target.url, json=STREAMED, headers=target.headers) as answer:
        text = (await answer.aread()).decode()
    return answer.status_code == 200 and text.rstrip().endswith('data: {"type": "message_stop"}')


def _timed(
    samples: int, fn: Callable[[], Awaitable[object]], cpu: list[float]
) -> Callable[[], Awaitable[list[float]]]:
    """A side of `samples` calls of `fn`: wall ms per call returned, CPU ms per call appended to `cpu`."""

    async def side() -> list[float]:
        wall: list[float] = []
        for _ in range(samples):
            start, cpu_start = time.perf_counter_ns(), time.process_time_ns()
            await fn()
            cpu.append((time.process_time_ns() - cpu_start) / 1e6)
            wall.append((time.perf_counter_ns() - start) / 1e6)
        return wall

    return side


async def _dialect(
    dialect: DialectName, cfg: BenchConfig, host: Host, http: httpx2.AsyncClient, direct: _Target
) -> list[Row]:
    sizes = cfg.sizes
    rows: list[Row] = []
    for bot, label in (("hold", "no budget"), ("hold-budget", "with a budget")):
        async with _hold_run(host, bot, f"models-{bot}") as held:
            direct_cpu: list[float] = []
            proxied_cpu: list[float] = []
            samples = await alternate(
                _timed(sizes.models_calls, lambda: _call(http, direct), direct_cpu),
                _timed(sizes.models_calls, lambda: _call(http, held.proxied), proxied_cpu),
                rounds=sizes.models_rounds,
                warmup=1,
                min_rounds=1,
            )
        warm = sizes.models_calls  # the warm-up round's CPU samples are not counted
        direct_cpu, proxied_cpu = direct_cpu[warm:], proxied_cpu[warm:]
        rows.append(
            Row(
                benchmark=NAME,
                case=f"{dialect}, non-streamed, {label}",
                baseline_label="fake upstream directly",
                subject_label="through the run's endpoint",
                baseline=Stat.of(samples.baseline, "ms"),
                subject=Stat.of(samples.subject, "ms"),
                extra={
                    "direct_p95_ms": percentile(samples.baseline, 95),
                    "proxied_p95_ms": percentile(samples.subject, 95),
                    "overhead_p50_ms": percentile(samples.subject, 50) - percentile(samples.baseline, 50),
                },
            )
        )
        cpu_overhead = percentile(proxied_cpu, 50) - percentile(direct_cpu, 50)
        rows.append(
            Row(
                benchmark=NAME,
                case=f"{dialect}, non-streamed, {label}, CPU",
                baseline_label="fake upstream directly",
                subject_label="through the run's endpoint",
                baseline=Stat.of(direct_cpu, "ms CPU"),
                subject=Stat.of(proxied_cpu, "ms CPU"),
                target=f"host CPU ≤ {TARGET_CPU_MS:g} ms p50",
                verdict=judge(cpu_overhead <= TARGET_CPU_MS),
                extra={"host_cpu_p50_ms": cpu_overhead},
            )
        )
    rows.append(await _ttft(dialect, cfg, host, http, direct))
    rows.append(await _concurrent(dialect, cfg, host, http, direct))
    rows.extend(await _tools(dialect, cfg, host, direct))
    return rows


async def _ttft(
    dialect: DialectName, cfg: BenchConfig, host: Host, http: httpx2.AsyncClient, direct: _Target
) -> Row:
    """Time to first token, the sides alternating call by call (ABBA): a first token takes a millisecond
    or two, so a burst of outside load on a block of one side's calls would decide the median."""
    sizes = cfg.sizes
    samples = Samples([], [], 0)
    async with _hold_run(host, "hold", "models-ttft") as held:
        for round_ in range(sizes.models_rounds + 1):  # the first round warms up and is not counted
            into = Samples([], [], 0) if round_ == 0 else samples
            for i in range(sizes.models_calls):
                if i % 2 == 0:
                    into.baseline.append(await _first_token_ms(http, direct))
                    into.subject.append(await _first_token_ms(http, held.proxied))
                else:
                    into.subject.append(await _first_token_ms(http, held.proxied))
                    into.baseline.append(await _first_token_ms(http, direct))
    overhead = percentile(samples.subject, 50) - percentile(samples.baseline, 50)
    return Row(
        benchmark=NAME,
        case=f"{dialect}, streamed, time to first token",
        baseline_label="fake upstream directly",
        subject_label="through the run's endpoint",
        baseline=Stat.of(samples.baseline, "ms"),
        subject=Stat.of(samples.subject, "ms"),
        target=f"≤ +{TARGET_TTFT_MS:g} ms p50",
        verdict=judge(overhead <= TARGET_TTFT_MS),
        extra={
            "overhead_p50_ms": overhead,
            "direct_p90_ms": percentile(samples.baseline, 90),
            "proxied_p90_ms": percentile(samples.subject, 90),
            "overhead_p90_ms": percentile(samples.subject, 90) - percentile(samples.baseline, 90),
        },
    )


async def _concurrent(
    dialect: DialectName, cfg: BenchConfig, host: Host, http: httpx2.AsyncClient, direct: _Target
) -> Row:
    """Bursts of concurrent streams; a burst's wall time per side, and what the proxied side lost."""
    sizes = cfg.sizes
    streams = sizes.models_streams
    proxied_calls = 0
    incomplete = 0

    def burst(target: _Target, proxied: bool) -> Callable[[], Awaitable[list[float]]]:
        async def measure() -> list[float]:
            nonlocal proxied_calls, incomplete
            ended: list[bool] = []

            async def one() -> None:
                ended.append(await _stream_ends(http, target))

            start = time.perf_counter_ns()
            async with anyio.create_task_group() as tg:
                for _ in range(streams):
                    tg.start_soon(one)
            elapsed = (time.perf_counter_ns() - start) / 1e6
            if proxied:
                proxied_calls += streams
                incomplete += ended.count(False)
            elif not all(ended):
                raise RuntimeError(f"{ended.count(False)} direct streams did not end")
            return [elapsed]

        return measure

    async with _hold_run(host, "hold", "models-burst") as held:
        samples = await alternate(
            burst(direct, False),
            burst(held.proxied, True),
            rounds=sizes.models_stream_rounds,
            warmup=0,
            min_rounds=1,
        )
    # The run has ended: every call it made must have its usage row by now.
    recorded = await host.stores.usage.calls(held.run_id)
    complete_rows = [
        c for c in recorded if c.status == "ok" and c.streamed and c.output_tokens > 0 and c.input_tokens > 0
    ]
    missing = proxied_calls - len(complete_rows)
    # What went wrong, when something did: the recorded errors of the calls that were not complete.
    errors = sorted(
        {f"{c.status} HTTP {c.http_status}: {c.error}" for c in recorded if c not in complete_rows}
    )
    lost = f"; not complete: {' | '.join(errors[:3])[:600]}" if errors else ""
    return Row(
        benchmark=NAME,
        case=f"{dialect}, {streams} concurrent streams, burst",
        baseline_label="fake upstream directly",
        subject_label="through the run's endpoint",
        baseline=Stat.of(samples.baseline, "ms"),
        subject=Stat.of(samples.subject, "ms"),
        target="no stream or usage row lost",
        verdict=judge(incomplete == 0 and missing == 0 and len(recorded) == proxied_calls),
        extra={
            "streams": float(proxied_calls),
            "incomplete_streams": float(incomplete),
            "missing_usage_rows": float(missing),
            "note": f"{proxied_calls} proxied streams, {fmt(float(len(recorded)))} usage rows{lost}",
        },
    )


@dataclass
class _ToolSamples:
    """Per call, one list per measure: wall ms, CPU ms of every thread but the clients' (the host, its
    SQLite writer thread and the fake), and the clients' thread's CPU ms."""

    wall: list[float]
    host_cpu: list[float]
    client_cpu: list[float]


def _tool_samples() -> _ToolSamples:
    return _ToolSamples([], [], [])


@dataclass
class _ToolRound:
    """One round's samples, per side and kind of call."""

    direct_whole: _ToolSamples
    tool_whole: _ToolSamples
    direct_streamed: _ToolSamples
    tool_streamed: _ToolSamples


async def _tools(dialect: DialectName, cfg: BenchConfig, host: Host, direct: _Target) -> list[Row]:
    """`models_invoke` through the run's MCP server (the `mcp` SDK's `Client` over the host's real HTTP
    app, 2026-07-28 era) against the same request straight to the fake: whole, and streamed with its
    text as progress notifications (against the stream read to its end). The clients run in a thread of
    their own with its own event loop, so the event loop's thread is the host and the fake alone: the
    host's CPU per call is that thread's CPU through the tool minus straight to the fake, without the
    MCP client's. A fresh hold run per round keeps each run under the MCP call rate (50/s, bursts of 100)."""
    sizes = cfg.sizes
    merged = _ToolRound(_tool_samples(), _tool_samples(), _tool_samples(), _tool_samples())
    for round_ in range(sizes.models_rounds + 1):  # the first round warms up and is not counted
        async with _hold_run(host, "hold", f"models-tools-{round_}") as held:
            found = await anyio.to_thread.run_sync(_tool_round_in_thread, direct, held, sizes.models_calls)
        if round_ == 0:
            continue
        for name in ("direct_whole", "tool_whole", "direct_streamed", "tool_streamed"):
            into, came = getattr(merged, name), getattr(found, name)
            into.wall.extend(came.wall)
            into.host_cpu.extend(came.host_cpu)
            into.client_cpu.extend(came.client_cpu)
    rows: list[Row] = []
    for label, base, tool in (
        ("whole", merged.direct_whole, merged.tool_whole),
        ("streamed with progress", merged.direct_streamed, merged.tool_streamed),
    ):
        host_cpu = percentile(tool.host_cpu, 50) - percentile(base.host_cpu, 50)
        rows.append(
            Row(
                benchmark=NAME,
                case=f"{dialect}, models_invoke over MCP, {label}",
                baseline_label="fake upstream directly",
                subject_label="models_invoke through the run's MCP server",
                baseline=Stat.of(base.wall, "ms"),
                subject=Stat.of(tool.wall, "ms"),
                extra={
                    "overhead_p50_ms": percentile(tool.wall, 50) - percentile(base.wall, 50),
                    "host_cpu_p50_ms": host_cpu,
                    "host_and_fake_cpu_direct_p50_ms": percentile(base.host_cpu, 50),
                    "host_and_fake_cpu_tool_p50_ms": percentile(tool.host_cpu, 50),
                    "client_cpu_direct_p50_ms": percentile(base.client_cpu, 50),
                    "client_cpu_tool_p50_ms": percentile(tool.client_cpu, 50),
                    "note": "host CPU: the process's CPU but the clients' thread's (host, its threads, the fake)",
                },
            )
        )
    return rows


def _tool_round_in_thread(direct: _Target, held: _Run, calls: int) -> _ToolRound:
    return anyio.run(_tool_round, direct, held, calls)


async def _tool_round(direct: _Target, held: _Run, calls: int) -> _ToolRound:
    """On the clients' thread: warm both sides up, then `calls` calls of each kind, alternating ABBA."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    found = _ToolRound(_tool_samples(), _tool_samples(), _tool_samples(), _tool_samples())
    deltas: list[str] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        deltas.append(message or "")

    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30), trust_env=False) as http,
        httpx2.AsyncClient(headers=held.mcp_headers, timeout=httpx2.Timeout(30), trust_env=False) as mcp_http,
        Client(streamable_http_client(held.mcp_url, http_client=mcp_http), mode="2026-07-28") as client,
    ):

        async def tool(streamed: bool) -> None:
            deltas.clear()
            result = await client.call_tool(
                "models_invoke", TOOL_ARGUMENTS, progress_callback=progress if streamed else None
            )
            structured: object = result.structured_content
            if result.is_error or not isinstance(structured, dict) or (streamed and not deltas):
                raise RuntimeError(f"models_invoke failed: {result.content!r:.300}")

        async def direct_streamed() -> None:
            if not await _stream_ends(http, direct):
                raise RuntimeError("a direct stream did not end with message_stop")

        sides: list[
            tuple[
                Callable[[], Awaitable[object]], _ToolSamples, Callable[[], Awaitable[object]], _ToolSamples
            ]
        ] = [
            (lambda: _call(http, direct), found.direct_whole, lambda: tool(False), found.tool_whole),
            (direct_streamed, found.direct_streamed, lambda: tool(True), found.tool_streamed),
        ]
        for base, _, subject, _ in sides:
            for _ in range(3):
                await base()
                await subject()
        for base, base_into, subject, subject_into in sides:
            for i in range(calls):
                pair = ((base, base_into), (subject, subject_into))
                for fn, into in pair if i % 2 == 0 else pair[::-1]:
                    wall, process_cpu, client_cpu = (
                        time.perf_counter_ns(),
                        time.process_time_ns(),
                        time.thread_time_ns(),
                    )
                    await fn()
                    clients = time.thread_time_ns() - client_cpu
                    into.client_cpu.append(clients / 1e6)
                    into.host_cpu.append((time.process_time_ns() - process_cpu - clients) / 1e6)
                    into.wall.append((time.perf_counter_ns() - wall) / 1e6)
    return found

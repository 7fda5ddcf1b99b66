"""startup: how long the host takes to become useful, from a cold process.

- `mcphost run "hello"` wall time on the embedded default (no config file, SQLite under `./.mcphost/`),
  in a folder whose database already exists (warm) and in an empty folder (cold: the database is
  created and migrated first). Baseline: spawning the echo plugin by itself and driving one run over
  stdio (`python -m mcphost_runners.echo`, `initialize`, one `runner/run`, `shutdown`), i.e. a Python process
  start plus the runner's own imports — the floor any host that launches a plugin pays.
- `import mcphost.cli` alone versus a bare interpreter start: how much of both is imports.
- `mcphost --help` and `mcphost --version` (the console script) versus a bare interpreter start, each
  alternated with it in the same run: the ratio a person feels when asking the CLI what it can do (the
  target is 4x; the parser imports nothing of the server until a command runs).
- `mcphost-bridge` (`python -m mcphost_bridge`) to its first answer, in both protocol eras (`initialize`, and
  `server/discover` with the 2026-07-28 envelope), versus a bare interpreter start: from spawn to the
  answer's line on its stdout, against a stub endpoint in this process that answers at once (so the time
  is the bridge's). Clients drop a stdio server that is not up within about a second; the target is
  0.4 s on an idle machine.
- `mcphost serve` to the first served request (`GET /healthz` answered 200), versus a bare Starlette
  app under uvicorn in a fresh process answering the same request.

- The start-up targets, each a same-run ratio of medians against a bare import of what the command needs,
  alternated with it (ABBA): cold `mcphost run hello` (new folder) ≤ 2x `python -c "import mcp"`;
  `mcphost send hello --url` against a stub that answers at once (so the time is the client's) ≤ 3x
  `python -c "import httpx2"`; `mcphost serve` to its first `GET /healthz` 200 ≤ 1.5x `import mcp`;
  `python -c "import mcphost.app"` ≤ 1.2x `import mcp`.
- The stack's floor, beside them: `python -c` importing only the libraries any run or server of this
  design needs before a line of mcphost runs (SQLAlchemy's asyncio engine and the SQLite driver, the MCP
  server, uvicorn and Starlette), against the same `import mcp`. No target: it shows how much of the `run`
  and `serve` ratios is the stack's, and whether a target sits below it.

Every subject runs in a subprocess with `MCPHOST_*` variables removed, so it sees the embedded default.
Bytecode first: the benchmark compiles the environment's packages and the repository's (`compileall`,
a no-op when current) before measuring, because a machine with `PYTHONDONTWRITEBYTECODE=1` (CI's kind)
never caches it on import, and every sample would measure the bytecode compiler instead of the start-up
a user sees from the second command on (SQLAlchemy alone: 0.99 s of CPU from source, 0.35 s cached).
No warm-up rounds: each round is a cold `mcphost run` in a new folder, then a warm one in the same
folder, so the cold one also warms the OS caches for the warm one.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import AsyncGenerator, Generator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2

from bench._alternate import Samples, alternate
from bench._config import BenchConfig
from bench._host import baseline_context
from bench._stats import Row, Stat, judge
from bench._stdio import StdioDriver

NAME = "startup"
BIN = Path(sys.executable).parent
READY_TIMEOUT_S = 60.0
_REPO = Path(__file__).resolve().parent.parent
_BARE_APP = """
import sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
async def healthz(request): return JSONResponse({"status": "ok"})
uvicorn.run(Starlette(routes=[Route("/healthz", healthz)]), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def clean_env() -> dict[str, str]:
    """This process's environment without `MCPHOST_*`, so a child host uses the embedded default."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MCPHOST_")}


async def _has_serve() -> bool:
    probe = await anyio.run_process([str(BIN / "mcphost"), "serve", "--help"], env=clean_env(), check=False)
    return probe.returncode == 0


async def _echo_once() -> list[float]:
    start = time.perf_counter_ns()
    async with StdioDriver.open() as driver:
        results = await driver.run("default", baseline_context("hello", "startup"))
    elapsed = (time.perf_counter_ns() - start) / 1e6
    if not results or results[-1].get("type") != "run.completed":
        raise RuntimeError(f"the echo plugin did not complete a run: {results[-1:]!r}")
    return [elapsed]


async def _mcphost_run(cwd: Path) -> float:
    start = time.perf_counter_ns()
    result = await anyio.run_process(
        [str(BIN / "mcphost"), "run", "hello"], cwd=cwd, env=clean_env(), check=False
    )
    elapsed = (time.perf_counter_ns() - start) / 1e6
    if result.returncode != 0 or b"hello" not in result.stdout:
        raise RuntimeError(
            f"`mcphost run hello` exited {result.returncode}: {result.stderr.decode(errors='replace')[-2000:]}"
        )
    return elapsed


class _StubEndpoint(BaseHTTPRequestHandler):
    """Answers `initialize` and `server/discover` at once (JSON bodies), like a Streamable HTTP endpoint."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        result: dict[str, Any]
        if request.get("method") == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stub", "version": "0"},
            }
        else:
            result = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}
        body = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "result": result}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        if request.get("method") == "initialize":
            self.send_header("mcp-session-id", "bench")
        self.end_headers()
        self.wfile.write(body)

    def do_DELETE(self) -> None:
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _stub_server(handler: type[BaseHTTPRequestHandler]) -> Generator[str]:
    """`handler` served on a loopback port in a thread; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def _stub_endpoint() -> Generator[str]:
    with _stub_server(_StubEndpoint) as url:
        yield f"{url}/mcp"


_OPENING = {
    "initialize": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
    "server/discover": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
}


async def _bridge_first_answer_ms(url: str, method: str) -> float:
    """Spawn the bridge, write the opening message; ms from spawn to the answer's line on stdout."""
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": _OPENING[method]}).encode()
    start = time.perf_counter_ns()
    async with await anyio.open_process(
        [sys.executable, "-m", "mcphost_bridge", "--url", url],
        env={**clean_env(), "MCPHOST_RUN_TOKEN": "bench"},
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        await process.stdin.send(line + b"\n")
        answer = b""
        with anyio.fail_after(READY_TIMEOUT_S):
            while b"\n" not in answer:
                answer += await process.stdout.receive()
        elapsed = (time.perf_counter_ns() - start) / 1e6
        if b'"result"' not in answer:
            raise RuntimeError(f"the bridge answered {method} with {answer[:500]!r}")
        await process.stdin.aclose()
        with anyio.fail_after(READY_TIMEOUT_S):
            await process.wait()
    return elapsed


async def _python_ms(code: str) -> float:
    start = time.perf_counter_ns()
    await anyio.run_process([sys.executable, "-c", code], env=clean_env())
    return (time.perf_counter_ns() - start) / 1e6


async def _console_ms(flag: str) -> float:
    start = time.perf_counter_ns()
    await anyio.run_process([str(BIN / "mcphost"), flag], env=clean_env())
    return (time.perf_counter_ns() - start) / 1e6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _first_request(argv: list[str], port: int, cwd: Path) -> float:
    """Spawn `argv`, poll GET /healthz until it answers 200; ms from spawn to that answer. Stops it."""
    start = time.perf_counter_ns()
    process = await anyio.open_process(argv, cwd=cwd, env=clean_env(), stdout=None, stderr=None)
    try:
        async with httpx2.AsyncClient(timeout=1.0) as client:
            with anyio.fail_after(READY_TIMEOUT_S):
                while True:
                    try:
                        response = await client.get(f"http://127.0.0.1:{port}/healthz")
                        if response.status_code == 200:
                            return (time.perf_counter_ns() - start) / 1e6
                    except httpx2.TransportError:
                        pass
                    if process.returncode is not None:
                        raise RuntimeError(f"{argv[:3]} exited {process.returncode} before serving")
                    await anyio.sleep(0.005)
    finally:
        with anyio.CancelScope(shield=True):
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
            await process.aclose()


class _StubApi(BaseHTTPRequestHandler):
    """Answers `POST /v1/events?stream=true` at once with a completed run's result stream (SSE)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = (
            b'event: run\ndata: {"run_id": "run_bench"}\n\n'
            b'id: 1\nevent: result\ndata: {"seq": 1, "type": "run.completed", "data": {"message": '
            b'{"role": "assistant", "content": "hello"}}}\n\n'
            b'event: end\ndata: {"status": "completed"}\n\n'
        )
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


async def _send_ms(url: str, cwd: Path) -> float:
    start = time.perf_counter_ns()
    result = await anyio.run_process(
        [str(BIN / "mcphost"), "send", "hello", "--url", url], cwd=cwd, env=clean_env(), check=False
    )
    elapsed = (time.perf_counter_ns() - start) / 1e6
    if result.returncode != 0 or b"hello" not in result.stdout:
        raise RuntimeError(
            f"`mcphost send` exited {result.returncode}: {result.stderr.decode(errors='replace')[-2000:]}"
        )
    return elapsed


_TARGETS = {"run": 2.0, "send": 3.0, "serve": 1.5, "import": 1.2}
"""Start-up targets: at most this many times the bare import of what the command needs (same-run medians)."""


def _target_row(case: str, baseline_label: str, subject_label: str, samples: Samples, target: float) -> Row:
    row = Row(
        benchmark=NAME,
        case=case,
        baseline_label=baseline_label,
        subject_label=subject_label,
        baseline=Stat.of(samples.baseline, "ms"),
        subject=Stat.of(samples.subject, "ms"),
        target=f"≤ {target:g}x the bare import",
    )
    ratio = row.ratio
    return replace(row, verdict=judge(ratio is not None and ratio <= target))


async def _targets(rounds: int, scratch: Path, warm_dir: Path, serve: bool) -> list[Row]:
    """The start-up targets, each subject alternated with the bare import it is held to."""

    async def import_mcp() -> list[float]:
        return [await _python_ms("import mcp")]

    async def import_httpx() -> list[float]:
        return [await _python_ms("import httpx2")]

    async def import_app() -> list[float]:
        return [await _python_ms("import mcphost.app")]

    counter = iter(range(10**6))

    async def cold_run() -> list[float]:
        folder = scratch / f"target-cold-{next(counter)}"
        folder.mkdir()
        try:
            return [await _mcphost_run(folder)]
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    rows: list[Row] = []
    samples = await alternate(import_mcp, cold_run, rounds=rounds, warmup=0, min_rounds=1)
    rows.append(
        _target_row(
            "target: cold mcphost run hello",
            "`python -c 'import mcp'`",
            "`mcphost run hello`, new folder",
            samples,
            _TARGETS["run"],
        )
    )
    with _stub_server(_StubApi) as url:

        async def send() -> list[float]:
            return [await _send_ms(url, warm_dir)]

        samples = await alternate(import_httpx, send, rounds=rounds, warmup=0, min_rounds=1)
    rows.append(
        _target_row(
            "target: mcphost send",
            "`python -c 'import httpx2'`",
            "`mcphost send hello --url` (stub API)",
            samples,
            _TARGETS["send"],
        )
    )
    if serve:

        async def served() -> list[float]:
            return [await _serve_ms(warm_dir)]

        samples = await alternate(import_mcp, served, rounds=rounds, warmup=0, min_rounds=1)
        rows.append(
            _target_row(
                "target: mcphost serve healthy",
                "`python -c 'import mcp'`",
                "`mcphost serve`, GET /healthz 200",
                samples,
                _TARGETS["serve"],
            )
        )
    samples = await alternate(import_mcp, import_app, rounds=rounds, warmup=0, min_rounds=1)
    rows.append(
        _target_row(
            "target: import mcphost.app",
            "`python -c 'import mcp'`",
            "`python -c 'import mcphost.app'`",
            samples,
            _TARGETS["import"],
        )
    )

    async def import_stack() -> list[float]:
        return [await _python_ms(_STACK)]

    samples = await alternate(import_mcp, import_stack, rounds=rounds, warmup=0, min_rounds=1)
    rows.append(
        Row(
            benchmark=NAME,
            case="floor: the stack's imports (no target)",
            baseline_label="`python -c 'import mcp'`",
            subject_label="`python -c` importing SQLAlchemy asyncio + aiosqlite + mcp.server + uvicorn + Starlette",
            baseline=Stat.of(samples.baseline, "ms"),
            subject=Stat.of(samples.subject, "ms"),
        )
    )
    return rows


_STACK = "import sqlalchemy.ext.asyncio, aiosqlite, mcp.server.lowlevel, uvicorn, starlette.applications"
"""What any run or server of this design imports before a line of mcphost runs: the floor of `run`/`serve`."""


async def _serve_ms(cwd: Path) -> float:
    """`mcphost serve` in `cwd` on a free port: ms from spawn to its first `GET /healthz` 200."""
    port = free_port()
    return await _first_request([str(BIN / "mcphost"), "serve", "--listen", f"127.0.0.1:{port}"], port, cwd)


@asynccontextmanager
async def scratch_folder(
    root: Path | None, prefix: str = "mcphost-bench-startup-"
) -> AsyncGenerator[Path, None]:
    """A fresh temporary folder under `root` (default: the system's), removed on exit."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _compile_bytecode() -> None:
    """Bytecode for every package the subjects and baselines import (see the module docstring)."""
    folders = [sysconfig.get_paths()["purelib"]]
    folders += [str(_REPO / name) for name in ("mcphost", "mcphost_runners", "mcphost_bridge")]
    await anyio.run_process([sys.executable, "-m", "compileall", "-q", "-j", "0", *folders], check=True)


async def run(cfg: BenchConfig) -> list[Row]:
    rounds = cfg.sizes.startup_rounds
    rows: list[Row] = []
    await _compile_bytecode()
    async with scratch_folder(cfg.tmp_root) as scratch:
        # Each round: a fresh folder, `mcphost run` in it twice (cold: the database is created and
        # migrated; then warm), each next to a baseline sample, in alternating order.
        cold, warm = Samples([], [], 0), Samples([], [], 0)
        for i in range(rounds):
            folder = scratch / f"round-{i}"
            folder.mkdir()
            for samples in (cold, warm):
                if i % 2 == 0:
                    samples.baseline.extend(await _echo_once())
                    samples.subject.append(await _mcphost_run(folder))
                else:
                    samples.subject.append(await _mcphost_run(folder))
                    samples.baseline.extend(await _echo_once())
            if i < rounds - 1:
                shutil.rmtree(folder, ignore_errors=True)
        warm_dir = scratch / f"round-{rounds - 1}"
        for case, samples in (("warm ./.mcphost/", warm), ("cold: empty folder", cold)):
            rows.append(
                Row(
                    benchmark=NAME,
                    case=f"mcphost run hello, {case}",
                    baseline_label="spawn echo plugin + 1 run",
                    subject_label="`mcphost run hello` wall",
                    baseline=Stat.of(samples.baseline, "ms"),
                    subject=Stat.of(samples.subject, "ms"),
                )
            )

        async def bare_python() -> list[float]:
            return [await _python_ms("pass")]

        async def import_cli() -> list[float]:
            return [await _python_ms("import mcphost.cli")]

        samples = await alternate(bare_python, import_cli, rounds=rounds, warmup=0, min_rounds=1)
        rows.append(
            Row(
                benchmark=NAME,
                case="import mcphost.cli (part of both above)",
                baseline_label="`python -c pass`",
                subject_label="`python -c 'import mcphost.cli'`",
                baseline=Stat.of(samples.baseline, "ms"),
                subject=Stat.of(samples.subject, "ms"),
            )
        )

        for flag in ("--help", "--version"):

            async def cli_flag(flag: str = flag) -> list[float]:
                return [await _console_ms(flag)]

            samples = await alternate(bare_python, cli_flag, rounds=rounds, warmup=0, min_rounds=1)
            rows.append(
                Row(
                    benchmark=NAME,
                    case=f"mcphost {flag}",
                    baseline_label="`python -c pass`",
                    subject_label=f"`mcphost {flag}` wall",
                    baseline=Stat.of(samples.baseline, "ms"),
                    subject=Stat.of(samples.subject, "ms"),
                )
            )

        with _stub_endpoint() as url:
            for method, era in (("initialize", "2025-11-25"), ("server/discover", "2026-07-28")):

                async def bridge_answer(method: str = method) -> list[float]:
                    return [await _bridge_first_answer_ms(url, method)]

                samples = await alternate(bare_python, bridge_answer, rounds=rounds, warmup=0, min_rounds=1)
                rows.append(
                    Row(
                        benchmark=NAME,
                        case=f"mcphost-bridge → first answer, {era} (`{method}`)",
                        baseline_label="`python -c pass`",
                        subject_label="`python -m mcphost_bridge`, spawn to answer line",
                        baseline=Stat.of(samples.baseline, "ms"),
                        subject=Stat.of(samples.subject, "ms"),
                    )
                )

        has_serve = await _has_serve()
        rows.extend(await _targets(rounds, scratch, warm_dir, has_serve))
        if not has_serve:
            cfg.skipped.append("startup / serve: `mcphost serve` is not in this build")
            return rows

        async def bare() -> list[float]:
            port = free_port()
            return [await _first_request([sys.executable, "-c", _BARE_APP, str(port)], port, scratch)]

        async def served() -> list[float]:
            return [await _serve_ms(warm_dir)]

        samples = await alternate(bare, served, rounds=rounds, warmup=0, min_rounds=1)
        rows.append(
            Row(
                benchmark=NAME,
                case="mcphost serve → first request",
                baseline_label="bare Starlette+uvicorn process",
                subject_label="`mcphost serve`, GET /healthz 200",
                baseline=Stat.of(samples.baseline, "ms"),
                subject=Stat.of(samples.subject, "ms"),
            )
        )
    return rows

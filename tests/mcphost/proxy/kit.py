"""Test helpers: a `ModelProxy` served under uvicorn on 127.0.0.1 over real stores, and granted runs.

A run is admitted the way the orchestrator admits one (`tests.mcphost.facts._helpers.admit_run`), with a
manifest that declares `permissions.models` and an agent whose `resources.models` names host models.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
from starlette.applications import Starlette

from mcphost.llm import ModelConfig
from mcphost.protocol import JSONObject
from mcphost.proxy import ModelProxy
from mcphost.proxy.server import RunTrace
from mcphost.recording import DocumentCall, RecordingDocument, ReplayBook
from mcphost.stores import Stores
from mcphost.stores.recordings import RecordedCall, RecordingHeader
from mcphost.stores.usage import ModelBudget
from mcphost.warm import WarmSessions
from tests.fakes._serve import serve_loopback
from tests.mcphost.facts._helpers import FULL_PERMISSIONS, RunHandle, admit_run

HOST_KEY_ENV = "MCPHOST_TEST_PROVIDER_KEY"
HOST_KEY = "sk-host-secret-never-in-a-runner"


def claude(base_url: str, **kw: object) -> ModelConfig:
    """An Anthropic model entry on `base_url` with the host key's variable."""
    return ModelConfig.model_validate(
        {
            "provider": "anthropic",
            "base_url": base_url,
            "api_key_env": HOST_KEY_ENV,
            "model": "claude-sonnet-4-5",
            **kw,
        }
    )


def chat(base_url: str, model: str = "m1", **kw: object) -> ModelConfig:
    """An OpenAI-compatible model entry on `base_url` (upstream name `model`) with the host key's variable."""
    return ModelConfig.model_validate(
        {
            "provider": "openai-compatible",
            "base_url": base_url,
            "api_key_env": HOST_KEY_ENV,
            "model": model,
            **kw,
        }
    )


@dataclass
class ServedProxy:
    stores: Stores
    proxy: ModelProxy
    base_url: str
    calls: list[tuple[str, str, tuple[int, int, int], float]]

    async def start_run(self, models: list[str], calls: list[str] | None = None, **options: Any) -> RunHandle:
        permissions: JSONObject = {**FULL_PERMISSIONS, "models": calls or ["invoke", "stream"]}
        agent: JSONObject = {"resources": {"knowledge_bases": ["kb-docs"], "models": models}}
        return await admit_run(
            self.stores, base_url=self.base_url, permissions=permissions, agent=agent, **options
        )

    def anthropic(self, run: RunHandle) -> str:
        return f"{self.base_url}/runs/{run.run_id}/models/anthropic"

    def openai(self, run: RunHandle) -> str:
        return f"{self.base_url}/runs/{run.run_id}/models/openai/v1"


@asynccontextmanager
async def serve_proxy(
    stores: Stores,
    models: Mapping[str, ModelConfig],
    *,
    budgets: Mapping[str, ModelBudget] | None = None,
    replay: ReplayBook | None = None,
    warm: WarmSessions | None = None,
    run_trace: RunTrace | None = None,
) -> AsyncGenerator[ServedProxy]:
    calls: list[tuple[str, str, tuple[int, int, int], float]] = []

    def on_call(model_id: str, agent_id: str, tokens: tuple[int, int, int], cost: float) -> None:
        calls.append((model_id, agent_id, tokens, cost))

    proxy = ModelProxy(
        stores, models, budgets=budgets, on_call=on_call, replay=replay, warm=warm, run_trace=run_trace
    )
    async with proxy.running(), serve_loopback(Starlette(routes=proxy.routes)) as url:
        yield ServedProxy(stores, proxy, url, calls)


def client(token: str | None, *, bearer: bool = False) -> httpx2.AsyncClient:
    headers = (
        {} if token is None else ({"authorization": f"Bearer {token}"} if bearer else {"x-api-key": token})
    )
    return httpx2.AsyncClient(headers=headers, timeout=30, trust_env=False)


def sse_events(text: str) -> list[tuple[str | None, str]]:
    """(event, data) of each server-sent event in `text`."""
    found: list[tuple[str | None, str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        if not block.strip():
            continue
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        found.append((name, "\n".join(data)))
    return found


async def begin_recording(stores: Stores, run_id: str) -> None:
    """The recording header of a run admitted with `record` (the orchestrator writes it as a run starts)."""
    await stores.recordings.begin(
        RecordingHeader(run_id=run_id, agent_id="agent-a", runner_id="r", envelope={}, context={}, agent={})
    )


def book_of(calls: Sequence[RecordedCall]) -> ReplayBook:
    """A replay's book of `calls` as a run's recording holds them (`mcphost replay` reads the same)."""
    return ReplayBook(
        RecordingDocument(
            run_id="run_recorded",
            agent_id="agent-a",
            runner_id="r",
            status="completed",
            envelope={},
            context={},
            agent={},
            calls=[
                DocumentCall(
                    seq=c.seq, tool=c.tool, arguments=c.arguments, outcome=c.outcome, answer=c.answer
                )
                for c in calls
            ],
            results=[],
        )
    )

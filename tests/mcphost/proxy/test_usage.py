"""Usage totals: `GET /v1/usage` (role reader) and `mcphost usage` over the calls the model endpoints made."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from mcphost.app import open_host
from mcphost.cli import main
from mcphost.llm import ModelConfig
from mcphost.stores import Stores
from mcphost.stores.usage import AttemptEnd, CallStart, FinishedCall, ModelBudget
from tests.e2e.httpkit import api_settings, asgi_client
from tests.fakes.openai_chat import Reply, serve_fake_chat
from tests.mcphost.proxy.kit import client, serve_proxy


def model(base_url: str, name: str) -> ModelConfig:
    return ModelConfig(
        provider="openai-compatible",
        base_url=base_url,
        model=name,
        input_usd_per_mtok=500_000,  # 0.5 USD per input token, 1 USD per output token
        output_usd_per_mtok=1_000_000,
    )


async def make_calls(stores: Stores) -> None:
    async with serve_fake_chat() as upstream:
        upstream.script("m1", Reply(json_body=True, usage=(3, 1)), Reply(json_body=True, usage=(5, 2)))
        upstream.script("m2", Reply(status=400, error="no"))
        models = {"a": model(upstream.base_url, "m1"), "b": model(upstream.base_url, "m2")}
        async with serve_proxy(stores, models) as served:
            first = await served.start_run(["a", "b"], actor_id="ann")
            second = await served.start_run(["a"], actor_id="bob", conversation_id="conv-2")
            for run, model_id in ((first, "a"), (second, "a"), (first, "b")):
                async with client(run.token, bearer=True) as http:
                    await http.post(
                        f"{served.openai(run)}/chat/completions", json={"model": model_id, "messages": []}
                    )


async def test_usage_totals_by_model_actor_and_day_over_the_api_and_the_cli(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = api_settings(database_url, tmp_path / "data")
    async with open_host(settings) as host:
        await make_calls(host.stores)
        async with asgi_client(host) as http:
            by_model = (await http.get("/v1/usage", params={"group_by": "model"})).json()
            by_actor = (await http.get("/v1/usage", params={"group_by": "actor"})).json()
            by_day = (
                await http.get("/v1/usage", params={"group_by": "day", "from": "2000-01-01T00:00:00Z"})
            ).json()
            later = (
                await http.get("/v1/usage", params={"group_by": "day", "from": "2999-01-01T00:00:00Z"})
            ).json()
            bad = await http.get("/v1/usage", params={"group_by": "planet"})
            stale = await http.get("/v1/usage", params={"group_by": "model", "to": "not a time"})
    assert by_model["totals"] == [
        {
            "key": "a",
            "calls": 2,
            "failed": 0,
            "input_tokens": 8,
            "output_tokens": 3,
            "cached_tokens": 0,
            "cost_usd": 7.0,
        },
        {
            "key": "b",
            "calls": 1,
            "failed": 1,
            "input_tokens": 0,
            "output_tokens": 0,
            "cached_tokens": 0,
            "cost_usd": 0.0,
        },
    ]
    assert [(t["key"], t["calls"], t["cost_usd"]) for t in by_actor["totals"]] == [
        ("bob", 1, 4.5),
        ("ann", 2, 2.5),
    ]
    [day] = by_day["totals"]
    assert (day["calls"], day["cost_usd"]) == (3, 7.0)
    assert later["totals"] == []
    assert bad.status_code == 400
    assert stale.status_code == 400
    argv = ["usage", "--by", "agent", "--json", "--config", _config(tmp_path, database_url)]
    assert await anyio.to_thread.run_sync(main, argv) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert json.loads(line)["totals"] == [
        {
            "key": "agent-a",
            "calls": 3,
            "failed": 1,
            "input_tokens": 8,
            "output_tokens": 3,
            "cached_tokens": 0,
            "cost_usd": 7.0,
        }
    ]


def _config(tmp_path: Path, database_url: str) -> str:
    path = tmp_path / "mcphost.toml"
    path.write_text(
        f'[host]\ndatabase_url = "{database_url}"\ndata_dir = "{tmp_path / "cli"}"\nbundled_plugins = false\n'
    )
    return str(path)


async def test_a_reader_key_may_read_usage_and_no_key_may_not(database_url: str, tmp_path: Path) -> None:
    settings = api_settings(database_url, tmp_path / "data", api_key="admin-key-0123456789abcdef")
    async with open_host(settings) as host, asgi_client(host) as http:
        refused = await http.get("/v1/usage", headers={"authorization": ""})
        allowed = await http.get("/v1/usage", headers={"authorization": "Bearer admin-key-0123456789abcdef"})
    assert refused.status_code == 401
    assert allowed.status_code == 200
    assert allowed.json() == {"group_by": "model", "totals": []}


async def test_a_runs_model_calls_are_listed_a_row_per_attempt_fallbacks_included(
    database_url: str, tmp_path: Path
) -> None:
    settings = api_settings(database_url, tmp_path / "data")
    async with open_host(settings) as host, serve_fake_chat() as upstream:
        upstream.script("m1", Reply(status=503, error="overloaded"))
        upstream.script("m2", Reply(json_body=True, usage=(3, 1)))
        primary = model(upstream.base_url, "m1").model_copy(update={"fallback": ["backup"]})
        models = {"primary": primary, "backup": model(upstream.base_url, "m2")}
        async with serve_proxy(host.stores, models) as served:
            run = await served.start_run(["primary", "backup"])
            other = await served.start_run(["backup"])
            async with client(run.token, bearer=True) as http:
                answer = await http.post(
                    f"{served.openai(run)}/chat/completions", json={"model": "primary", "messages": []}
                )
            assert answer.status_code == 200, answer.text
        async with asgi_client(host) as http:
            listed = await http.get(f"/v1/runs/{run.run_id}/usage")
            quiet = await http.get(f"/v1/runs/{other.run_id}/usage")
            unknown = await http.get("/v1/runs/run_nobody/usage")
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert body["run_id"] == run.run_id
    rows = [
        (r["attempt"], r["model_id"], r["upstream_model"], r["status"], r["http_status"], r["input_tokens"])
        for r in body["items"]
    ]
    assert rows == [(1, "primary", "m1", "failed", 503, 0), (2, "backup", "m2", "ok", 200, 3)]
    failed, ok = body["items"]
    assert ok["cost_usd"] == 2.5  # 3 input tokens at 0.5 USD, 1 output token at 1 USD
    assert ok["latency_ms"] is not None
    assert failed["latency_ms"] is not None  # until the fallback started: the run's timeline places it
    assert failed["latency_ms"] > 0
    assert ok["created_at_iso"].endswith("Z")
    assert quiet.json() == {"run_id": other.run_id, "items": []}
    assert unknown.status_code == 404


async def test_a_reservation_and_a_usage_batch_are_one_transaction_each_on_sqlite_the_writers(
    stores: Stores,
) -> None:
    """The model calls' two writes are hot-path transactions: one each, whatever the batch's size, and on
    a SQLite file on the writer's connection (`Database.run_write`), never through aiosqlite."""
    begun: list[object] = []
    statements: list[str] = []

    def begin(conn: Any) -> None:
        begun.append(conn.engine)

    def statement(_conn: object, _cursor: object, sql: str, *_: object) -> None:
        if not sql.startswith(("BEGIN", "PRAGMA")):
            statements.append(sql.split()[0])

    start = CallStart(
        run_id="run_usage_hops",
        agent_id="agent-a",
        actor_id="ann",
        conversation_id="conv-1",
        model_id="a",
        upstream_model="m1",
        kind="chat",
        api="chat",
        streamed=False,
        reserved_tokens=100,
        reserved_usd=0.01,
    )
    ok = AttemptEnd(
        model_id="a", upstream_model="m1", attempt=1, status="ok", input_tokens=3, output_tokens=1
    )
    with stores.db.hooks.added("begin", begin), stores.db.hooks.added("before_cursor_execute", statement):
        call_id = await stores.usage.reserve(start, ModelBudget(model_usd_per_day=5.0))
        reserved = len(begun)
        now = time.time()
        await stores.usage.record(
            [FinishedCall(start=start, call_id=call_id, created_at=now, attempts=(ok,))]
            + [FinishedCall(start=start, call_id=None, created_at=now, attempts=(ok,)) for _ in range(9)]
        )
    assert (reserved, len(begun)) == (1, 2)
    locked = ["SELECT"] if stores.db.dialect == "postgresql" else []  # the agent's advisory lock
    assert statements == [*locked, "SELECT", "INSERT", "UPDATE", "INSERT"]  # held, reserve; finish, 9 rows
    assert begun == [stores.db.sync_engines[-1]] * 2  # SQLite: the writer's; PostgreSQL: the one engine
    rows = await stores.usage.calls("run_usage_hops")
    assert [(r.status, r.input_tokens) for r in rows] == [("ok", 3)] * 10

"""The echo runner, served as `python -m mcphost_runners.echo` exactly as the host launches it."""

from __future__ import annotations

from mcphost.plugins.process import PluginSupervisor
from mcphost.protocol import AgentRunContext, InvalidResult, JSONObject, UnknownResult, classify_result
from mcphost_runners.echo import EchoRunner
from tests.plugins.support import FAST, collect, echo_spec, make_context


async def echo(ctx: AgentRunContext) -> tuple[str, list[JSONObject]]:
    async with PluginSupervisor([echo_spec()], timings=FAST) as supervisor:
        status, results = await collect(supervisor.plugins[0], ctx)
    for result in results:
        assert not isinstance(classify_result(result.obj), (InvalidResult, UnknownResult))
        assert result.obj["run_id"] == ctx.run_id
    return status, [r.obj for r in results]


async def test_echo_streams_replies_counts_the_turn_and_completes() -> None:
    status, results = await echo(make_context("hello there"))
    assert status == "completed"
    assert [(r["type"], r["sequence"]) for r in results] == [
        ("message.delta", 1),
        ("message.completed", 2),
        ("state.updated", 3),
        ("run.completed", 4),
    ]
    assert results[0]["data"]["chunk"]["content"] == "hello there"
    assert results[1]["data"]["message"]["content"] == "hello there"
    assert results[2]["data"] == {"scope": "conversation", "key": "turns", "value": 1}


async def test_echo_continues_the_count_from_the_state_snapshot() -> None:
    _, results = await echo(make_context("again", conversation_state={"turns": 4}))
    [update] = [r for r in results if r["type"] == "state.updated"]
    assert update["data"]["value"] == 5


async def test_echo_does_not_stream_where_the_surface_cannot() -> None:
    _, results = await echo(make_context("plain", streaming=False))
    assert [r["type"] for r in results] == ["message.completed", "state.updated", "run.completed"]


async def test_echo_keeps_no_state_without_a_conversation() -> None:
    _, results = await echo(make_context("scheduled", conversation=False))
    assert [r["type"] for r in results] == ["message.delta", "message.completed", "run.completed"]


def test_echo_declares_what_it_needs() -> None:
    manifest = EchoRunner().manifest(author="mcphost", plugin="echo")
    assert manifest.id == "plugin:mcphost/echo/default"
    assert manifest.permissions.state == ["read", "write"]
    assert manifest.permissions.history == []
    assert manifest.capabilities.streaming

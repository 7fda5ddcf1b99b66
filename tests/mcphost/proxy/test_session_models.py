"""A warm session's model route `/sessions/{session_id}/models/...`: one URL and token across the runs of
a conversation, serving each run's grant, budget, usage rows and recording, refusing between runs in the
wire's own error shape, and taking only the session's token."""

from __future__ import annotations

import anyio
import httpx2
import pytest

from mcphost.models import RunStatus
from mcphost.protocol import AgentRunContext
from mcphost.stores import Stores
from mcphost.stores.recordings import RecordingHeader
from mcphost.stores.usage import ModelBudget
from mcphost.stores.warm import WarmSessionStore
from mcphost.warm import WarmSessions
from tests.fakes.anthropic import INPUT_TOKENS, OUTPUT_TOKENS, fake_anthropic
from tests.fakes.openai_chat import Reply, serve_fake_chat
from tests.fakes.script import Hang, Text, always
from tests.mcphost.facts._helpers import RunHandle
from tests.mcphost.proxy.kit import (
    HOST_KEY,
    HOST_KEY_ENV,
    ServedProxy,
    chat,
    claude,
    client,
    serve_proxy,
    sse_events,
)

SESSION = WarmSessions.session_id("agent-a", "conv-w", None)
ASK = {"model": "sonnet", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
CHAT = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(autouse=True)
def host_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)


async def start_bound(
    served: ServedProxy, warm: WarmSessions, models: list[str], **options: object
) -> RunHandle:
    """A run of the session's conversation whose context offers the session (its start binds it)."""

    def offer(ctx: AgentRunContext) -> AgentRunContext:
        return warm.offer(ctx, agent_id="agent-a", public_url=served.base_url)

    return await served.start_run(models, conversation_id="conv-w", revise=offer, **options)  # pyright: ignore[reportArgumentType] -- test options pass through to admit_run


async def finish(served: ServedProxy, run: RunHandle) -> None:
    """End a run as the orchestrator does: its close settles its usage, its end revokes its grant."""
    await served.proxy.settle(run.run_id)
    await served.stores.runs.transition(run.run_id, RunStatus.COMPLETED)
    await served.proxy.end_run(run.run_id)


def anthropic(served: ServedProxy, session_id: str = SESSION) -> str:
    return f"{served.base_url}/sessions/{session_id}/models/anthropic/v1"


def openai(served: ServedProxy) -> str:
    return f"{served.base_url}/sessions/{SESSION}/models/openai/v1"


async def test_one_session_token_calls_each_runs_model_and_is_refused_between_runs(stores: Stores) -> None:
    warm = await WarmSessions.open(WarmSessionStore(stores.db))
    token = warm.token(SESSION)
    async with (
        fake_anthropic(always(Text("hello"))) as upstream,
        serve_proxy(stores, {"sonnet": claude(upstream.base_url)}, warm=warm) as served,
        client(token) as http,
    ):
        first = await start_bound(served, warm, ["sonnet"])
        answered = await http.post(f"{anthropic(served)}/messages", json=ASK)
        assert answered.status_code == 200, answered.text
        listed = await http.get(f"{anthropic(served)}/models")
        assert [m["id"] for m in listed.json()["data"]] == ["sonnet"]
        await finish(served, first)

        between = await http.post(f"{anthropic(served)}/messages", json=ASK)
        assert between.status_code == 403
        assert between.json()["type"] == "error"
        assert between.json()["error"]["type"] == "permission_error"
        assert "has no run in progress" in between.json()["error"]["message"]

        second = await start_bound(served, warm, ["sonnet"])
        again = await http.post(f"{anthropic(served)}/messages", json={**ASK, "stream": True})
        assert again.status_code == 200, again.text
        await finish(served, second)
        after = await http.post(f"{anthropic(served)}/messages", json=ASK)
    assert after.status_code == 403
    # Each call is a row of the run that was current when it was made; the host's key went upstream.
    first_rows = await stores.usage.calls(first.run_id)
    second_rows = await stores.usage.calls(second.run_id)
    assert [(c.status, c.streamed, c.input_tokens, c.output_tokens) for c in first_rows] == [
        ("ok", False, INPUT_TOKENS, OUTPUT_TOKENS)
    ]
    assert [(c.status, c.streamed) for c in second_rows] == [("ok", True)]
    assert len(upstream.requests) == 2
    assert {r.headers["x-api-key"] for r in upstream.requests} == {HOST_KEY}
    assert token not in str([r.headers for r in upstream.requests])


async def test_the_offered_context_names_the_sessions_model_endpoints(stores: Stores) -> None:
    warm = await WarmSessions.open(WarmSessionStore(stores.db))
    async with serve_proxy(stores, {"sonnet": claude("http://127.0.0.1:9")}, warm=warm) as served:
        run = await start_bound(served, warm, ["sonnet"])
        mcp = run.context.context.mcp
        assert mcp is not None
        assert mcp.session is not None
        assert mcp.session.models is not None
        assert mcp.session.models.anthropic == f"{served.base_url}/sessions/{SESSION}/models/anthropic"
        assert mcp.session.models.openai == f"{served.base_url}/sessions/{SESSION}/models/openai/v1"
        # Without host models the session offers no model endpoints.
        await finish(served, run)
        bare = await start_bound(served, warm, [])
        assert bare.context.context.mcp is not None
        assert bare.context.context.mcp.session is not None
        assert bare.context.context.mcp.session.models is None


async def test_the_current_runs_grant_budget_and_recording_apply(stores: Stores) -> None:
    warm = await WarmSessions.open(WarmSessionStore(stores.db))
    budgets = {"agent-a": ModelBudget(model_tokens_per_run=10)}
    async with (
        serve_fake_chat() as upstream,
        serve_proxy(stores, {"small": chat(upstream.base_url)}, warm=warm) as served,
        client(warm.token(SESSION), bearer=True) as http,
    ):
        upstream.script("m1", Reply(content="recorded answer", usage=(3, 2), json_body=True))
        recorded = await start_bound(served, warm, ["small"], limits={"record": True})
        await stores.recordings.begin(
            RecordingHeader(
                run_id=recorded.run_id, agent_id="agent-a", runner_id="r", envelope={}, context={}, agent={}
            )
        )
        answered = await http.post(f"{openai(served)}/chat/completions", json=CHAT)
        assert answered.status_code == 200, answered.text
        await finish(served, recorded)

        ungranted = await start_bound(served, warm, [])
        refused = await http.post(f"{openai(served)}/chat/completions", json=CHAT)
        await finish(served, ungranted)

    async with serve_proxy(stores, {"small": chat(upstream.base_url)}, warm=warm, budgets=budgets) as served:
        poor = await start_bound(served, warm, ["small"])
        async with client(warm.token(SESSION)) as http:
            spent = await http.post(f"{openai(served)}/chat/completions", json={**CHAT, "max_tokens": 500})
        await finish(served, poor)
    # The recording is the run's that was current.
    [call] = await stores.recordings.calls(recorded.run_id)
    assert call.tool == "models/openai/v1/chat/completions"
    assert call.answer["body"] == answered.json()
    # The grant is the current run's: a run not granted the model is refused in OpenAI's shape.
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "model_not_granted"
    assert "resources.models" in refused.json()["error"]["message"]
    # So is its budget: 429 naming the key, nothing sent upstream, no usage row.
    assert spent.status_code == 429
    assert "model_tokens_per_run" in spent.json()["error"]["message"]
    assert len(upstream.requests) == 1
    assert await stores.usage.calls(ungranted.run_id) == []
    assert await stores.usage.calls(poor.run_id) == []


async def test_only_the_sessions_token_is_taken_and_each_refusal_is_in_the_wires_shape(
    stores: Stores,
) -> None:
    warm = await WarmSessions.open(WarmSessionStore(stores.db))
    other_key = WarmSessions(WarmSessionStore(stores.db), key=b"k" * 32)
    never = WarmSessions.session_id("agent-a", "conv-never", None)
    async with (
        serve_fake_chat() as upstream,
        serve_proxy(
            stores, {"sonnet": claude("http://127.0.0.1:9"), "small": chat(upstream.base_url)}, warm=warm
        ) as served,
    ):
        run = await start_bound(served, warm, ["sonnet", "small"])
        found: dict[str, httpx2.Response] = {}
        for name, token, url in (
            ("missing", None, f"{anthropic(served)}/messages"),
            ("wrong", "mst_nope", f"{anthropic(served)}/messages"),
            ("another key's", other_key.token(SESSION), f"{anthropic(served)}/messages"),
            ("the run's token", run.token, f"{anthropic(served)}/messages"),
            ("another session's", warm.token(never), f"{anthropic(served)}/messages"),
            ("never bound", warm.token(never), f"{anthropic(served, never)}/messages"),
            ("malformed", warm.token(SESSION), f"{anthropic(served, 'ses_x')}/messages"),
            ("session token at the run", warm.token(SESSION), f"{served.anthropic(run)}/v1/messages"),
            ("openai missing", None, f"{openai(served)}/chat/completions"),
        ):
            async with client(token) as http:
                found[name] = await http.post(url, json=ASK if "openai" not in name else CHAT)
        await finish(served, run)
    assert upstream.requests == []
    codes = {name: (r.status_code, r.json()["error"]["type"]) for name, r in found.items()}
    assert codes == {
        "missing": (401, "authentication_error"),
        "wrong": (401, "authentication_error"),
        "another key's": (401, "authentication_error"),
        "the run's token": (401, "authentication_error"),
        "another session's": (401, "authentication_error"),
        "never bound": (403, "permission_error"),
        "malformed": (404, "not_found_error"),
        "session token at the run": (401, "authentication_error"),
        "openai missing": (401, "invalid_request_error"),
    }
    assert "session token" in found["missing"].json()["error"]["message"]
    assert "has no run in progress" in found["never bound"].json()["error"]["message"]
    assert found["openai missing"].json()["error"]["code"] == "invalid_api_key"


async def test_without_warm_sessions_the_route_does_not_exist(stores: Stores) -> None:
    async with (
        serve_proxy(stores, {"sonnet": claude("http://127.0.0.1:9")}) as served,
        client("mst_x") as http,
    ):
        answer = await http.post(f"{anthropic(served)}/messages", json=ASK)
    assert answer.status_code == 404
    assert answer.json()["error"]["type"] == "not_found_error"


async def test_a_stream_in_flight_when_the_current_run_ends_is_closed_as_that_runs(stores: Stores) -> None:
    warm = await WarmSessions.open(WarmSessionStore(stores.db))
    async with (
        fake_anthropic(always(Hang())) as upstream,
        serve_proxy(stores, {"sonnet": claude(upstream.base_url)}, warm=warm) as served,
        client(warm.token(SESSION)) as http,
    ):
        run = await start_bound(served, warm, ["sonnet"])
        received: list[bytes] = []
        with anyio.fail_after(20):
            async with http.stream(
                "POST",
                f"{anthropic(served)}/messages",
                json={**ASK, "stream": True, "tools": [{"name": "t"}]},
            ) as answer:
                chunks = answer.aiter_raw()
                received.append(await anext(chunks))  # message_start: the upstream is now silent
                await finish(served, run)
                received.extend([chunk async for chunk in chunks])
    events = sse_events(b"".join(received).decode())
    assert events[0][0] == "message_start"
    assert events[-1][0] == "error", events
    [call] = await stores.usage.calls(run.run_id)
    assert call.status == "failed"
    assert f"run {run.run_id} ended while model 'sonnet' was streaming" in (call.error or "")


async def test_bad_bodies_and_credentials_at_the_session_route_are_refused_in_the_wires_shape(
    stores: Stores,
) -> None:
    warm = await WarmSessions.open(WarmSessionStore(stores.db))
    token = warm.token(SESSION)
    deep: object = "x"
    for _ in range(200):
        deep = [deep]
    async with (
        serve_fake_chat() as upstream,
        serve_proxy(stores, {"small": chat(upstream.base_url)}, warm=warm) as served,
        client(token) as http,
    ):
        run = await start_bound(served, warm, ["small"])
        url = f"{openai(served)}/chat/completions"
        sent = {
            "not json": await http.post(url, content=b"{nope"),
            "NaN": await http.post(url, content=b'{"model": "small", "temperature": NaN, "messages": []}'),
            "deep": await http.post(url, json={**CHAT, "deep": deep}),
            "huge": await http.post(url, content=b"x" * (33 * 1024 * 1024)),
            "no model": await http.post(url, json={"messages": []}),
            "huge token": await http.post(url, json=CHAT, headers={"x-api-key": "mst_" + "a" * 100_000}),
            "another run's model": await http.post(url, json={**CHAT, "model": "other"}),
        }
        await finish(served, run)
    statuses = {name: (r.status_code, set(r.json()["error"])) for name, r in sent.items()}
    shape = {"message", "type", "param", "code"}
    assert statuses == {
        "not json": (400, shape),
        "NaN": (400, shape),
        "deep": (400, shape),
        "huge": (413, shape),
        "no model": (400, shape),
        "huge token": (401, shape),
        "another run's model": (403, shape),
    }
    assert upstream.requests == []
    assert await stores.usage.calls(run.run_id) == []

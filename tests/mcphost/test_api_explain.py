"""`POST /v1/explain` through the real app over a real host (live plugin manifests), on both stores:
one refusal per layer, the allowed path, bad bodies refused precisely, nothing stored."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcphost.app import Host, open_host
from tests.e2e.httpkit import api_settings, asgi_client, event_body, row_counts
from tests.mcphost.hostkit import MISBEHAVE_RUNNER
from tests.mcphost.test_api import error_of


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:
        yield opened


async def explain(client: httpx2.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/explain", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def test_explain_answers_each_layer_and_the_allowed_path_and_stores_nothing(
    host: Host, client: httpx2.AsyncClient
) -> None:
    before = await row_counts(host.stores)
    # agent `wide` (misbehave runner: state and artifacts only) keeps conversation and actor state
    event = event_body("hi", bot="wide")
    del event["actor"]
    answer = await explain(
        client,
        {
            "event": event,
            "tools": ["state_set", "history_page", "github__issues"],
            "resources": ["mcphost://run/context"],
            "state_scopes": ["actor", "subject"],
        },
    )
    assert (answer["agent"], answer["runner"], answer["binding"]["binding_id"]) == (
        "wide",
        MISBEHAVE_RUNNER,
        "wide",
    )
    assert set(answer) == {"agent", "runner", "binding", "layers", "grant", "checks"}
    assert set(answer["layers"]) == {"manifest", "agent", "event"}
    assert answer["layers"]["manifest"]["permissions"]["state"] == ["read", "write"]
    others = {v["agent"]: v for v in answer["binding"]["agents"] if not v["binds"]}
    assert others["echo"]["why"] == "match.bot_id = 'echo', and the event's bot_id is 'wide'"
    checks = {c["target"]: (c["allowed"], c["layer"]) for c in answer["checks"]}
    assert checks == {
        "tool:state_set": (True, None),
        "tool:history_page": (False, "manifest"),
        "tool:github__issues": (False, "manifest"),
        "resource:mcphost://run/context": (True, None),
        "state:actor:read": (False, "event"),
        "state:actor:write": (False, "event"),
        "state:subject:read": (False, "agent"),
        "state:subject:write": (False, "agent"),
    }
    assert all(c["fix"] for c in answer["checks"] if not c["allowed"])
    assert answer["grant"]["state_write"] == ["actor", "conversation"]
    assert await row_counts(host.stores) == before


async def test_a_tool_marked_ask_is_answered_as_approval(database_url: str, tmp_path: Path) -> None:
    base = api_settings(database_url, tmp_path / "data")
    settings = base.model_copy(
        update={
            "agents": [
                a.model_copy(update={"approvals": {"state_set": "ask"}}) if a.id == "wide" else a
                for a in base.agents
            ]
        }
    )
    async with open_host(settings) as host, asgi_client(host) as client:
        event = event_body("hi", bot="wide")
        answer = await explain(client, {"event": event, "tools": ["state_set", "state_get"]})
    assert [(c["target"], c["allowed"], c["approval"], c["reason"]) for c in answer["checks"]] == [
        (
            "tool:state_set",
            True,
            True,
            "each call waits for a person's decision: [agents.approvals] 'state_set' = \"ask\"",
        ),
        ("tool:state_get", True, False, None),
    ]


async def test_an_event_no_agent_takes_is_answered_with_every_agents_reason(
    client: httpx2.AsyncClient,
) -> None:
    answer = await explain(client, {"event": event_body("hi", bot="nobody"), "tools": ["state_get"]})
    assert (answer["agent"], answer["layers"], answer["grant"]) == (None, None, None)
    assert "No agent is bound" in answer["binding"]["why"]
    assert all(not v["binds"] for v in answer["binding"]["agents"])
    assert answer["checks"][0]["allowed"] is False


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"event": event_body("x"), "tools": ["no_such_tool"]}, "no_such_tool"),
        ({"event": event_body("x"), "state_scopes": ["planet"]}, "state_scopes"),
        ({"event": event_body("x"), "resources": ["file:///etc/passwd"]}, "file:///etc/passwd"),
        ({"event": event_body("x"), "extra": 1}, "extra"),
        ({"event": {"event_type": "bad"}}, "event_type"),
        ({"tools": []}, "event"),
        ({"event": event_body("x"), "tools": ["t"] * 101}, "tools"),
    ],
)
async def test_a_bad_body_is_a_400_naming_what_is_wrong(
    client: httpx2.AsyncClient, body: dict[str, Any], field: str
) -> None:
    error = error_of(await client.post("/v1/explain", json=body), 400, "invalid_argument")
    assert field in json.dumps(error)


async def test_nan_nul_and_an_oversized_body_are_refused(client: httpx2.AsyncClient) -> None:
    nan = b'{"event": {"event_type": "message.received", "data": {"x": NaN}}}'
    error_of(await client.post("/v1/explain", content=nan), 400, "invalid_argument")
    nul = {"event": event_body("x"), "tools": ["state\u0000get"]}
    error_of(await client.post("/v1/explain", json=nul), 400, "invalid_argument")
    huge = (
        b'{"event": {"event_type": "message.received", "input": {"text": "'
        + b"x" * (5 * 1024 * 1024)
        + b'"}}}'
    )
    response = await client.post("/v1/explain", content=huge)
    assert response.status_code == 413, response.text


async def test_the_openapi_document_describes_explain(client: httpx2.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/v1/explain"]["post"]
    assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ExplainRequest"
    )
    assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/Explanation"
    )
    schemas = document["components"]["schemas"]
    assert {"ExplainRequest", "Explanation", "GrantCheck"} <= set(schemas)
    assert schemas["GrantCheck"]["properties"]["layer"]["anyOf"][0]["enum"] == ["manifest", "agent", "event"]

"""API keys with roles through the real app over a real host (SQLite file or PostgreSQL): every route of
the app declares what it requires, every route answers each role as its declaration says (403 naming
the role, 401 without a key unless public), a sender key sees only its own runs (404 for the others),
a sender limited to agents posts only their events, and `[host] public` opens the meta endpoints.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import httpx2
import pytest
from starlette.requests import Request
from starlette.routing import Route

from mcphost.api import openapi
from mcphost.api._routes import _ENDPOINTS  # pyright: ignore[reportPrivateUsage]
from mcphost.app import Host, build_app, open_host
from mcphost.config import ApiKeyConfig, PublicEndpoint, Settings
from mcphost.errors import ConfigError
from mcphost.guard import ROLE_REACHES, Role, api_keys, declared_access
from mcphost.models import RunStatus
from tests.e2e.httpkit import api_settings, asgi_client, event_body, parse_sse, row_counts, wait_status

KEYS: dict[Role, str] = {
    "admin": "admin-key-0123456789",
    "operator": "operator-key-0123456789",
    "reader": "reader-key-0123456789",
    "sender": "sender-a-key-0123456789",
}
SENDER_B = "sender-b-key-0123456789"
LIMITED = "limited-key-0123456789"
KEY_ENV = "MCPHOST_TEST_OPERATOR_KEY"


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def keyed_settings(database_url: str, data_dir: Path, **host: Any) -> Settings:
    """The admin key is `[host] api_key`; the operator's comes from `KEY_ENV`; the others are hashes."""
    base = api_settings(database_url, data_dir, api_key=KEYS["admin"], **host)
    entries = [
        ApiKeyConfig(name="ops", key_env=KEY_ENV, role="operator"),
        ApiKeyConfig(name="ro", key_sha256=sha(KEYS["reader"]), role="reader"),
        ApiKeyConfig(name="sender-a", key_sha256=sha(KEYS["sender"]), role="sender"),
        ApiKeyConfig(name="sender-b", key_sha256=sha(SENDER_B).upper(), role="sender"),
        ApiKeyConfig(name="echo-only", key_sha256=sha(LIMITED), role="sender", agents=["echo"]),
    ]
    return base.model_copy(update={"api_keys": entries})


@pytest.fixture
async def host(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncGenerator[Host]:
    monkeypatch.setenv(KEY_ENV, KEYS["operator"])
    async with open_host(keyed_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient]:
    async with asgi_client(host) as opened:
        yield opened


EXPECTED: dict[str, tuple[str, bool]] = {
    "ingest_event": ("sender", False),
    "receive_hook": ("signed", False),
    "receive_channel": ("signed", False),
    "list_channels": ("reader", False),
    "list_runs": ("reader", True),
    "show_run": ("reader", True),
    "usage": ("reader", False),
    "run_results": ("reader", True),
    "cancel_run": ("operator", True),
    "run_audit": ("reader", False),
    "run_records": ("reader", False),
    "run_usage": ("reader", False),
    "run_runtime": ("reader", False),
    "conversation_transcript": ("reader", False),
    "conversation_events": ("reader", False),
    "list_conversations": ("reader", False),
    "delete_conversation": ("operator", False),
    "list_state": ("reader", False),
    "show_state": ("reader", False),
    "delete_state": ("admin", False),
    "list_schedules": ("reader", False),
    "create_schedule": ("operator", False),
    "show_schedule": ("reader", False),
    "delete_schedule": ("operator", False),
    "pause_schedule": ("operator", False),
    "resume_schedule": ("operator", False),
    "list_deliveries": ("reader", False),
    "redeliver": ("operator", False),
    "list_runtimes": ("operator", False),
    "drain_runtime": ("operator", False),
    "disable_runtime": ("operator", False),
    "enable_runtime": ("operator", False),
    "list_approvals": ("reader", False),
    "show_approval": ("reader", False),
    "decide_approval": ("operator", False),
    "explain_event": ("operator", False),
    "list_agents": ("reader", False),
    "list_knowledge": ("reader", False),
    "search_knowledge": ("reader", False),
    "list_tools": ("reader", False),
    "list_runners": ("reader", False),
    "upload_artifact": ("sender", False),
    "artifact_metadata": ("reader", False),
    "artifact_content": ("reader", False),
    "healthz": ("public", False),
    "metrics": ("reader", False),
    "openapi_document": ("reader", False),
    "docs_page": ("reader", False),
}
"""The policy, operation by operation: (the role it requires, whether a sender may use it on its own
runs). A route added without a line here fails `test_the_declared_roles_are_the_policy`."""


def test_the_declared_roles_are_the_policy() -> None:
    declared = {e.handler.__name__: (e.role, e.own_runs) for e in _ENDPOINTS}
    assert declared == EXPECTED


async def test_every_route_of_the_app_declares_what_it_requires(host: Host) -> None:
    app = build_app(host)
    undeclared = [getattr(r, "path", repr(r)) for r in app.routes if declared_access(r) is None]
    assert undeclared == []
    by_path = {getattr(r, "path", ""): declared_access(r) for r in app.routes}
    assert by_path["/runs/{run_id}/mcp"] == "run-token"
    assert by_path["/sessions/{session_id}/mcp"] == "run-token"
    assert by_path["/sessions/{session_id}/models/anthropic/v1/messages"] == "run-token"
    assert by_path["/sessions/{session_id}/models/openai/v1/chat/completions"] == "run-token"
    assert by_path["/"] == by_path["/console"] == "site"
    # The check finds a route that declares nothing.

    def undeclared_endpoint(request: Request) -> None:
        return None

    assert declared_access(Route("/v1/new", undeclared_endpoint)) is None


def _path(template: str) -> str:
    return re.sub(r"{\w+}", "x", template)


def _expected_forbidden(key_role: Role, role: str, own_runs: bool) -> bool:
    if role in ("public", "signed"):
        return False
    reaches = role in ROLE_REACHES[key_role] or (own_runs and key_role == "sender")
    return not reaches


async def test_every_route_answers_each_role_as_it_declares(host: Host, client: httpx2.AsyncClient) -> None:
    before = await row_counts(host.stores)
    problems: list[str] = []
    for endpoint in _ENDPOINTS:
        path = _path(endpoint.path)
        body = b"{}" if endpoint.method == "POST" else None
        name = f"{endpoint.method} {endpoint.path}"
        public = endpoint.role == "public" or endpoint.public_as in host.settings.host.public

        async def call(headers: dict[str, str]) -> httpx2.Response:
            return await client.request(
                endpoint.method,  # noqa: B023 -- called at once, within this iteration
                path,  # noqa: B023
                content=body,  # noqa: B023
                headers={"content-type": "application/json", "accept": "application/json", **headers},
            )

        for role, key in KEYS.items():
            answer = await call(bearer(key))
            forbidden = _expected_forbidden(role, endpoint.role, endpoint.own_runs)
            if forbidden and not public:
                error: dict[str, Any] = answer.json().get("error", {}) if answer.status_code == 403 else {}
                if (
                    error.get("code") != "unauthorized"
                    or cast(dict[str, Any], error.get("details", {})).get("required_role") != endpoint.role
                ):
                    problems.append(
                        f"{name} as {role}: expected 403 naming {endpoint.role!r}, got {answer.status_code} {answer.text[:200]}"
                    )
                elif f"role {endpoint.role!r}" not in error["message"]:
                    problems.append(
                        f"{name} as {role}: the message does not name the role: {error['message']}"
                    )
            elif answer.status_code in (401, 403):
                problems.append(
                    f"{name} as {role}: expected neither 401 nor 403, got {answer.status_code} {answer.text[:200]}"
                )
        for label, headers in (("a wrong key", bearer("not-a-key")), ("no key", {})):
            answer = await call(headers)
            if endpoint.role == "signed":
                if answer.status_code == 403:
                    problems.append(f"{name} with {label}: a signed route has no role, got 403")
            elif public:
                if answer.status_code in (401, 403):
                    problems.append(f"{name} with {label}: public, got {answer.status_code}")
            elif answer.status_code != 401 or answer.json()["error"]["code"] != "unauthorized":
                problems.append(
                    f"{name} with {label}: expected 401, got {answer.status_code} {answer.text[:200]}"
                )
    assert problems == []
    after = await row_counts(host.stores)
    # Only the allowed uploads stored something (admin's and the sender's empty artifacts).
    assert {t: n for t, n in after.items() if n != before[t]} == {"artifacts": before["artifacts"] + 2}


async def test_a_sender_sees_only_the_runs_its_events_created(host: Host, client: httpx2.AsyncClient) -> None:
    a, b, reader = bearer(KEYS["sender"]), bearer(SENDER_B), bearer(KEYS["reader"])
    posted = await client.post("/v1/events", json=event_body("from a", conversation="ca"), headers=a)
    assert posted.status_code == 202, posted.text
    run_id = posted.json()["run_id"]
    await host.orchestrator.wait(run_id)
    stored = await host.stores.runs.get(run_id)
    assert stored.created_by == "sender-a"
    streamed = await client.post(
        "/v1/events?stream=true", json=event_body("from b", conversation="cb"), headers=b
    )
    b_run = parse_sse(streamed.text)[0].data["run_id"]
    await host.orchestrator.wait(b_run)

    def ids(response: httpx2.Response) -> list[str]:
        assert response.status_code == 200, response.text
        return [r["run_id"] for r in response.json()["items"]]

    assert ids(await client.get("/v1/runs", headers=a)) == [run_id]
    assert ids(await client.get("/v1/runs", headers=b)) == [b_run]
    assert ids(await client.get("/v1/runs?conversation_id=ca", headers=b)) == []
    assert set(ids(await client.get("/v1/runs", headers=reader))) == {run_id, b_run}
    assert (await client.get(f"/v1/runs/{run_id}", headers=a)).json()["run"]["created_by"] == "sender-a"

    unknown = (await client.get("/v1/runs/run_unknown", headers=b)).json()["error"]
    json_accept = {"accept": "application/json"}
    for method, path, extra in (
        ("GET", f"/v1/runs/{run_id}", {}),
        ("GET", f"/v1/runs/{run_id}/results", json_accept),
        ("GET", f"/v1/runs/{run_id}/results", {"accept": "text/event-stream"}),
        ("POST", f"/v1/runs/{run_id}/cancel", {}),
    ):
        answer = await client.request(method, path, headers={**b, **extra})
        assert answer.status_code == 404, (method, path, answer.text)
        error = answer.json()["error"]  # as for a run that does not exist: the id is not confirmed
        assert error == {**unknown, "message": unknown["message"].replace("run_unknown", run_id)}
        mine = await client.request(method, path, headers={**a, **extra})
        assert mine.status_code in (200, 409), (method, path, mine.text)  # 409: it has ended
    results = (await client.get(f"/v1/runs/{run_id}/results", headers={**a, **json_accept})).json()
    assert results["status"] == "completed"


async def test_a_sender_cannot_take_over_another_keys_event_id(
    host: Host, client: httpx2.AsyncClient
) -> None:
    a, b = bearer(KEYS["sender"]), bearer(SENDER_B)
    first = await client.post("/v1/events", json=event_body("mine", event_id="evt-shared"), headers=a)
    assert first.status_code == 202
    await host.orchestrator.wait(first.json()["run_id"])
    before = await row_counts(host.stores)
    for query in ("", "?stream=true"):
        taken = await client.post(
            f"/v1/events{query}", json=event_body("theirs", event_id="evt-shared"), headers=b
        )
        assert taken.status_code == 409, taken.text
        error = taken.json()["error"]
        assert error["code"] == "conflict"
        assert "taken by another key" in error["message"]
        assert first.json()["run_id"] not in taken.text
    assert await row_counts(host.stores) == before
    again = await client.post("/v1/events", json=event_body("mine", event_id="evt-shared"), headers=a)
    assert (again.status_code, again.json()["created"]) == (202, False)
    admin = await client.post(
        "/v1/events", json=event_body("x", event_id="evt-shared"), headers=bearer(KEYS["admin"])
    )
    assert admin.json()["run_id"] == first.json()["run_id"]  # an admin sees every run


async def test_a_sender_limited_to_agents_posts_only_their_events(
    host: Host, client: httpx2.AsyncClient
) -> None:
    limited = bearer(LIMITED)
    before = await row_counts(host.stores)
    refused = await client.post("/v1/events", json=event_body("x", bot="probe"), headers=limited)
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "unauthorized"
    assert error["details"] == {"key": "echo-only", "agent_id": "probe", "agents": ["echo"]}
    assert await row_counts(host.stores) == before
    allowed = await client.post("/v1/events", json=event_body("hi", bot="echo"), headers=limited)
    assert allowed.status_code == 202, allowed.text
    run = await host.orchestrator.wait(allowed.json()["run_id"])
    assert (run.agent_id, run.created_by, run.status) == ("echo", "echo-only", RunStatus.COMPLETED)
    unbound = await client.post("/v1/events", json=event_body("x", bot="nobody"), headers=limited)
    assert unbound.status_code == 404  # as for any key: no agent takes it


async def test_an_operator_cancels_any_run_and_a_reader_none(host: Host, client: httpx2.AsyncClient) -> None:
    posted = await client.post(
        "/v1/events", json=event_body("slow:30", bot="bad"), headers=bearer(KEYS["sender"])
    )
    run_id = posted.json()["run_id"]
    await wait_status(host.stores, run_id, RunStatus.RUNNING)
    refused = await client.post(f"/v1/runs/{run_id}/cancel", headers=bearer(KEYS["reader"]))
    assert refused.status_code == 403
    assert refused.json()["error"]["details"] == {"required_role": "operator", "key": "ro", "role": "reader"}
    assert (await host.stores.runs.get(run_id)).status is RunStatus.RUNNING
    cancelled = await client.post(f"/v1/runs/{run_id}/cancel", headers=bearer(KEYS["operator"]))
    assert cancelled.status_code == 202, cancelled.text
    assert (await host.orchestrator.wait(run_id)).status is RunStatus.CANCELLED


@pytest.mark.parametrize(
    ("public", "opened"),
    [
        (None, {"/openapi.json", "/docs"}),
        (["metrics"], {"/metrics"}),
        ([], set[str]()),
        (["metrics", "openapi", "docs"], {"/metrics", "/openapi.json", "/docs"}),
    ],
)
async def test_host_public_says_which_meta_endpoints_need_no_key(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    public: list[PublicEndpoint] | None,
    opened: set[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, KEYS["operator"])
    settings = keyed_settings(
        database_url, tmp_path / "data", **({} if public is None else {"public": public})
    )
    async with open_host(settings) as host, asgi_client(host) as client:
        for path in ("/metrics", "/openapi.json", "/docs", "/healthz"):
            answer = await client.get(path)
            if path in opened or path == "/healthz":
                assert answer.status_code == 200, (path, answer.text)
            else:
                assert answer.status_code == 401, (path, answer.text)
                assert (await client.get(path, headers=bearer(KEYS["reader"]))).status_code == 200
                assert (await client.get(path, headers=bearer(KEYS["sender"]))).status_code == 403
                far = {**bearer(KEYS["reader"]), "host": "agents.example.com"}
                assert (await client.get(path, headers=far)).status_code == 401  # Host checked too


async def test_without_keys_every_route_is_open_on_loopback(database_url: str, tmp_path: Path) -> None:
    settings = api_settings(database_url, tmp_path / "data", public=[])
    async with open_host(settings) as host, asgi_client(host) as client:
        assert (await client.get("/metrics")).status_code == 200
        assert (await client.get("/v1/runs")).status_code == 200
        posted = await client.post("/v1/events", json=event_body("hi"))
        run = await host.orchestrator.wait(posted.json()["run_id"])
        assert run.created_by is None


def test_the_document_names_each_operations_role_and_the_scheme_explains_them() -> None:
    doc = openapi()
    scheme = doc["components"]["securitySchemes"]["apiKey"]
    assert scheme["type"] == "http"
    assert "x-mcphost-role" in scheme["description"]
    roles = {
        op["operationId"]: (op["x-mcphost-role"], op.get("x-mcphost-own-runs", False))
        for ops in doc["paths"].values()
        for op in ops.values()
    }
    assert roles == EXPECTED
    metrics = doc["paths"]["/metrics"]["get"]
    assert (metrics["x-mcphost-public"], "security" in metrics) == ("metrics", False)
    assert "403" in metrics["responses"]
    assert "401" in metrics["responses"]
    assert doc["paths"]["/healthz"]["get"]["security"] == []
    assert doc["paths"]["/v1/hooks/{source}"]["post"]["security"] == []


def test_a_key_variable_unset_at_start_is_a_config_error_naming_it(tmp_path: Path) -> None:
    settings = keyed_settings("sqlite+aiosqlite:///unused", tmp_path)
    with pytest.raises(
        ConfigError,
        match=f"api_keys\\[0\\] \\(name 'ops'\\).key_env: the environment variable '{KEY_ENV}' is not set",
    ):
        api_keys(settings, {})
    with pytest.raises(ConfigError, match="is not set"):
        api_keys(settings, {KEY_ENV: "  "})
    clash = {KEY_ENV: KEYS["reader"]}  # the same key as the reader's hash
    with pytest.raises(ConfigError, match="its key is also the key of 'ops'"):
        api_keys(settings, clash)
    keys = api_keys(settings, {KEY_ENV: KEYS["operator"]})
    assert [(k.caller.key, k.caller.role) for k in keys] == [
        ("api_key", "admin"),
        ("ops", "operator"),
        ("ro", "reader"),
        ("sender-a", "sender"),
        ("sender-b", "sender"),
        ("echo-only", "sender"),
    ]
    assert KEYS["operator"] not in repr(keys)
    assert sha(KEYS["reader"]) not in repr(keys)

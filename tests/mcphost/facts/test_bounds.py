"""Every integer argument of every facts tool at and past its bounds, unstorable strings and values, and
cursors carrying positions past 64 bits, through the real MCP client on SQLite and PostgreSQL: each is an
`invalid_argument` tool error naming the field, never a JSON-RPC error or a `runtime_error`, and nothing
is stored.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client

from mcphost.stores._cursor import CursorKind
from tests._json import obj
from tests.mcphost.facts._helpers import MODERN, Served, connect, fails, ok, table_fingerprint
from tests.mcphost.stores.test_cursor import signed_with_the_old_source_key

HUGE: list[Any] = [2**63, 2**64, 10**100, -(2**63) - 1]
NOT_INTEGERS: list[Any] = ["abc", "1e3", 1.5, None, [], {}, "12", True, 10.0]  # JSON types are strict


UNTHROTTLED = {"rate_per_s": 10_000.0, "rate_burst": 10_000}
"""A run here makes ~130 calls back to back, past the default burst of 100 once calls are fast; the
rate limit has tests of its own (test_limits.py, test_scope.py), these are about argument bounds."""


def cursor(served: Served, kind: CursorKind, value: Any) -> str:
    """A cursor the server's own key signed (so only its content can be wrong)."""
    return served.stores.cursors.encode(kind, value)


async def refused(client: Client, tool: str, arguments: dict[str, Any], field: str) -> str:
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, types.CallToolResult)
    data = result.structured_content
    assert result.is_error, (tool, arguments, data)
    data = obj(data)
    assert data["code"] == "invalid_argument", (tool, arguments, data)
    assert field in data["message"], (tool, field, data["message"])
    return str(data["message"])


INTEGER_ARGUMENTS: list[tuple[str, dict[str, Any], str, list[Any]]] = [
    # (tool, other arguments, the integer field, values in its range but at its edges are not listed here)
    ("history_page", {}, "limit", [-1, 0, 101]),
    ("events_page", {}, "limit", [-1, 0, 101]),
    ("history_search", {"query": "apple"}, "top_k", [-1, 0, 51]),
    ("state_list", {"scope": "conversation"}, "limit", [-1, 0, 101]),
    ("storage_list", {"area": "plugin"}, "limit", [-1, 0, 101]),
    ("knowledge_retrieve", {"kb_id": "kb", "query": "q"}, "top_k", [-1, 0, 51]),
    ("artifacts_read", {"artifact_id": "ART"}, "offset", [-1]),
    ("artifacts_read", {"artifact_id": "ART"}, "length", [-1, 0, 1024 * 1024 + 1]),
]


async def test_every_integer_argument_refuses_values_outside_its_range(served: Served) -> None:
    artifact = await served.stores.artifacts.put_bytes(
        b"0123456789", name="n.txt", mime_type="text/plain", max_bytes=1024, conversation_id="conv-1"
    )
    run = await served.start_run(limits=UNTHROTTLED)
    before = await table_fingerprint(served.stores)
    async with connect(served, run, mode=MODERN) as client:
        for tool, others, field, out_of_range in INTEGER_ARGUMENTS:
            base = {k: (artifact.artifact_id if v == "ART" else v) for k, v in others.items()}
            for value in [*out_of_range, *HUGE, *NOT_INTEGERS]:
                await refused(client, tool, {**base, field: value}, field)
        # The edges that are in range answer.
        past = {"artifact_id": artifact.artifact_id, "offset": 2**63 - 1}
        assert "past the end" in await refused(client, "artifacts_read", past, "offset")
        last = await ok(client, "artifacts_read", {"artifact_id": artifact.artifact_id, "offset": 9})
        assert last["eof"] is True
        await ok(client, "history_page", {"limit": 100})
    assert await table_fingerprint(served.stores) == before


async def test_cursors_past_64_bits_are_invalid_argument_not_runtime_error(served: Served) -> None:
    run = await served.start_run(limits=UNTHROTTLED)
    async with connect(served, run, mode=MODERN) as client:
        for value in [-1, *HUGE, "x", 1.5]:
            pairs: list[tuple[str, CursorKind]] = [("history_page", "transcript"), ("events_page", "events")]
            for tool, kind in pairs:
                for name in ("before_cursor", "after_cursor"):
                    message = await refused(client, tool, {name: cursor(served, kind, value)}, "ursor")
                    assert "Malformed" in message, message
        for value in [-1, *HUGE, 1.5, "a\x00b", "\ud800"]:
            keyed: list[tuple[str, dict[str, str], CursorKind]] = [
                ("state_list", {"scope": "conversation"}, "state"),
                ("storage_list", {"area": "plugin"}, "storage"),
            ]
            for tool, extra, kind in keyed:
                await refused(client, tool, {**extra, "cursor": cursor(served, kind, value)}, "cursor")


async def test_a_cursor_forged_with_the_source_code_key_is_refused_before_the_scope_check(
    served: Served,
) -> None:
    await served.stores.transcript.append(conversation_id="other", role="user", content="not yours")
    run = await served.start_run(limits=UNTHROTTLED)
    forged = signed_with_the_old_source_key("transcript", 0)
    foreign = served.stores.cursors.encode("transcript", 1)  # genuine, but another conversation's item
    async with connect(served, run, mode=MODERN) as client:
        message = await refused(client, "history_page", {"after_cursor": forged}, "Malformed")
        assert "returned it" in message
        other = await fails(client, "history_page", {"after_cursor": foreign})
        assert other["code"] == "unauthorized", other


UNSTORABLE: list[tuple[str, dict[str, Any], str]] = [
    ("state_set", {"scope": "conversation", "key": "k", "value": "a\x00b"}, "value"),
    ("state_set", {"scope": "conversation", "key": "k", "value": {"x": ["\x00"]}}, "value.x.0"),
    ("state_set", {"scope": "conversation", "key": "k", "value": {"k\x00": 1}}, "value"),
    ("state_set", {"scope": "conversation", "key": "k", "value": {"n": 2**63}}, "value.n"),
    ("state_set", {"scope": "conversation", "key": "k\x00", "value": 1}, "key"),
    ("storage_set", {"area": "plugin", "key": "k\x00", "value_base64": "AA=="}, "key"),
    ("artifacts_create", {"name": "a.txt", "mime_type": "text/plain", "text": "nul\x00"}, "text"),
    ("artifacts_create", {"name": "a\x00.txt", "mime_type": "text/plain", "text": "x"}, "name"),
    ("history_search", {"query": "apple\x00"}, "query"),
    ("knowledge_retrieve", {"kb_id": "kb", "query": "q", "filters": {"f": 10**100}}, "filters.f"),
    ("events_get", {"event_id": "evt\x00"}, "event_id"),
]


async def test_unstorable_strings_and_values_in_arguments_are_refused_naming_the_field(
    served: Served,
) -> None:
    run = await served.start_run(limits=UNTHROTTLED)
    before = await table_fingerprint(served.stores)
    async with connect(served, run, mode=MODERN) as client:
        for tool, arguments, field in UNSTORABLE:
            await refused(client, tool, arguments, field)
    assert await table_fingerprint(served.stores) == before


async def test_nan_and_infinity_sent_as_raw_json_are_invalid_argument(served: Served) -> None:
    """The SDK client cannot send these (it writes NaN as null): raw JSON-RPC, as Python's json writes it."""
    run = await served.start_run(limits=UNTHROTTLED)
    before = await table_fingerprint(served.stores)
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "authorization": f"Bearer {run.token}",
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    async with httpx2.AsyncClient(timeout=30) as http:
        opened = await http.post(served.url(run.run_id), json=initialize, headers=headers)
        session = {
            **headers,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        await http.post(
            served.url(run.run_id),
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=session,
        )
        for call_id, (tool, arguments, field) in enumerate(
            [
                ("state_set", '{"scope": "conversation", "key": "k", "value": NaN}', "value"),
                ("state_set", '{"scope": "conversation", "key": "k", "value": [1, -Infinity]}', "value.1"),
                ("history_page", '{"limit": Infinity}', "limit"),
                ("artifacts_read", '{"artifact_id": "a", "offset": NaN}', "offset"),
            ],
            start=2,
        ):
            raw = (
                f'{{"jsonrpc": "2.0", "id": {call_id}, "method": "tools/call", '
                f'"params": {{"name": "{tool}", "arguments": {arguments}}}}}'
            )
            response = await http.post(served.url(run.run_id), content=raw, headers=session)
            assert response.status_code == 200, response.text
            text = response.text
            payload = text.split("data: ", 1)[1].split("\n", 1)[0] if "data: " in text else text
            answer = json.loads(payload)
            assert "error" not in answer, answer  # never a JSON-RPC error such as -32603
            result = answer["result"]
            assert result["isError"] is True, result
            assert result["structuredContent"]["code"] == "invalid_argument", result
            assert field in result["structuredContent"]["message"], (field, result)
        # A lone surrogate never reaches a tool: the SDK's JSON reader refuses the whole message
        # (HTTP 400, JSON-RPC -32700 parse error), so it is not an internal error either.
        for call_id, arguments in enumerate(['"\\ud800"', '{"\\udfff": 1}'], start=20):
            raw = (
                f'{{"jsonrpc": "2.0", "id": {call_id}, "method": "tools/call", "params": {{"name": "state_set", '
                f'"arguments": {{"scope": "conversation", "key": "k", "value": {arguments}}}}}}}'
            )
            response = await http.post(served.url(run.run_id), content=raw, headers=session)
            assert response.status_code == 400, response.text
            assert response.json()["error"]["code"] == -32700, response.text
    assert await table_fingerprint(served.stores) == before

"""Every integer argument of every facts tool at and past its bounds, unstorable strings and values, and
cursors carrying positions past 64 bits, through the real MCP client on SQLite and PostgreSQL: each is an
`invalid_argument` tool error naming the field, never a JSON-RPC error or a `runtime_error`, and nothing
is stored.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp import Client

from mcphost.stores._cursor import CursorKind, encode_cursor
from tests.mcphost.facts.conftest import MODERN, Served, connect, ok, table_fingerprint

HUGE: list[Any] = [2**63, 2**64, 10**100, -(2**63) - 1]
NOT_INTEGERS: list[Any] = ["abc", "1e3", 1.5, None, [], {}]


def cursor(served: Served, kind: CursorKind, value: Any) -> str:
    """A cursor the server's own key signed (so only its content can be wrong)."""
    del served
    return encode_cursor(kind, value)


async def refused(client: Client, tool: str, arguments: dict[str, Any], field: str) -> str:
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, types.CallToolResult)
    data = result.structured_content
    assert result.is_error, (tool, arguments, data)
    assert isinstance(data, dict)
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
    run = await served.start_run()
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
    run = await served.start_run()
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
    run = await served.start_run()
    before = await table_fingerprint(served.stores)
    async with connect(served, run, mode=MODERN) as client:
        for tool, arguments, field in UNSTORABLE:
            await refused(client, tool, arguments, field)
    assert await table_fingerprint(served.stores) == before

"""Fuzz every per-run MCP tool, resource and prompt, on SQLite and PostgreSQL.

The strategies come from what the server publishes: `tools/list` gives each tool's `inputSchema`, which
schemathesis turns into arguments that fit it (positive) and arguments that break it (negative) — each
tool is an operation of a small OpenAPI document whose request body is that schema. Hand-written inputs
add what JSON parsers get wrong, sent as raw JSON-RPC bytes so they reach the server unchanged: NaN and
Infinity literals, huge integers, NUL and lone surrogates, deep nesting, oversized strings, and another
run's token.

Each call goes over HTTP to the real facts server (`serve_facts`, uvicorn on a loopback port) and, but
for the raw bytes, through the SDK's `Client`. For every answer:
- never JSON-RPC -32603 (an internal error), never HTTP 5xx, never a traceback;
- a tool error carries a documented code (PROTOCOL §5) other than `runtime_error` (a host failure);
- a refusal (tool error or JSON-RPC error) changes no stored row (the audit log, which records
  refusals by design, aside).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx2
import mcp_types as types
import pytest
import schemathesis
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import encode_header_value
from pydantic import BaseModel
from schemathesis import GenerationMode
from schemathesis.core import NOT_SET

from mcphost.protocol.codes import ERROR_CODES
from mcphost.stores import Stores
from tests._json import obj_or_none
from tests.fuzz._figures import Tally, examples, store_of, tally
from tests.fuzz._rows import changed, fingerprint
from tests.fuzz.test_api_fuzz import RAW_VALUES, operations_of, run_generated
from tests.mcphost.facts._helpers import FULL_PERMISSIONS, LEGACY, RunHandle, Served, connect, serve_facts
from tests.mcphost.facts.scenario import seed

HOST_FAILURES = frozenset({"runtime_error", "storage_unavailable", "storage_full"})
"""§5 codes that mean the host failed, not the caller: a tool answering one fails the suite."""
TOOL_CODES = frozenset(code for code in ERROR_CODES if "." not in code) - HOST_FAILURES
"""PROTOCOL §5 codes a tool may refuse with: the vocabulary without the `runner.*`/`host.*` run-end codes
and without the host failures. `runtime_error` also counts as an internal error."""
INTERNAL_ERROR = -32603
AUDIT = frozenset({"audit"})


@dataclass
class Fixture:
    served: Served
    run: RunHandle
    other: RunHandle
    """A run of another conversation: its token and ids must get nothing from `run`'s endpoint."""
    artifact_id: str
    other_artifact_id: str


@pytest.fixture
async def fuzzed(stores: Stores) -> AsyncGenerator[Fixture, None]:
    async with serve_facts(stores) as served:
        seeded = await seed(served)
        run = await served.start_run(
            permissions=FULL_PERMISSIONS,
            limits={"rate_per_s": 100_000.0, "rate_burst": 100_000},
        )
        other = await served.start_run(conversation_id="conv-other", actor_id="user-2")
        theirs = await stores.artifacts.put_bytes(
            b"not yours", name="x.txt", mime_type="text/plain", max_bytes=1024, conversation_id="conv-other"
        )
        yield Fixture(served, run, other, seeded.conversation_artifact.artifact_id, theirs.artifact_id)


class Caller:
    """Makes one call, checks what came back and the stored rows, and counts it."""

    def __init__(self, fixture: Fixture, client: Client, figures: Tally) -> None:
        self.fixture = fixture
        self.client = client
        self.figures = figures
        self.rows: dict[str, str] | None = None

    @property
    def stores(self) -> Stores:
        return self.fixture.served.stores

    async def call(self, what: str, arguments: Any, send: Callable[[], Any]) -> None:
        """`send()` makes the call; `what` and `arguments` describe it in failures."""
        if self.rows is None:
            self.rows = await fingerprint(self.stores, exclude=AUDIT)
        before = self.rows
        self.figures.tried += 1
        refused = False
        problem: str | None = None
        try:
            result = await send()
        except* ServerError as group:
            refused = True
            self.figures.server_errors += 1
            self.figures.saw("http:5xx")
            problem = str(group.exceptions[0])
        except* MCPError as group:
            error = _first(group)
            refused = True
            self.figures.saw(f"jsonrpc:{error.code}")
            if error.code == INTERNAL_ERROR:
                self.figures.internal_errors += 1
                problem = f"JSON-RPC -32603: {error.message}"
            elif "Traceback" in error.message:
                problem = f"traceback in the error: {error.message}"
        else:
            outcome = _outcome(result)
            if outcome is not None:
                refused = True
                self.figures.saw(f"tool:{outcome}")
                if outcome not in TOOL_CODES:
                    if outcome == "runtime_error":
                        self.figures.internal_errors += 1
                    problem = f"tool error with code {outcome!r}: {_text(result)[:500]}"
            else:
                self.figures.saw("ok")
            if "Traceback" in _text(result):
                problem = "traceback in the answer"
        self.rows = await fingerprint(self.stores, exclude=AUDIT)
        if refused:
            self.figures.refused += 1
            if changed(before, self.rows):
                self.figures.rows_changed_by_refusals += 1
                problem = problem or f"refused, but changed {changed(before, self.rows)}"
        if problem is not None:
            raise AssertionError(f"{what} {_show(arguments)}: {problem}")


def _first(group: BaseExceptionGroup[MCPError]) -> MCPError:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc)
        return exc
    raise AssertionError("an empty exception group")


def _outcome(result: Any) -> str | None:
    """The tool error code of a `CallToolResult` (None when it is no error, or no tool result)."""
    if not isinstance(result, types.CallToolResult) or not result.is_error:
        return None
    data = obj_or_none(result.structured_content)
    return str(data.get("code")) if data is not None else "<no structured content>"


def _text(result: Any) -> str:
    return json.dumps(result.model_dump(mode="json")) if isinstance(result, BaseModel) else str(result)


def _show(arguments: Any) -> str:
    text = json.dumps(arguments, default=repr) if not isinstance(arguments, str) else arguments
    return text if len(text) < 600 else text[:600] + f"… ({len(text)} chars)"


def tools_document(tools: list[types.Tool]) -> dict[str, Any]:
    """An OpenAPI document with one operation per tool, whose request body is the tool's `inputSchema`."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "tools", "version": "0"},
        "paths": {
            f"/{tool.name}": {
                "post": {
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": tool.input_schema}},
                    },
                    "responses": {"200": {"description": "the tool's answer"}},
                }
            }
            for tool in tools
        },
    }


async def test_every_tool_with_arguments_from_its_input_schema(fuzzed: Fixture, database_url: str) -> None:
    figures = tally("mcp", store_of(database_url))
    served, run = fuzzed.served, fuzzed.run
    async with connect(served, run, mode=LEGACY) as client, httpx2.AsyncClient(timeout=30) as http:
        tools = (await client.list_tools()).tools
        assert len(tools) >= 15  # every facts tool the full grant allows
        schema = schemathesis.openapi.from_dict(tools_document(tools))
        caller = Caller(fuzzed, client, figures)
        called: dict[str, int] = {}

        async def exercise(name: str, arguments: Any) -> None:
            called[name] = called.get(name, 0) + 1
            as_object = obj_or_none(arguments)
            if as_object is not None:
                await caller.call(name, as_object, lambda: client.call_tool(name, as_object))
            else:  # not an object: only raw JSON-RPC can send it
                await raw_call(caller, name, arguments)

        async def raw_call(caller: Caller, name: str, arguments: Any) -> None:
            params = json.dumps({"name": name, "arguments": arguments})
            await caller.call(
                name,
                arguments,
                lambda: raw_rpc(http, served, run, "tools/call", name, _raw_request("tools/call", params)),
            )

        for operation in operations_of(schema):
            name = operation.path.lstrip("/")
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

                def each(case: Any, name: str = name) -> None:
                    arguments: Any = {} if case.body is NOT_SET else case.body
                    if isinstance(arguments, bytes):
                        arguments = arguments.decode("latin-1")
                    anyio.from_thread.run(exercise, name, arguments)

                strategy = operation.as_strategy(generation_mode=mode)
                await anyio.to_thread.run_sync(
                    run_generated, f"{name} {mode.value}", strategy, each, examples(5)
                )
    assert set(called) == {tool.name for tool in tools}
    assert figures.internal_errors == 0


URIS = [
    "mcphost://run/context",
    "mcphost://run/context/",
    "mcphost://run/",
    "mcphost://artifacts/",
    "mcphost://artifacts/art_nope",
    "mcphost://artifacts/%00",
    "mcphost://artifacts/../run/context",
    "mcphost://artifacts/" + "x" * 5000,
    "file:///etc/passwd",
    "http://127.0.0.1/",
    "",
    "mcphost://run/context\x00",
    "mcphost://artifacts/\ud800",
]


async def test_resources_and_prompts_with_generated_names_and_arguments(
    fuzzed: Fixture, database_url: str
) -> None:
    figures = tally("mcp-res", store_of(database_url))
    served, run = fuzzed.served, fuzzed.run
    uris = st.one_of(
        st.sampled_from(
            [
                *URIS,
                f"mcphost://artifacts/{fuzzed.artifact_id}",
                f"mcphost://artifacts/{fuzzed.other_artifact_id}",  # another conversation's
            ]
        ),
        st.text(max_size=40).map(lambda t: f"mcphost://artifacts/{t}"),
        st.text(max_size=40),
    )
    prompt_names = st.one_of(
        st.sampled_from(["instructions", "Instructions", "", "x" * 300]), st.text(max_size=20)
    )
    prompt_arguments = st.one_of(
        st.none(), st.dictionaries(st.text(max_size=20), st.text(max_size=50), max_size=3)
    )
    requests_ = st.one_of(
        uris.map(lambda uri: ("resources/read", uri)),
        st.tuples(prompt_names, prompt_arguments).map(lambda p: ("prompts/get", p)),
    )
    async with connect(served, run, mode=LEGACY) as client, httpx2.AsyncClient(timeout=30) as http:
        caller = Caller(fuzzed, client, figures)

        async def exercise(request: tuple[str, Any]) -> None:
            method, params = request
            if method == "resources/read":
                uri: str = params
                if _encodable(uri):
                    await caller.call(method, uri, lambda: client.read_resource(uri))
                else:  # the SDK cannot send it: raw bytes can
                    body = _raw_request("resources/read", '{"uri": ' + _quoted(uri) + "}")
                    await caller.call(
                        method, uri, lambda: raw_rpc(http, served, run, "resources/read", uri, body)
                    )
            else:
                name, arguments = params
                await caller.call(method, params, lambda: client.get_prompt(name, arguments))

        def each(request: tuple[str, Any]) -> None:
            anyio.from_thread.run(exercise, request)

        await anyio.to_thread.run_sync(
            run_generated, "resources and prompts", requests_, each, examples(8) * 8
        )
    assert figures.internal_errors == 0


# -- raw JSON-RPC: what the SDK client would never send -----------------------------------------------

ACCEPT = "application/json, text/event-stream"
MODERN_HEADERS = {"mcp-protocol-version": "2026-07-28"}


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _quoted(text: str) -> str:
    return json.dumps(text)  # escapes lone surrogates as \\udxxx, which is valid JSON text


ENVELOPE = (
    '"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", '
    '"io.modelcontextprotocol/clientCapabilities": {}}'
)
"""What a stateless (2026) request carries in `params._meta` in place of a handshake."""


def _raw_request(method: str, params: str) -> bytes:
    """A JSON-RPC request whose `params` is the JSON text given (with the 2026 envelope when an object)."""
    if params.startswith("{"):
        params = "{" + ENVELOPE + ("" if params == "{}" else ", ") + params[1:]
    return ('{"jsonrpc": "2.0", "id": 7, "method": "' + method + '", "params": ' + params + "}").encode(
        "utf-8", "surrogatepass"
    )


class ServerError(Exception):
    """Raised by `raw_rpc` for an HTTP 5xx answer."""


async def raw_rpc(
    http: httpx2.AsyncClient,
    served: Served,
    run: RunHandle,
    method: str,
    name: str | None,
    body: bytes,
    *,
    token: str | None = None,
) -> Any:
    """POST one JSON-RPC request as bytes to the run's endpoint (the stateless 2026 era: no handshake).

    Returns the `CallToolResult` (or other result) it answers; raises `MCPError` for a JSON-RPC error.
    An HTTP 5xx raises `ServerError`; other HTTP refusals raise `MCPError` with their JSON-RPC body.
    """
    headers = {
        "authorization": f"Bearer {token or run.token}",
        "accept": ACCEPT,
        "content-type": "application/json",
        **MODERN_HEADERS,
        "mcp-method": method,
    }
    if name is not None and _encodable(name):
        headers["mcp-name"] = encode_header_value(name)  # the 2026 era repeats the name (or uri) here
    response = await http.post(served.url(run.run_id), content=body, headers=headers)
    if response.status_code >= 500:
        raise ServerError(f"HTTP {response.status_code}: {response.text[:500]}")
    message = _message(response)
    if "error" in message:
        raise MCPError(message["error"]["code"], message["error"]["message"])
    result: object = message["result"]
    as_object = obj_or_none(result)
    if as_object is not None and "content" in as_object:
        return types.CallToolResult.model_validate(as_object)
    return result


def _message(response: httpx2.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:"):
                data = json.loads(line[5:])
                if "id" in data:
                    return data
        raise AssertionError(f"no JSON-RPC answer in the stream: {response.text[:500]}")
    return response.json()


def _valid_arguments(fixture: Fixture, tool: types.Tool) -> dict[str, Any]:
    """Good values for the tool's required fields, so a bad value in one field meets the rest valid."""
    good: dict[str, Any] = {
        "scope": "conversation",
        "area": "plugin",
        "key": "k",
        "value": {"v": 1},
        "value_base64": "aGk=",
        "name": "a.txt",
        "mime_type": "text/plain",
        "text": "hi",
        "query": "apple",
        "event_id": fixture.run.event.event_id,
        "artifact_id": fixture.artifact_id,
        "kb_id": "kb-docs",
    }
    return {f: good[f] for f in tool.input_schema.get("required", []) if f in good}


def raw_calls(fixture: Fixture, tools: list[types.Tool]) -> list[tuple[str, str | None, bytes, str | None]]:
    """(what, tool name, body, token) for every hand-written bad input: each raw value in every tool's fields
    (rotating, so each value meets every tool), whole `arguments` and `params` replaced, and another
    run's token."""
    out: list[tuple[str, str | None, bytes, str | None]] = []
    k = 0
    for tool in tools:
        fields = list(tool.input_schema.get("properties", {})) or ["unexpected"]
        for field in fields:
            for _ in range(3):
                raw = RAW_VALUES[k % len(RAW_VALUES)]
                k += 1
                valid = {f: v for f, v in _valid_arguments(fixture, tool).items() if f != field}
                arguments = json.dumps(valid)[:-1] + (", " if valid else "") + '"' + field + '": ' + raw + "}"
                params = '{"name": "' + tool.name + '", "arguments": ' + arguments + "}"
                out.append(
                    (f"{tool.name}.{field}={raw[:40]}", tool.name, _raw_request("tools/call", params), None)
                )
        raw = RAW_VALUES[k % len(RAW_VALUES)]
        k += 1
        params = '{"name": "' + tool.name + '", "arguments": ' + raw + "}"
        out.append((f"{tool.name} arguments={raw[:40]}", tool.name, _raw_request("tools/call", params), None))
        params = '{"name": "' + tool.name + '", "arguments": {}}'
        out.append(
            (
                f"{tool.name} with run {fixture.other.run_id}'s token",
                tool.name,
                _raw_request("tools/call", params),
                fixture.other.token,
            )
        )
    for raw in RAW_VALUES:
        out.append((f"tools/call params={raw[:40]}", None, _raw_request("tools/call", raw), None))
        out.append(
            (f"tools/call name={raw[:40]}", None, _raw_request("tools/call", '{"name": ' + raw + "}"), None)
        )
    return out


async def test_raw_json_rpc_with_adversarial_values(fuzzed: Fixture, database_url: str) -> None:
    figures = tally("mcp-raw", store_of(database_url))
    served, run = fuzzed.served, fuzzed.run
    async with connect(served, run, mode=LEGACY) as client, httpx2.AsyncClient(timeout=30) as http:
        tools = (await client.list_tools()).tools
        caller = Caller(fuzzed, client, figures)
        calls = raw_calls(fuzzed, tools)
        for what, name, body, token in calls:

            async def send(name: str | None = name, body: bytes = body, token: str | None = token) -> Any:
                return await raw_rpc(http, served, run, "tools/call", name, body, token=token)

            await caller.call(what, body.decode("utf-8", "surrogatepass"), send)
    assert figures.tried == len(calls)
    assert figures.refused >= len(calls) * 3 // 4

"""Fuzz the warm session endpoint `/sessions/{session_id}/mcp` on SQLite and PostgreSQL.

The facts server (`serve_facts`, uvicorn on a loopback port) serves warm sessions; one session is bound to
a running run, another's run has ended. Hypothesis draws a request: the session (the bound one, the ended
one, one no run ever served, a malformed id), the bearer (the session's token, another session's, a token
under another key, the bound run's own run token, a forged `mst_` token, none, a huge one, one with NUL),
the protocol era (the 2026 stateless envelope or none) and the JSON-RPC body (valid calls, and every raw
value of `RAW_VALUES` as the whole body, as `params`, `id`, `method` or a tool's `arguments`, batches,
bodies that are not JSON or not UTF-8). For every answer:
- never HTTP 5xx, never JSON-RPC -32603, never a traceback; a tool error carries a documented code;
- a request whose bearer is not the session's token, or whose session no run serves now, is refused;
- a refusal changes no stored row (the audit log, which records refused session requests by design, aside).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx2
import pytest
from hypothesis import strategies as st

from mcphost.protocol import AgentRunContext
from mcphost.stores import Stores
from mcphost.stores.warm import WarmSessionStore
from mcphost.warm import WarmSessions
from tests._json import obj_or_none
from tests.fuzz._figures import Tally, examples, store_of, tally
from tests.fuzz._rows import changed, fingerprint
from tests.fuzz.test_api_fuzz import RAW_VALUES, run_generated
from tests.fuzz.test_mcp_fuzz import ACCEPT, AUDIT, ENVELOPE, INTERNAL_ERROR, TOOL_CODES
from tests.mcphost.facts._helpers import RunHandle, Served, serve_facts
from tests.mcphost.facts.test_warm_sessions import SESSION, start_bound

ENDED = WarmSessions.session_id("agent-a", "conv-ended", None)
NEVER = WarmSessions.session_id("agent-a", "conv-never", None)


@dataclass
class Warm:
    served: Served
    warm: WarmSessions
    run: RunHandle
    """The run SESSION is bound to (running)."""
    tokens: dict[str, str]
    """Bearer name → value."""


@pytest.fixture
async def fuzzed(stores: Stores) -> AsyncGenerator[Warm, None]:
    warm = await WarmSessions.open(WarmSessionStore(stores.db))
    stranger = WarmSessions(WarmSessionStore(stores.db), key=b"another-key-of-32-bytes-long!!!!")
    async with serve_facts(stores, warm=warm) as served:

        def offered(ctx: AgentRunContext) -> AgentRunContext:
            return warm.offer(ctx, agent_id="agent-a", public_url=served.base_url)

        ended = await served.start_run(
            conversation_id="conv-ended",
            revise=offered,
        )
        await served.finish(ended)
        run = await start_bound(served, warm, permissions={"history": ["page"]})
        tokens = {
            "session": warm.token(SESSION),
            "ended session": warm.token(ENDED),
            "never-served session": warm.token(NEVER),
            "another key": stranger.token(SESSION),
            "run token": run.token,
            "ended run token": ended.token,
            "forged": "mst_" + "0" * 64,
            "truncated": warm.token(SESSION)[:-1],
            "uppercase": warm.token(SESSION).upper(),
            "huge": "mst_" + "a" * 20_000,
            "nul": warm.token(SESSION) + "\x00",
            "none": "",
        }
        yield Warm(served, warm, run, tokens)


SESSIONS = {"bound": SESSION, "ended": ENDED, "never": NEVER}
ODD_SESSIONS = [
    "ses_",
    "ses_" + "0" * 31,
    "ses_" + "G" * 32,
    SESSION.upper(),
    SESSION + "x",
    "%00",
    "x" * 3000,
]


def _rpc(method: str, params: str | None, request_id: str = "7", *, era: bool = True) -> bytes:
    fields = ['"jsonrpc": "2.0"', f'"id": {request_id}', f'"method": {json.dumps(method)}']
    if params is not None:
        if era and params.startswith("{"):
            params = "{" + ENVELOPE + ("" if params == "{}" else ", ") + params[1:]
        fields.append(f'"params": {params}')
    return ("{" + ", ".join(fields) + "}").encode("utf-8", "surrogatepass")


def bodies() -> st.SearchStrategy[tuple[str, bytes]]:
    """(the method named in the `mcp-method` header, the body)."""
    good = [
        ("tools/list", _rpc("tools/list", "{}")),
        ("tools/call", _rpc("tools/call", '{"name": "run_context", "arguments": {}}')),
        ("tools/call", _rpc("tools/call", '{"name": "history_page", "arguments": {"limit": 2}}')),
        (
            "tools/call",
            _rpc(
                "tools/call", '{"name": "state_set", "arguments": {"scope": "run", "key": "k", "value": 1}}'
            ),
        ),
        ("ping", _rpc("ping", "{}")),
        ("resources/read", _rpc("resources/read", '{"uri": "mcphost://run/context"}')),
    ]
    raw = st.sampled_from(RAW_VALUES)
    return st.one_of(
        st.sampled_from(good),
        st.sampled_from(good),
        st.sampled_from(good),
        raw.map(lambda r: ("tools/call", r.encode("utf-8", "surrogatepass"))),
        raw.map(lambda r: ("tools/call", _rpc("tools/call", r))),
        raw.map(
            lambda r: ("tools/call", _rpc("tools/call", '{"name": "history_page", "arguments": ' + r + "}"))
        ),
        raw.map(
            lambda r: (
                "tools/call",
                _rpc("tools/call", '{"name": "history_page", "arguments": {"limit": ' + r + "}}"),
            )
        ),
        raw.map(lambda r: ("tools/call", _rpc("tools/call", '{"name": ' + r + "}"))),
        raw.map(lambda r: ("ping", _rpc("ping", None, request_id=r))),
        st.text(max_size=30).map(lambda m: (m, _rpc(m, "{}"))),
        st.sampled_from(
            [
                ("ping", b""),
                ("ping", b"not json"),
                ("ping", b"\xff\xfe"),
                ("ping", b"[]"),
                ("ping", b"[" + _rpc("ping", None) + b", " + _rpc("ping", None) + b"]"),
                ("ping", b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}'),
                ("ping", b'{"jsonrpc": "2.0", "method": "ping"}'),  # a notification
                ("ping", b'{"jsonrpc": "2.0", "id": 1, "result": {}}'),  # a response, not a request
                (
                    "initialize",
                    _rpc("initialize", '{"protocolVersion": "1999-01-01", "capabilities": {}}', era=False),
                ),
                ("tools/call", _rpc("tools/call", '{"name": "run_context"}' + " " * 70_000)),
                (
                    "tools/call",
                    _rpc("tools/call", '{"name": "run_context", "arguments": {}}', request_id='"a\\u0000b"'),
                ),
            ]
        ),
    )


@dataclass(frozen=True)
class Request:
    session: str
    bearer: str
    era: bool
    method: str
    body: bytes


def requests() -> st.SearchStrategy[Request]:
    sessions = st.one_of(
        st.sampled_from(list(SESSIONS)), st.sampled_from(["bound"] * 3), st.sampled_from(ODD_SESSIONS)
    )
    bearers = st.one_of(
        st.just("session"),
        st.just("session"),
        st.sampled_from(
            [
                *("ended session", "never-served session", "another key", "run token", "ended run token"),
                *("forged", "truncated", "uppercase", "huge", "nul", "none"),
            ]
        ),
    )
    return st.tuples(sessions, bearers, st.sampled_from([True, True, False]), bodies()).map(
        lambda t: Request(t[0], t[1], t[2], t[3][0], t[3][1])
    )


def _message(response: httpx2.Response) -> Any:
    """The JSON-RPC message of an answer (JSON or SSE), or None."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in text.splitlines():
            if line.startswith("data:"):
                return json.loads(line[5:])
        return None
    try:
        return response.json()
    except ValueError:
        return None


class Checker:
    def __init__(self, fuzzed: Warm, http: httpx2.AsyncClient, figures: Tally) -> None:
        self.fuzzed = fuzzed
        self.http = http
        self.figures = figures
        self.rows: dict[str, str] | None = None

    async def send(self, request: Request) -> None:
        stores = self.fuzzed.served.stores
        if self.rows is None:
            self.rows = await fingerprint(stores, exclude=AUDIT)
        before = self.rows
        session = SESSIONS.get(request.session, request.session)
        headers = {"accept": ACCEPT, "content-type": "application/json"}
        bearer = self.fuzzed.tokens[request.bearer]
        if bearer:
            headers["authorization"] = f"Bearer {bearer}"
        if request.era:
            headers |= {"mcp-protocol-version": "2026-07-28", "mcp-method": request.method}
        url = f"{self.fuzzed.served.base_url}/sessions/{session}/mcp"
        what = f"{request.session}/{request.bearer}/era={request.era} {request.body[:300]!r}"
        try:
            response = await self.http.post(url, content=request.body, headers=headers)
        except (httpx2.LocalProtocolError, UnicodeEncodeError):
            return  # the client would not send it
        self.figures.tried += 1
        status = response.status_code
        message = _message(response)
        answer = obj_or_none(message)
        error = obj_or_none(answer.get("error")) if answer is not None else None
        result = obj_or_none(answer.get("result")) if answer is not None else None
        tool_error = result is not None and result.get("isError") is True
        code = error.get("code") if error is not None else None
        self.figures.saw(f"http:{status}" + (f"/jsonrpc:{code}" if code is not None else ""))
        problems: list[str] = []
        if status >= 500:
            self.figures.server_errors += 1
            problems.append(f"HTTP {status}")
        if code == INTERNAL_ERROR:
            self.figures.internal_errors += 1
            problems.append("JSON-RPC -32603")
        if "Traceback" in response.text:
            problems.append("traceback in the answer")
        if tool_error:
            structured = obj_or_none(result.get("structuredContent")) if result is not None else None
            tool_code = structured.get("code") if structured is not None else None
            if tool_code not in TOOL_CODES:
                problems.append(f"tool error with code {tool_code!r}")
        refused = status >= 400 or error is not None or tool_error
        if not (request.session == "bound" and request.bearer == "session") and not refused:
            problems.append("served without the bound session's own token")
        self.rows = await fingerprint(stores, exclude=AUDIT)
        if refused:
            self.figures.refused += 1
            if changed(before, self.rows):
                self.figures.rows_changed_by_refusals += 1
                problems.append(f"refused, but changed {changed(before, self.rows)}")
        if problems:
            raise AssertionError(f"{what}: {'; '.join(problems)} → {status} {response.text[:500]}")


async def test_warm_session_requests(fuzzed: Warm, database_url: str) -> None:
    figures = tally("warm", store_of(database_url))
    async with httpx2.AsyncClient(timeout=30) as http:
        checker = Checker(fuzzed, http, figures)

        def each(request: Request) -> None:
            anyio.from_thread.run(checker.send, request)

        await anyio.to_thread.run_sync(
            run_generated, "/sessions/{session_id}/mcp", requests(), each, examples(8) * 25
        )
    assert figures.server_errors == 0
    assert figures.internal_errors == 0
    assert figures.statuses.get("http:200", 0) > 0, figures.statuses

"""Generated tool calls against the real server: always an answer, never a traceback, refusals change nothing.

Hypothesis draws a tool name (every facts tool, plus unknown and host-tool-shaped names) and arguments
that are sometimes plausible (the tool's real field names with good and bad values) and sometimes any
JSON object. Each call goes over HTTP through the SDK client; the properties hold for every example.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from mcp import Client

from mcphost.facts._tools import FACTS_TOOLS
from tests.mcphost.facts._helpers import (
    LEGACY,
    MODERN,
    RunHandle,
    Served,
    connect,
    structured,
    table_fingerprint,
)

SCOPES = ["conversation", "actor", "subject", "runner", "binding", "workspace", "bogus", ""]
AREAS = ["plugin", "workspace", "binding", "elsewhere"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=10,
)
keys = st.from_regex(r"[A-Za-z0-9._:-]{1,12}", fullmatch=True)
texts = st.one_of(
    keys,
    st.text(max_size=60),
    st.sampled_from(["k", "key.with:dots-and_", "a" * 201, "", " ", "\x00", "art_x", "evt_x", "ÿ/€", "%_"]),
)
numbers = st.one_of(
    st.integers(min_value=1, max_value=100),
    st.integers(min_value=-5, max_value=2_000_000),
    st.sampled_from([0, 101]),
)
cursors = st.one_of(texts, st.sampled_from(["hxhe5FnSeyJrIjoidHJhbnNjcmlwdCIsInYiOjF9", "bm90", "AAAA"]))

FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "scope": st.one_of(st.sampled_from(["conversation", "runner"]), st.sampled_from(SCOPES)),
    "area": st.sampled_from(AREAS),
    "key": st.one_of(keys, texts),
    "prefix": texts,
    "value": json_values,
    "limit": numbers,
    "top_k": numbers,
    "offset": numbers,
    "length": numbers,
    "before_cursor": cursors,
    "after_cursor": cursors,
    "cursor": cursors,
    "query": texts,
    "event_id": texts,
    "artifact_id": texts,
    "kb_id": st.sampled_from(["kb-docs", "kb-other", ""]),
    "name": texts,
    "mime_type": st.sampled_from(["text/plain", "image/png", "bogus", "", "text/plain; charset=utf-8"]),
    "text": st.text(max_size=100),
    "base64": st.sampled_from(["aGVsbG8=", "***", "", "AA"]),
    "value_base64": st.sampled_from(["aGVsbG8=", "***", "", "AA"]),
    "roles": st.lists(st.sampled_from(["user", "assistant", "nobody"]), max_size=3),
    "event_types": st.lists(st.sampled_from(["message.received", "Bad Type", "x.y"]), max_size=3),
    "include_artifacts": st.booleans(),
    "filters": json_values,
}


def plausible(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments with the tool's own field names (each present or not), valued from `FIELD_VALUES`."""
    spec = FACTS_TOOLS.get(tool)
    fields = list(spec.args.model_fields) if spec is not None else ["key", "value"]
    return st.fixed_dictionaries({}, optional={f: FIELD_VALUES.get(f, json_values) for f in fields})


names = st.sampled_from(
    [*FACTS_TOOLS, *FACTS_TOOLS, *FACTS_TOOLS, "no_such_tool", "mail__send", "", "x" * 300]
)
calls = names.flatmap(
    lambda name: st.tuples(
        st.just(name),
        st.one_of(
            plausible(name), plausible(name), st.dictionaries(st.text(max_size=20), json_values, max_size=5)
        ),
    )
)


async def check_call(
    served: Served, run: RunHandle, client: Client, name: str, arguments: dict[str, Any]
) -> None:
    before = await table_fingerprint(served.stores)
    audited = len(await served.audit(run))
    result = await client.call_tool(name, arguments)
    data = structured(result)
    event(f"outcome: {data['code'] if result.is_error else 'ok'}")
    text = json.dumps(data)
    assert "Traceback" not in text
    assert 'File "' not in text
    if result.is_error:
        assert data["code"] in {
            "unauthorized",
            "not_found",
            "invalid_argument",
            "payload_too_large",
            "rate_limited",
            "deadline_exceeded",
        }, data
        assert data["code"] != "runtime_error"
        assert await table_fingerprint(served.stores) == before, (
            f"{name} refused with {data['code']} but changed data"
        )
    rows = await served.audit(run)
    assert len(rows) == audited + 1
    row = rows[-1]
    if result.is_error:
        assert (row.outcome in {"error", "refused"}, row.code) == (True, data["code"])
    else:
        assert (row.outcome, row.code) == ("ok", None)


_runs: dict[int, RunHandle] = {}


async def run_of(served: Served) -> RunHandle:
    """One run per server (the examples of one test share it): state and plugin storage writable."""
    if id(served) not in _runs:
        _runs[id(served)] = await served.start_run(
            agent={
                "state": {"scopes": ["conversation", "actor", "runner"]},
                "storage": {"areas": ["plugin"]},
            },
            limits={"rate_per_s": 10_000.0, "rate_burst": 10_000},
        )
    return _runs[id(served)]


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
@settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(call=calls)
async def test_generated_calls_always_get_an_answer_and_refusals_change_nothing(
    served: Served, mode: str, call: tuple[str, dict[str, Any]]
) -> None:
    run = await run_of(served)
    async with connect(served, run, mode=mode) as client:
        await check_call(served, run, client, *call)

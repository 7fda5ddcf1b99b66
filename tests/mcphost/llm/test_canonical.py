"""The canonical form of a model request and its hash: what a recording matches a model call by."""

from __future__ import annotations

import json

from mcphost.llm.canonical import canonical_request, request_hash
from mcphost.llm.wire import Api
from mcphost.protocol import JSONObject

RUN = "run_01ABCDEF"


def digest(
    body: JSONObject, *, api: Api = "anthropic", run_id: str = RUN, today: tuple[str, ...] = ()
) -> str:
    return request_hash(canonical_request(api, body, model_id="sonnet", run_id=run_id, today=today))


def claude_request(**changes: object) -> JSONObject:
    body: JSONObject = {
        "model": "host:sonnet",
        "max_tokens": 1024,
        "stream": True,
        "system": [{"type": "text", "text": f"Working directory: /data/runs/{RUN}"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Save something."}]}],
        "tools": [{"name": "state_set", "input_schema": {"type": "object", "properties": {}}}],
        "metadata": {"user_id": "session-1"},
    }
    body.update(changes)  # pyright: ignore[reportArgumentType]  # test values are JSON
    return body


def test_key_order_and_whitespace_do_not_change_the_hash() -> None:
    body = claude_request()
    reordered: JSONObject = json.loads(json.dumps(dict(reversed(list(body.items())))))
    assert list(reordered) != list(body)
    assert digest(reordered) == digest(body)


def test_metadata_stream_options_user_and_cache_keys_do_not_change_the_hash() -> None:
    base = digest(claude_request(), api="chat")
    assert digest(claude_request(metadata={"user_id": "session-2"}), api="chat") == base
    assert digest(claude_request(stream_options={"include_usage": True}), api="chat") == base
    assert (
        digest(claude_request(user="someone", prompt_cache_key="conv-9", safety_identifier="x"), api="chat")
        == base
    )


def test_the_run_id_and_today_s_date_in_a_prompt_are_placeholders() -> None:
    def body(run_id: str, day: str) -> JSONObject:
        return claude_request(
            system=[
                {
                    "type": "text",
                    "text": f"cwd /data/runs/{run_id}; memory at -data-runs-{run_id.replace('_', '-')}",
                },
                {"type": "text", "text": f"Today's date is {day}."},
            ]
        )

    first = digest(body("run_01ABCDEF", "2026-12-05"), run_id="run_01ABCDEF", today=("2026-12-05",))
    again = digest(body("run_09ZYXWVU", "2027-01-31"), run_id="run_09ZYXWVU", today=("2027-01-31",))
    assert first == again
    # Another date than today's is part of the prompt.
    assert digest(body("run_01ABCDEF", "2020-01-01"), today=("2026-12-05",)) != first


def test_the_prompt_tools_model_stream_and_api_change_the_hash() -> None:
    base = digest(claude_request())
    changed = [
        claude_request(messages=[{"role": "user", "content": "Save something else."}]),
        claude_request(system=[{"type": "text", "text": "Another system prompt."}]),
        claude_request(tools=[]),
        claude_request(tools=[{"name": "state_get", "input_schema": {"type": "object"}}]),
        claude_request(max_tokens=2048),
        claude_request(stream=False),
    ]
    hashes = {digest(b) for b in changed}
    assert base not in hashes
    assert len(hashes) == len(changed)
    assert digest(claude_request(), api="chat") != base
    other_model = request_hash(canonical_request("anthropic", claude_request(), model_id="haiku", run_id=RUN))
    assert other_model != base


def test_the_model_is_the_host_model_id_however_the_client_spelled_it() -> None:
    assert digest(claude_request(model="sonnet")) == digest(claude_request(model="host:sonnet"))


def test_a_deeply_nested_request_is_canonical_without_recursion() -> None:
    deep: object = f"at {RUN}"
    for _ in range(5000):
        deep = [deep]
    canonical = canonical_request("chat", {"messages": deep}, model_id="m", run_id=RUN)  # pyright: ignore[reportArgumentType]
    inner = canonical["request"]["messages"]  # pyright: ignore[reportIndexIssue, reportOptionalSubscript, reportCallIssue, reportArgumentType]
    for _ in range(4999):
        inner = inner[0]  # pyright: ignore[reportIndexIssue, reportOptionalSubscript, reportUnknownVariableType]
    assert inner == ["at {run_id}"]


def codex_request(session: str, item_id: str, elapsed: str, output: str = "ok") -> JSONObject:
    return {
        "model": "gpt",
        "stream": True,
        "prompt_cache_key": session,
        "client_metadata": {"session_id": session, "turn_id": f"turn-{session}"},
        "input": [
            {"type": "message", "id": f"msg_{item_id}", "role": "user", "content": "Save something."},
            {
                "type": "function_call_output",
                "id": f"fco_{item_id}",
                "call_id": "call_1",
                "output": (f"Wall time: {elapsed} seconds\nOutput:\n{output}"),
            },
        ],
    }


def test_codex_s_session_ids_input_item_ids_and_measured_wall_time_do_not_change_the_hash() -> None:
    first = digest(codex_request("s-1", "a1", "0.0330"), api="responses")
    assert digest(codex_request("s-2", "b2", "12.5"), api="responses") == first
    # What the tool answered, and the call it answers, still count.
    assert digest(codex_request("s-1", "a1", "0.0330", output="other"), api="responses") != first
    moved = codex_request("s-1", "a1", "0.0330")
    moved["input"][1]["call_id"] = "call_2"  # pyright: ignore[reportIndexIssue, reportOptionalSubscript, reportArgumentType, reportCallIssue]
    assert digest(moved, api="responses") != first

"""The canonical form of a model request, and its hash: what a recording matches a model call by.

Owns `canonical_request` and `request_hash`. Does not own storing or replaying calls (`recording.py`,
`proxy/_tape.py`) nor the requests themselves (passed upstream as the client sent them).

Invariants:
- Two requests that ask a model the same thing have the same hash: key order, whitespace and the fields
  that do not change the answer (`IGNORED_FIELDS`: client metadata, stream options, cache and user
  keys; the `id` a client gives each Responses `input` item) are left out, and the run's own id,
  today's date and a tool call's measured duration are replaced by placeholders where a string holds
  them (a harness CLI writes its run folder, `…/runs/<run id>`, and the date into its system prompt,
  and Codex starts a tool's output with `Wall time: 0.0330 seconds`, so a replay on another run or
  another day would otherwise never match).
- Anything else changes the hash: the API, the model, `stream`, the messages, the system prompt, the
  tools, the sampling parameters.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable

from mcphost.llm.wire import Api
from mcphost.protocol import JSONObject, JSONValue, is_json_array, is_json_object

IGNORED_FIELDS = frozenset(
    {"metadata", "client_metadata", "stream_options", "user", "prompt_cache_key", "safety_identifier"}
)
"""Top-level request fields that do not change a model's answer: Anthropic's `metadata` (Claude Code
puts its session id there), Codex's `client_metadata` (its session, thread and turn ids), OpenAI's
`stream_options`, `user`, `prompt_cache_key` (Codex's conversation id) and `safety_identifier`."""
RUN_ID_PLACEHOLDER = "{run_id}"
TODAY_PLACEHOLDER = "{today}"
ELAPSED_PLACEHOLDER = "Wall time: {elapsed} seconds"
_ELAPSED = re.compile(r"Wall time: [0-9]+(?:\.[0-9]+)? seconds")


def canonical_request(
    api: Api, body: JSONObject, *, model_id: str, run_id: str, today: Iterable[str] = ()
) -> JSONObject:
    """`body` as it is matched: the host model id as `model`, `IGNORED_FIELDS` and Responses input item
    ids left out, and in every string the run id (also as a path-safe `-` spelling), each of `today`
    (`YYYY-MM-DD`) and a `Wall time: N seconds` replaced by placeholders."""
    spellings = {run_id: RUN_ID_PLACEHOLDER, re.sub(r"[^A-Za-z0-9]", "-", run_id): RUN_ID_PLACEHOLDER}
    spellings |= {day: TODAY_PLACEHOLDER for day in today if day}
    pattern = re.compile("|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True) if s))
    kept: JSONObject = {k: v for k, v in body.items() if k not in IGNORED_FIELDS}
    kept["model"] = model_id
    items = kept.get("input")
    if api == "responses" and is_json_array(items):
        kept["input"] = [
            {k: v for k, v in item.items() if k != "id"} if is_json_object(item) else item for item in items
        ]

    def replace(text: str) -> str:
        return _ELAPSED.sub(ELAPSED_PLACEHOLDER, pattern.sub(lambda m: spellings[m.group(0)], text))

    canonical = _replaced(kept, replace)
    assert is_json_object(canonical)
    return {"api": api, "request": canonical}


def request_hash(canonical: JSONObject) -> str:
    """The SHA-256 of a canonical request, as compact JSON with sorted keys."""
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _replaced(value: JSONValue, replace: Callable[[str], str]) -> JSONValue:
    """`value` with `replace` applied to every string, without recursion (a request nests as deep as
    its client likes)."""
    if isinstance(value, str):
        return replace(value)
    if not (is_json_object(value) or is_json_array(value)):
        return value
    root: list[JSONValue] = [None]
    stack: list[tuple[JSONValue, list[JSONValue] | JSONObject, str | int]] = [(value, root, 0)]
    while stack:
        item, parent, key = stack.pop()
        if is_json_object(item):
            copy: JSONObject = {}
            stack.extend((v, copy, k) for k, v in item.items())
        elif is_json_array(item):
            copy_list: list[JSONValue] = [None] * len(item)
            stack.extend((v, copy_list, i) for i, v in enumerate(item))
            _put(parent, key, copy_list)
            continue
        elif isinstance(item, str):
            _put(parent, key, replace(item))
            continue
        else:
            _put(parent, key, item)
            continue
        _put(parent, key, copy)
    return root[0]


def _put(parent: list[JSONValue] | JSONObject, key: str | int, value: JSONValue) -> None:
    if isinstance(parent, list):
        assert isinstance(key, int)
        parent[key] = value
    else:
        assert isinstance(key, str)
        parent[key] = value

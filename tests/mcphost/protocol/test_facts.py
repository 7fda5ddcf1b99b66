"""The per-run tool answers: forward compatible when parsed, strict under `STRICT_CONTEXT`, exact on dump."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from mcphost.protocol import STRICT_CONTEXT, AgentRunContext
from mcphost.protocol.facts import FACTS_ANSWERS, HistorySearch, StateListItem, StateValue

ITEM: dict[str, Any] = {
    "cursor": "c1",
    "item_id": "itm_1",
    "role": "user",
    "content": "hi",
    "truncated": False,
    "contents": [],
    "contents_error": None,
    "artifacts": [],
    "artifact_count": 0,
    "event_id": None,
    "run_id": None,
    "actor_id": None,
    "created_at": 1.5,
}


def test_an_unknown_field_is_ignored_when_parsing_and_refused_at_any_depth_under_the_strict_context() -> None:
    answer = {"hits": [{"item": {**ITEM, "new_field": 1}, "score": 1.0, "snippet": "**hi**"}]}
    assert HistorySearch.model_validate(answer).hits[0].item.content == "hi"
    with pytest.raises(ValidationError, match="TranscriptItem does not know the field"):
        HistorySearch.model_validate(answer, context=STRICT_CONTEXT)


def test_a_field_the_host_always_sends_is_required() -> None:
    without = {key: value for key, value in ITEM.items() if key != "contents_error"}
    with pytest.raises(ValidationError, match="contents_error"):
        HistorySearch.model_validate({"hits": [{"item": without, "score": 1.0, "snippet": ""}]})


def test_fields_sent_only_sometimes_are_absent_from_the_dump_when_they_do_not_apply() -> None:
    missing = StateValue(scope="runner", key="k", found=False, value=None)
    assert missing.model_dump(mode="json") == {"scope": "runner", "key": "k", "found": False, "value": None}
    items = [
        StateListItem(key="a", size=4, updated_at=1.0, value=None),
        StateListItem(key="b", size=9, updated_at=1.0, value_omitted=True),
        StateListItem(key="c", size=9, updated_at=1.0, error={"code": "runtime_error", "message": "deep"}),
    ]
    assert [sorted(item.model_dump(mode="json")) for item in items] == [
        ["key", "size", "updated_at", "value"],
        ["key", "size", "updated_at", "value_omitted"],
        ["error", "key", "size", "updated_at"],
    ]


def test_every_answer_schema_is_an_object_schema_as_mcp_output_schemas_must_be() -> None:
    assert FACTS_ANSWERS["run_context"] is AgentRunContext
    for tool, model in FACTS_ANSWERS.items():
        assert model.model_json_schema()["type"] == "object", tool

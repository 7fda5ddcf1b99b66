"""Protocol v1 models: the public surface, result classification, manifests and JSON Schemas."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

import mcphost.protocol as protocol
from mcphost.protocol import (
    RESULT_TYPES,
    AgentRunnerManifest,
    InvalidResult,
    RunCompleted,
    RunnerIdError,
    UnknownResult,
    classify_result,
    json_schemas,
    parse_runner_id,
)

PINNED_ALL = [
    "ActionRequested",
    "ActionRequestedData",
    "ActorInfo",
    "AgentRunContext",
    "AgentRunResult",
    "AgentRunnerManifest",
    "ArtifactCreated",
    "ArtifactCreatedData",
    "ArtifactRef",
    "AvailableApis",
    "BridgeCommand",
    "CancelParams",
    "Capabilities",
    "ConfigField",
    "ContentElement",
    "ContextAccess",
    "ContextSupport",
    "ConversationInfo",
    "Delivery",
    "ERROR_CODES",
    "ErrorCode",
    "EventInfo",
    "FACTS_TOOL_NAMES",
    "FactsToolName",
    "HostInfo",
    "HostModelInfo",
    "INT64_MAX",
    "INT64_MIN",
    "InboundModel",
    "InitializeParams",
    "InitializeResult",
    "InteractionRequested",
    "InteractionRequestedData",
    "InvalidResult",
    "JSONObject",
    "JSONValue",
    "KnowledgeBaseInfo",
    "MAX_INLINE_ARTIFACT_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_LINE_BYTES",
    "MAX_PROJECTED_SKILL_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_SKILL_BYTES",
    "MAX_SKILL_FILES",
    "MCPAccess",
    "METHOD_CANCEL",
    "METHOD_INITIALIZE",
    "METHOD_RESULT",
    "METHOD_RUN",
    "METHOD_SHUTDOWN",
    "MediaContent",
    "Message",
    "MessageChunk",
    "MessageCompleted",
    "MessageCompletedData",
    "MessageDelta",
    "MessageDeltaData",
    "ModelEndpoints",
    "ModelsPermission",
    "PROTOCOL_VERSION",
    "Permissions",
    "PluginInfo",
    "ProjectedSkill",
    "ProtocolModel",
    "RESULT_ADAPTER",
    "RESULT_TYPES",
    "RUNNER_ID_FORM",
    "Resources",
    "ResultParams",
    "RunCompleted",
    "RunCompletedData",
    "RunFailed",
    "RunFailedData",
    "RunInput",
    "RunParams",
    "RunProjection",
    "RunResponse",
    "RunnerIdError",
    "Runtime",
    "SKILL_FILE",
    "STATE_KEY_PATTERN",
    "STATE_SCOPES",
    "STRICT_CONTEXT",
    "SkillFile",
    "SkillInfo",
    "StateErrorEntry",
    "StateScope",
    "StateSnapshot",
    "StateUpdated",
    "StateUpdatedData",
    "StorableJSON",
    "StorableObject",
    "StorableText",
    "StorageInfo",
    "SubjectInfo",
    "TERMINAL_RESULT_TYPES",
    "TextContent",
    "ToolCallCompleted",
    "ToolCallCompletedData",
    "ToolCallStarted",
    "ToolCallStartedData",
    "ToolInfo",
    "Trigger",
    "TriggerSource",
    "UnknownResult",
    "Unstorable",
    "Usage",
    "WarmSessionAccess",
    "check_skill_path",
    "classify_result",
    "config_schema_of",
    "is_error_code",
    "is_json_array",
    "is_json_object",
    "json_depth",
    "json_schemas",
    "nesting_message",
    "parse_runner_id",
    "plainly_storable_within",
    "runner_id_of",
    "text_problem",
    "unstorable",
]


def test_the_public_surface_is_pinned() -> None:
    # Adding to the protocol's public surface is a deliberate act: update this list with it.
    assert sorted(protocol.__all__) == PINNED_ALL
    for name in protocol.__all__:
        assert hasattr(protocol, name), name


@pytest.mark.parametrize(
    "runner_id",
    ["plugin:acme/bot/default", "plugin:a/b/c", "plugin:a1/b_2/c.3-x"],
)
def test_well_formed_runner_ids_parse(runner_id: str) -> None:
    assert len(parse_runner_id(runner_id)) == 3


@pytest.mark.parametrize(
    "runner_id",
    [
        "acme/bot/default",
        "plugin:acme/bot",
        "plugin:Acme/bot/default",
        "plugin:acme/bot/default/x",
        "plugin:/b/c",
    ],
)
def test_malformed_runner_ids_name_the_expected_form(runner_id: str) -> None:
    with pytest.raises(RunnerIdError, match=r"plugin:<author>/<plugin>/<runner>"):
        parse_runner_id(runner_id)


def result(rtype: str, data: Any = None, **extra: Any) -> dict[str, Any]:
    return {"type": rtype, "run_id": "run_1", "data": data if data is not None else {}, **extra}


def test_a_valid_result_is_parsed_into_its_model() -> None:
    parsed = classify_result(result("run.completed", {"message": {"content": "hi"}}, sequence=3))
    assert isinstance(parsed, RunCompleted)
    assert parsed.sequence == 3
    assert parsed.data.message is not None
    assert parsed.data.message.content == "hi"


def test_an_unknown_type_is_classified_as_unknown_not_invalid() -> None:
    parsed = classify_result(result("telemetry.custom", {"x": 1}))
    assert isinstance(parsed, UnknownResult)
    assert parsed.type == "telemetry.custom"


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (result("message.delta", {"chunk": {"content": 5}}), "data.chunk.content"),
        (result("state.updated", {"scope": "galaxy", "key": "k", "value": 1}), "data.scope"),
        (result("state.updated", {"scope": "actor", "key": "bad key!", "value": 1}), "data.key"),
        (result("run.failed", {"code": "oops", "message": "m"}), "unknown error code 'oops'"),
        (result("message.completed", {"message": {"content": "x"}}, extra_field=1), "extra_field"),
        (result("run.completed", {}, sequence=0), "sequence"),
        ([1, 2], "must be a JSON object"),
        ({"run_id": "r"}, "needs a string 'type'"),
    ],
)
def test_invalid_results_name_the_field(raw: Any, where: str) -> None:
    parsed = classify_result(raw)
    assert isinstance(parsed, InvalidResult)
    assert where in parsed.message


def test_runner_codes_may_extend_the_vocabulary() -> None:
    assert not isinstance(
        classify_result(result("run.failed", {"code": "runner.quota", "message": "m"})), InvalidResult
    )


def test_a_manifest_refuses_unknown_permissions_and_fields() -> None:
    with pytest.raises(ValidationError, match="history"):
        AgentRunnerManifest.model_validate(
            {"id": "plugin:a/b/c", "name": "c", "permissions": {"history": ["all"]}}
        )
    with pytest.raises(ValidationError, match="colour"):
        AgentRunnerManifest.model_validate({"id": "plugin:a/b/c", "name": "c", "colour": "red"})
    with pytest.raises(ValidationError, match="needs a non-empty 'options' list"):
        AgentRunnerManifest.model_validate(
            {"id": "plugin:a/b/c", "name": "c", "config_schema": [{"name": "mode", "type": "select"}]}
        )


def test_json_schemas_cover_every_result_type() -> None:
    schemas = json_schemas()
    text = json.dumps(schemas["agent_run_result"])
    for rtype in RESULT_TYPES:
        assert f'"{rtype}"' in text
    assert schemas["agent_run_context"]["type"] == "object"
    assert "run_id" in schemas["agent_run_context"]["required"]

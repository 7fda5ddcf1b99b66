"""Runner ids and the runner manifest (PROTOCOL §2).

A manifest's `permissions` are the runner's maximum; the run grant cuts them down further (§6).
"""

from __future__ import annotations

import re
import types
from collections.abc import Collection
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_core import PydanticUndefined, to_jsonable_python

from mcphost.protocol._base import PROTOCOL_VERSION, InboundModel, JSONObject, JSONValue

RUNNER_ID_PART = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
RUNNER_ID_FORM = "plugin:<author>/<plugin>/<runner>, each part matching [a-z0-9][a-z0-9_.-]{0,63}"


class RunnerIdError(ValueError):
    """A runner id that does not have the form `plugin:<author>/<plugin>/<runner>`."""


def parse_runner_id(runner_id: str) -> tuple[str, str, str]:
    """Split `plugin:<author>/<plugin>/<runner>` into its three parts, or raise `RunnerIdError`."""
    if not runner_id.startswith("plugin:"):
        raise RunnerIdError(f"Runner id {runner_id!r} must have the form {RUNNER_ID_FORM}.")
    parts = runner_id.removeprefix("plugin:").split("/")
    if len(parts) != 3 or not all(RUNNER_ID_PART.match(p) for p in parts):
        raise RunnerIdError(f"Runner id {runner_id!r} must have the form {RUNNER_ID_FORM}.")
    return parts[0], parts[1], parts[2]


def runner_id_of(author: str, plugin: str, runner: str) -> str:
    """Build and check a runner id from its three parts."""
    runner_id = f"plugin:{author}/{plugin}/{runner}"
    parse_runner_id(runner_id)
    return runner_id


class Capabilities(InboundModel):
    streaming: bool = False
    tool_calling: bool = False
    knowledge_retrieval: bool = False
    multimodal_input: bool = False
    event_context: bool = True
    platform_api: bool = False
    interrupt: bool = False
    stateful_session: bool = False
    self_managed_context: bool = True
    parks: bool = False
    """The runner cannot hold a call open for hours (a CLI harness): a call marked `ask` parks the run
    (it ends `parked`) and the person's decision starts a continuation run of the same conversation."""


HistoryPermission = Literal["page", "search"]
EventsPermission = Literal["get", "page"]
ArtifactsPermission = Literal["metadata", "read", "create"]
StatePermission = Literal["read", "write"]
StoragePermission = Literal["plugin", "workspace", "binding"]
KnowledgePermission = Literal["list", "retrieve"]
ToolsPermission = Literal["call"]
ModelsPermission = Literal["invoke", "stream", "rerank", "embed"]


class Permissions(InboundModel):
    """The most a runner may ever be granted. Empty lists mean none."""

    history: list[HistoryPermission] = Field(default_factory=list[HistoryPermission])
    events: list[EventsPermission] = Field(default_factory=list[EventsPermission])
    artifacts: list[ArtifactsPermission] = Field(default_factory=list[ArtifactsPermission])
    state: list[StatePermission] = Field(default_factory=list[StatePermission])
    storage: list[StoragePermission] = Field(default_factory=list[StoragePermission])
    knowledge: list[KnowledgePermission] = Field(default_factory=list[KnowledgePermission])
    tools: list[ToolsPermission] = Field(default_factory=list[ToolsPermission])
    platform_api: list[str] = Field(default_factory=list[str])
    models: list[ModelsPermission] = Field(default_factory=list[ModelsPermission])
    """Calls of the host's models the runner may make (the agent's `resources.models` names which):
    `invoke` (a whole answer), `stream` (a streamed one), `rerank`, and `embed` (an extension of
    mcphost's: vectors from an embedding model, `models_embed`)."""


class ContextSupport(InboundModel):
    supports_history_pull: bool = True
    supports_history_search: bool = False
    supports_artifact_pull: bool = True
    owns_compaction: bool = True
    wants_static_context_refs: bool = True
    calls_mcp: bool = True
    """The runner calls its run's MCP endpoint. False (a runner that works from its context and result
    stream alone, as echo) lets a one-shot host skip loading its MCP server ahead of the first call; a call
    is answered either way."""


ConfigFieldType = Literal["string", "integer", "number", "boolean", "select", "json", "secret"]


class ConfigField(InboundModel):
    """One field of the per-agent runner config form."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    type: ConfigFieldType
    label: dict[str, str] | str = ""
    required: bool = False
    default: JSONValue = None
    options: list[JSONValue] | None = None

    @model_validator(mode="after")
    def _select_needs_options(self) -> ConfigField:
        if self.type == "select" and not self.options:
            raise ValueError(f"config field {self.name!r} of type 'select' needs a non-empty 'options' list")
        return self


def config_schema_of(model: type[BaseModel], *, exclude: Collection[str] = ()) -> list[ConfigField]:
    """The `config_schema` form of a runner's config model: one field per model field, in order.

    A runner validates its `[agents.config]` with `model`, so deriving the form from it keeps the two
    from drifting apart. Per field: the label is its `title` (else its name); `required` and `default`
    are the model's (a `default_factory` is called); the type follows the annotation, `X | None` read
    as `X`: `bool` → boolean, `int` → integer, `float` → number, `str` → string, `SecretStr` → secret,
    a `Literal` → select with its values as options, anything else (lists, mappings, models) → json.
    """
    fields: list[ConfigField] = []
    for name, info in model.model_fields.items():
        if name in exclude:
            continue
        kind, options = _config_type(info.annotation)
        if info.is_required():
            default: Any = None
        elif info.default_factory is not None:
            default = info.default_factory()  # pyright: ignore[reportCallIssue]  # models here take no data
        else:
            default = info.default
        fields.append(
            ConfigField(
                name=name,
                type=kind,
                label=info.title or name,
                required=info.is_required(),
                default=None if default is PydanticUndefined else to_jsonable_python(default),
                options=options,
            )
        )
    return fields


def _config_type(annotation: Any) -> tuple[ConfigFieldType, list[JSONValue] | None]:
    if get_origin(annotation) in (Union, types.UnionType):
        present = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(present) == 1:
            annotation = present[0]
    if get_origin(annotation) is Literal:
        return "select", list(get_args(annotation))
    simple: dict[Any, ConfigFieldType] = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        SecretStr: "secret",
    }
    return simple.get(annotation, "json"), None


class AgentRunnerManifest(InboundModel):
    """What a runner declares about itself in the plugin's `initialize` answer."""

    id: str
    """Runner id, `plugin:<author>/<plugin>/<runner>`."""
    name: str = Field(min_length=1, max_length=200)
    label: dict[str, str] = Field(default_factory=dict[str, str])
    description: dict[str, str] | None = None
    protocol_version: str = PROTOCOL_VERSION
    capabilities: Capabilities = Field(default_factory=Capabilities)
    permissions: Permissions = Field(default_factory=Permissions)
    context: ContextSupport = Field(default_factory=ContextSupport)
    config_schema: list[ConfigField] = Field(default_factory=list[ConfigField])
    metadata: JSONObject = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _id_has_the_runner_form(cls, value: str) -> str:
        parse_runner_id(value)
        return value

    @field_validator("config_schema")
    @classmethod
    def _config_names_unique(cls, value: list[ConfigField]) -> list[ConfigField]:
        names = [f.name for f in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"config_schema names must be unique; repeated: {', '.join(duplicates)}")
        return value

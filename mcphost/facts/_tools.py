"""The table of facts tools: name, description, argument model, handler — built once per process.

Owns `FACTS_TOOLS` and each tool's MCP description (`types.Tool`, input schema from the argument model,
so field docstrings become the descriptions a model reads; output schema from the answer model of
`mcphost.protocol.facts`). Does not run anything (`_dispatch.py` does).

Invariants:
- The table holds exactly `protocol.facts.FactsToolName`, in its order, and `grants.ALL_FACTS_TOOLS`
  (checked at import), so the grant's tool names, the served tools and the answer models cannot drift apart.
- A tool's answer model is `FACTS_ANSWERS[name]`, never chosen here; its handler returns an instance of
  it and publishes its JSON Schema as `outputSchema`.
- `types.Tool` objects are built once here and shared by every `tools/list` answer; the per-run answer is
  a filter over them, never a rebuild.
- What `tools/list` shows comes from `tools.json`, the listing generated from this table (`python -m
  mcphost.facts.listing` writes it; a test fails when it differs from a fresh build): building the
  tools' JSON Schemas from their models costs a process 0.15-0.3 s of CPU on its first run, reading the
  listing a few milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any, Generic, TypeVar

import mcp_types as types
from pydantic import BaseModel

from mcphost.facts import _artifacts, _history, _keyed, _models, _run
from mcphost.facts._args import (
    ArtifactArgs,
    ArtifactsCreateArgs,
    ArtifactsReadArgs,
    EventsGetArgs,
    EventsPageArgs,
    HistoryPageArgs,
    HistorySearchArgs,
    KnowledgeRetrieveArgs,
    NoArgs,
    StateKeyArgs,
    StateListArgs,
    StateSetArgs,
    StorageKeyArgs,
    StorageListArgs,
    StorageSetArgs,
)
from mcphost.facts._call import Call
from mcphost.facts._listing import LISTING, listing
from mcphost.grants import ALL_FACTS_TOOLS
from mcphost.protocol import JSONObject, ProtocolModel
from mcphost.protocol.facts import FACTS_ANSWERS, FACTS_TOOL_NAMES, FactsToolName, answer_schema
from mcphost.protocol.inference import ModelsEmbedArgs, ModelsInvokeArgs, ModelsListArgs, ModelsRerankArgs

ArgsT = TypeVar("ArgsT", bound=BaseModel)
"""The facts tools' own `ToolArgs`, or the protocol's argument models of the model tools."""


@dataclass(frozen=True)
class ToolSpec(Generic[ArgsT]):
    """One facts tool."""

    name: FactsToolName
    description: str
    args: type[ArgsT]
    handler: Callable[[Call, ArgsT], Awaitable[ProtocolModel]]
    read_only: bool = True

    @property
    def answer(self) -> type[ProtocolModel]:
        """The model of this tool's answer (`protocol.facts.FACTS_ANSWERS`)."""
        return FACTS_ANSWERS[self.name]

    @cached_property
    def tool(self) -> types.Tool:
        """The tool as `tools/list` shows it, read from the generated listing (`tools.json`) on first
        use, not when the host imports this module."""
        return types.Tool.model_validate(_shared_listing()[self.name])

    def build(self) -> types.Tool:
        """The tool built from its models: its JSON Schemas from the argument and answer models (what
        `tools.json` holds, written by `python -m mcphost.facts.listing`)."""
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        schema.pop("description", None)
        return types.Tool(
            name=self.name,
            title=self.name.replace("_", " "),
            description=self.description,
            input_schema=schema,
            output_schema=answer_schema(self.name),
            annotations=types.ToolAnnotations(
                read_only_hint=self.read_only,
                destructive_hint=False if self.read_only else None,
                open_world_hint=False,
            ),
        )


_SPECS: list[ToolSpec[Any]] = [
    ToolSpec(
        "run_context",
        "This run's full context: the event, conversation, actor, input, resources, state snapshot and "
        "runtime (no secrets). Call it first when the context you were given is incomplete.",
        NoArgs,
        _run.run_context,
    ),
    ToolSpec(
        "history_page",
        "A page of this conversation's transcript (user and assistant messages). With before_cursor "
        "(start from the context's latest_cursor) it goes back in time, newest first; with after_cursor "
        "it goes forward, oldest first. Content is cut at 4000 characters (truncated=true).",
        HistoryPageArgs,
        _history.history_page,
    ),
    ToolSpec(
        "history_search",
        "Search this conversation's transcript for words (full-text, any of the words). Hits come best "
        "first, each with a snippet marking the matches **like this**.",
        HistorySearchArgs,
        _history.history_search,
    ),
    ToolSpec(
        "events_get",
        "One event of this conversation (or of this run) by id, with its data (large data is left out "
        "and flagged data_truncated).",
        EventsGetArgs,
        _history.events_get,
    ),
    ToolSpec(
        "events_page",
        "A page of this conversation's event log (inbound events, tool telemetry, system events), "
        "optionally only some event types. Paging works like history_page.",
        EventsPageArgs,
        _history.events_page,
    ),
    ToolSpec(
        "artifacts_metadata",
        "An artifact's name, media type, size, SHA-256 and times.",
        ArtifactArgs,
        _artifacts.artifacts_metadata,
    ),
    ToolSpec(
        "artifacts_read",
        "Read up to 1 MiB of an artifact from an offset. Text artifacts come back as text (encoding "
        "utf-8), others as base64; eof=true once the end is reached.",
        ArtifactsReadArgs,
        _artifacts.artifacts_read,
    ),
    ToolSpec(
        "artifacts_create",
        "Create an artifact (at most 1 MiB) from text or base64; returns its handle (artifact_id) to "
        "attach to messages.",
        ArtifactsCreateArgs,
        _artifacts.artifacts_create,
        read_only=False,
    ),
    ToolSpec(
        "state_get",
        "Read a small JSON value this agent stored earlier under a scope and key (found=false if none).",
        StateKeyArgs,
        _keyed.state_get,
    ),
    ToolSpec(
        "state_set",
        "Store a small JSON value (at most 256 KiB) under a scope and key, replacing what was there.",
        StateSetArgs,
        _keyed.state_set,
        read_only=False,
    ),
    ToolSpec(
        "state_delete",
        "Delete a state value (deleted=false if there was none).",
        StateKeyArgs,
        _keyed.state_delete,
        read_only=False,
    ),
    ToolSpec(
        "state_list",
        "List state keys of a scope in key order, optionally by prefix, with values inline while small.",
        StateListArgs,
        _keyed.state_list,
    ),
    ToolSpec(
        "storage_get",
        "Read a stored byte value (base64) from a storage area.",
        StorageKeyArgs,
        _keyed.storage_get,
    ),
    ToolSpec(
        "storage_set",
        "Store bytes (base64, at most 10 MiB) in a storage area under a key, replacing what was there.",
        StorageSetArgs,
        _keyed.storage_set,
        read_only=False,
    ),
    ToolSpec(
        "storage_delete",
        "Delete a stored value (deleted=false if there was none).",
        StorageKeyArgs,
        _keyed.storage_delete,
        read_only=False,
    ),
    ToolSpec(
        "storage_list",
        "List keys of a storage area in key order with their sizes, optionally by prefix.",
        StorageListArgs,
        _keyed.storage_list,
    ),
    ToolSpec(
        "knowledge_list",
        "The knowledge bases this run may search.",
        NoArgs,
        _run.knowledge_list,
    ),
    ToolSpec(
        "knowledge_retrieve",
        "Retrieve the passages of a knowledge base that best match a query.",
        KnowledgeRetrieveArgs,
        _run.knowledge_retrieve,
    ),
    ToolSpec(
        "models_list",
        "The host models this run may call: id, kind (chat, rerank, embedding), context window, whether "
        "it takes tools and images, and how the run may call it (invoke, stream, rerank, embed).",
        ModelsListArgs,
        _models.models_list,
    ),
    ToolSpec(
        "models_invoke",
        "Ask a host chat model for its next message: messages (text, images, tool calls and results), an "
        "optional system prompt, tools, max_tokens, temperature, stop. Answers the assistant message with "
        "its tool calls, stop_reason, usage and the model that answered (a fallback may answer). With a "
        "progress token, text arrives as progress notifications first. Every call counts against the "
        "agent's model budgets (budget_exceeded names the spent one).",
        ModelsInvokeArgs,
        _models.models_invoke,
        read_only=False,
    ),
    ToolSpec(
        "models_rerank",
        "Score documents by relevance to a query with a host rerank model; best first, optionally only "
        "the top_k.",
        ModelsRerankArgs,
        _models.models_rerank,
    ),
    ToolSpec(
        "models_embed",
        "Embed texts with a host embedding model: a vector per input, in order, and the usage. "
        "Optional dimensions shortens the vectors on models that can. Counts against the agent's model "
        "budgets (budget_exceeded names the spent one).",
        ModelsEmbedArgs,
        _models.models_embed,
    ),
]

FACTS_TOOLS: Mapping[str, ToolSpec[Any]] = {spec.name: spec for spec in _SPECS}
"""Every facts tool by name, in the order `tools/list` shows them."""

if tuple(FACTS_TOOLS) != FACTS_TOOL_NAMES or frozenset(FACTS_TOOLS) != ALL_FACTS_TOOLS:  # pragma: no cover
    raise AssertionError(
        f"facts tools {list(FACTS_TOOLS)} differ from protocol.facts.FactsToolName {list(FACTS_TOOL_NAMES)} "
        f"or grants.ALL_FACTS_TOOLS {sorted(ALL_FACTS_TOOLS)}"
    )


def input_schema(name: str) -> dict[str, Any] | None:
    """A facts tool's input schema (for the SDK's `Mcp-Param-*` header check), or None."""
    spec = FACTS_TOOLS.get(name)
    return None if spec is None else spec.tool.input_schema


def built_listing() -> dict[str, JSONObject]:
    """What `tools.json` must hold: every tool built from its models."""
    return {
        name: spec.build().model_dump(mode="json", by_alias=True, exclude_none=True)
        for name, spec in FACTS_TOOLS.items()
    }


@cache
def _shared_listing() -> dict[str, JSONObject]:
    """The listing parsed once, for the shared `types.Tool` objects (validation copies what it reads)."""
    return listing()


def write_listing() -> None:
    """Write `tools.json` from the table (after a change to a tool, its argument or answer model)."""
    LISTING.write_text(json.dumps(built_listing(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

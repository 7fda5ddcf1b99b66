"""`GET /v1/knowledge`, `GET /v1/knowledge/{kb_id}/search` and `GET /v1/tools`: the resources the host
offers agents, as an operator sees them.

Owns the operator's view of the configured knowledge bases (sources, stored counts, whether they are
ready, which agents name them), an operator's search of any of them, and the view of the upstream tool
servers (`[tools.<server>]`: how each is reached, its state, its tools and which agents' globs allow
them). Does not own ingest or ranking (`knowledge.bases`, `stores/knowledge.py`), connections to
upstreams (`gateway`), nor what a run may use (the run grant: manifest ∩ agent ∩ event).

Invariants:
- A search is the per-run `knowledge_retrieve` tool's own (`KnowledgeBases.retrieve`): same ranking,
  same `top_k` range, same answer shape; the API key stands in for the run grant, so any configured
  knowledge base may be searched. A search reads at most `limit` chunks.
- Nothing here writes: a refused or accepted request leaves every stored row as it was.
- An upstream is shown by its transport and target only (`Upstream.target`: no arguments, query or
  credentials); its headers and env values never leave the host.
- `GET /v1/tools` contacts upstreams only with `connect=true`, each bounded by the gateway's list
  timeout; otherwise it reports what the host already knows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import parse_query, path_id
from mcphost.api._models import (
    KnowledgeBaseView,
    KnowledgeSearchAnswer,
    KnowledgeSearchQuery,
    KnowledgeView,
    QueryModel,
    ToolParam,
    ToolsQuery,
    ToolsView,
    UpstreamInfo,
    UpstreamToolInfo,
)
from mcphost.api._state import api_state
from mcphost.common.timestamps import json_with_iso
from mcphost.errors import NotFoundError
from mcphost.gateway.host_tools import could_match
from mcphost.grants import matches_tool_glob
from mcphost.models import AgentConfig

if TYPE_CHECKING:
    from mcphost.gateway.upstream import Upstream


async def list_knowledge(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    agents = state.bindings.agents
    bases = await state.knowledge.describe() if state.knowledge is not None else []
    answer = KnowledgeView(
        knowledge_bases=[
            KnowledgeBaseView(
                **kb.model_dump(),
                ready=kb.documents > 0,
                agents=[a.id for a in agents if kb.kb_id in a.resources.knowledge_bases],
            )
            for kb in bases
        ]
    )
    return JSONResponse(json_with_iso(answer))


async def search_knowledge(request: Request) -> Response:
    state = api_state(request)
    kb_id = path_id(request, "kb_id")
    query = parse_query(request, KnowledgeSearchQuery)
    if state.knowledge is None:
        raise NotFoundError(
            f"Knowledge base {kb_id!r} is not configured; this host has none.", details={"kb_id": kb_id}
        )
    hits = await state.knowledge.retrieve(kb_id, query.q, top_k=query.limit)
    answer = KnowledgeSearchAnswer(kb_id=kb_id, query=query.q, hits=hits)
    return JSONResponse(json_with_iso(answer))


def _params(schema: Mapping[str, object]) -> list[ToolParam]:
    """The top-level properties of an input schema (an upstream's JSON: every shape is checked)."""
    properties = schema.get("properties")
    required = schema.get("required")
    wanted = {str(r) for r in cast(list[object], required)} if isinstance(required, list) else set[str]()
    if not isinstance(properties, dict):
        return []
    out: list[ToolParam] = []
    for name, prop in cast(dict[str, object], properties).items():
        kind = cast(dict[str, object], prop).get("type") if isinstance(prop, dict) else None
        text = (
            "|".join(str(k) for k in cast(list[object], kind)) if isinstance(kind, list) else str(kind or "")
        )
        out.append(ToolParam(name=str(name), type=text, required=name in wanted))
    return out


def _upstream(upstream: Upstream, agents: Sequence[AgentConfig]) -> UpstreamInfo:
    status = upstream.status()
    schemas = {t.name: t.input_schema for t in upstream.cached_tools()}
    return UpstreamInfo(
        **status.model_dump(exclude={"tools"}),
        tools=[
            UpstreamToolInfo(
                name=t.name,
                tool=t.tool,
                description=t.description,
                params=_params(schemas.get(t.name, {})),
                agents=[a.id for a in agents if matches_tool_glob(a.resources.tools, t.name)],
            )
            for t in status.tools
        ],
        agents=[a.id for a in agents if could_match(a.resources.tools, upstream.name)],
    )


async def list_tools(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, ToolsQuery)
    gateway = state.gateway
    if gateway is not None and query.connect:
        await gateway.catalog()
    agents = state.bindings.agents
    upstreams = gateway.upstreams.values() if gateway is not None else ()
    answer = ToolsView(servers=[_upstream(u, agents) for u in upstreams])
    return JSONResponse(json_with_iso(answer))

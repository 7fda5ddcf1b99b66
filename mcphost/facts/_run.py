"""Run-level tools, resource and prompt: `run_context`, `knowledge_list`, `knowledge_retrieve`,
`mcphost://run/context` and the `instructions` prompt.

Owns how the run context, the granted knowledge bases and the agent's instructions are shown. Does not
build contexts (`_context.py`) or retrieve knowledge (a `KnowledgeRetriever` does, when the host has one).

Invariants:
- Knowledge is cut by the grant: `knowledge_list` shows only `grant.knowledge_bases`, and
  `knowledge_retrieve` refuses any other kb id with `unauthorized` before a retriever sees it.
- The instructions are the agent's static prompt (`config.prompt`) followed by the granted skills'
  descriptions (`context.instructions_text`, also hashed into `runtime.static_refs`), as one user
  message (MCP prompts have no system role).
"""

from __future__ import annotations

import mcp_types as types

from mcphost.context import instructions_text
from mcphost.facts._args import KnowledgeRetrieveArgs, NoArgs
from mcphost.facts._call import Call
from mcphost.facts._results import ToolCallError, dumps
from mcphost.grants import refusal
from mcphost.protocol import AgentRunContext
from mcphost.protocol.facts import KnowledgeBase, KnowledgeBases, KnowledgeHits

CONTEXT_URI = "mcphost://run/context"


async def run_context(call: Call, args: NoArgs) -> AgentRunContext:
    """The run's context without its token."""
    return await call.context()


async def knowledge_list(call: Call, args: NoArgs) -> KnowledgeBases:
    """The knowledge bases this run may search."""
    described = {kb.kb_id: kb for kb in (await call.context()).resources.knowledge_bases}
    bases: list[KnowledgeBase] = []
    for kb_id in sorted(call.grant.knowledge_bases):
        kb = described.get(kb_id)
        bases.append(
            KnowledgeBase(
                kb_id=kb_id,
                name=kb.name if kb is not None else kb_id,
                description=kb.description if kb is not None else "",
            )
        )
    return KnowledgeBases(knowledge_bases=bases)


async def knowledge_retrieve(call: Call, args: KnowledgeRetrieveArgs) -> KnowledgeHits:
    """Chunks of a granted knowledge base that match the query."""
    if args.kb_id not in call.grant.knowledge_bases:
        message, details = refusal(
            call.grant, f"knowledge:{args.kb_id}", f"search knowledge base {args.kb_id!r}"
        )
        raise ToolCallError("unauthorized", message, details=details)
    if call.knowledge is None:
        raise ToolCallError(
            "not_found", f"Knowledge base {args.kb_id!r} has no search index yet; nothing can be retrieved."
        )
    chunks = await call.knowledge.retrieve(args.kb_id, args.query, top_k=args.top_k, filters=args.filters)
    return KnowledgeHits(chunks=list(chunks[: args.top_k]))


async def context_resource(call: Call) -> types.ReadResourceResult:
    """`mcphost://run/context`: the same JSON as `run_context`."""
    text = dumps((await call.context()).model_dump(mode="json"))
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=CONTEXT_URI, mime_type="application/json", text=text)]
    )


async def instructions(call: Call) -> types.GetPromptResult:
    """The agent's static prompt and the descriptions of its skills."""
    ctx = await call.context()
    text = instructions_text(ctx.config, ctx.resources.skills)
    return types.GetPromptResult(
        description="The agent's instructions for this run",
        messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
    )

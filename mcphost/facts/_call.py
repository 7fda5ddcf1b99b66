"""One admitted facts call: the run, its grant and what a handler may use to answer.

Owns `Call`, the single argument every handler gets besides its arguments, and the scope predicates
every handler shares (which thread a run sees, which artifacts it may read). Does not admit calls (the
pipeline in `_dispatch.py` does) or touch the network.

Invariants:
- A `Call` exists only after the pipeline checked the grant (active, deadline, limits); handlers check
  scope (conversation, thread, artifact ownership, state scope) against `Call.grant` and nothing else.
- The run context is loaded at most once per call, and only when a handler asks for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from mcphost.facts.providers import KnowledgeRetriever, ModelCaller, RunParker
from mcphost.models import RunGrant
from mcphost.protocol import AgentRunContext, MediaContent
from mcphost.stores import ArtifactRecord, PendingArtifact, Stores


@dataclass
class Call:
    """What a handler answers with: the run, its frozen grant, the stores and the run's context."""

    run_id: str
    grant: RunGrant
    stores: Stores
    load_context: Callable[[], Awaitable[AgentRunContext]]
    knowledge: KnowledgeRetriever | None = None
    park: RunParker | None = None
    """Parks the run (a run whose runner parks, `grant.parks`); None on hosts without an orchestrator."""
    models: ModelCaller | None = None
    progress: Callable[[str], Awaitable[None]] | None = None
    """Sends a progress notification with this message: set when the client asked for progress."""
    _context: AgentRunContext | None = field(default=None, repr=False)

    async def context(self) -> AgentRunContext:
        """The run's context without its token (loaded once per call)."""
        if self._context is None:
            self._context = await self.load_context()
        return self._context

    def sees_thread(self, conversation_id: str | None, thread_id: str | None) -> bool:
        """Whether history or events of (conversation, thread) belong to this run's view: exactly its own
        conversation thread (or the conversation's main line when the run has no thread)."""
        return (
            self.grant.conversation_id is not None
            and conversation_id == self.grant.conversation_id
            and thread_id == self.grant.thread_id
        )

    async def may_read_artifact(self, record: ArtifactRecord | PendingArtifact) -> bool:
        """Owned by the run, owned by the run's conversation, or handed to the run as its input (its
        attachments, media contents, or the event's raw payload, `raw_ref`)."""
        if record.owner_run_id == self.run_id:
            return True
        if record.conversation_id is not None and record.conversation_id == self.grant.conversation_id:
            return True
        context = await self.context()
        run_input = context.input
        handed = {ref.artifact_id for ref in run_input.attachments}
        if context.event.raw_ref is not None:
            handed.add(context.event.raw_ref)
        handed.update(c.artifact_id for c in run_input.contents if isinstance(c, MediaContent))
        return record.artifact_id in handed

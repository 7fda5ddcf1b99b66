"""Warm harness sessions on the host side: the stable session endpoint's identity, token and binding.

A warm harness process (`[agents.config] warm = true`) lives across the runs of one conversation, so its
MCP config cannot carry a run's URL and token. It is given `/sessions/{session_id}/mcp` and a session
token instead (and, on host models, `/sessions/{session_id}/models/...` with the same token); this module
names the session, derives its token, and answers which run the endpoints currently serve. Does not own
serving the endpoints (`facts/server.py`, `proxy/_session.py`), the SQL behind the binding
(`stores/warm.py`), nor the warm processes (they live in the runner's plugin, `mcphost_runners/_harness_warm.py`).

Invariants:
- A session id names (agent, conversation, thread): `ses_` + 32 hex digits of their SHA-256. The token is
  an HMAC of the session id under a key kept in the database (`WarmSessionStore.key`, created once), so
  every host on one database derives and verifies the same token; it is never stored.
- The binding is the database's: `offer` puts the session into the run's context, and the run's start
  transaction records it on the run (`runs.warm_session_id`). A session's current run is its running run
  with an unrevoked grant, read fresh for every request (`current_run`), never cached: a run that ended
  stops being served by every replica at the commit that ended it, and between runs there is none.
"""

from __future__ import annotations

import hashlib
import hmac
import re

from mcphost.protocol import AgentRunContext, ModelEndpoints, WarmSessionAccess
from mcphost.stores.warm import WarmSessionStore

SESSION_PATH = "/sessions/{session_id}/mcp"
SESSION_MODELS_PATH = "/sessions/{session_id}/models"
SESSION_ID = re.compile(r"^ses_[0-9a-f]{32}$")


def session_url(public_url: str, session_id: str) -> str:
    return f"{public_url.rstrip('/')}/sessions/{session_id}/mcp"


def session_model_endpoints(public_url: str, session_id: str) -> ModelEndpoints:
    """The session's model endpoints: those of its current run, at a URL that outlives each run."""
    base = f"{public_url.rstrip('/')}/sessions/{session_id}/models"
    return ModelEndpoints(anthropic=f"{base}/anthropic", openai=f"{base}/openai/v1")


class WarmSessions:
    """Session ids and tokens, and the session → run bindings the database holds."""

    def __init__(
        self,
        store: WarmSessionStore,
        *,
        key: bytes,
        max_sessions: int = 8,
        idle_timeout_s: float = 600.0,
        max_rss_mb: int = 2048,
    ) -> None:
        """Use `open` to get the database's key; `key` here is for tests of other keys."""
        if len(key) < 16:
            raise ValueError(f"a warm session key needs at least 16 bytes; got {len(key)}")
        self._store = store
        self._key = key
        self._limits = {
            "max_sessions": max_sessions,
            "idle_timeout_s": idle_timeout_s,
            "max_rss_mb": max_rss_mb,
        }

    @classmethod
    async def open(
        cls,
        store: WarmSessionStore,
        *,
        max_sessions: int = 8,
        idle_timeout_s: float = 600.0,
        max_rss_mb: int = 2048,
    ) -> WarmSessions:
        """The warm sessions of the database behind `store`, with its token key (created if missing)."""
        return cls(
            store,
            key=await store.key(),
            max_sessions=max_sessions,
            idle_timeout_s=idle_timeout_s,
            max_rss_mb=max_rss_mb,
        )

    @staticmethod
    def session_id(agent_id: str, conversation_id: str, thread_id: str | None) -> str:
        digest = hashlib.sha256(f"{agent_id}\0{conversation_id}\0{thread_id or ''}".encode()).hexdigest()
        return f"ses_{digest[:32]}"

    def token(self, session_id: str) -> str:
        """The session's bearer token (a secret: only for the runner's context)."""
        return "mst_" + hmac.new(self._key, session_id.encode(), hashlib.sha256).hexdigest()

    def token_matches(self, session_id: str, token: str) -> bool:
        return hmac.compare_digest(self.token(session_id), token)

    async def current_run(self, session_id: str) -> str | None:
        """The run the session endpoint serves now (read from the database), or None between runs.
        Store errors propagate."""
        return await self._store.current_run(session_id)

    async def latest_run(self, session_id: str) -> str | None:
        """The session's most recently started run, ended or not (where a refused call is audited)."""
        return await self._store.latest_run(session_id)

    def offer(self, ctx: AgentRunContext, *, agent_id: str, public_url: str) -> AgentRunContext:
        """`ctx` with its warm session endpoint (token-free; with the session's model endpoints when the
        run has model endpoints), or `ctx` itself when the run has no conversation or no MCP endpoint.
        Called while the run's context is built in its start
        transaction, which records the session on the run: that is what binds it."""
        mcp = ctx.context.mcp
        if ctx.conversation is None or mcp is None:
            return ctx
        session_id = self.session_id(agent_id, ctx.conversation.conversation_id, ctx.conversation.thread_id)
        access = WarmSessionAccess(
            session_id=session_id,
            url=session_url(public_url, session_id),
            max_sessions=int(self._limits["max_sessions"]),
            idle_timeout_s=float(self._limits["idle_timeout_s"]),
            max_rss_mb=int(self._limits["max_rss_mb"]),
            models=None if ctx.context.models is None else session_model_endpoints(public_url, session_id),
        )
        full = mcp.model_copy(update={"session": access})
        return ctx.model_copy(update={"context": ctx.context.model_copy(update={"mcp": full})})

    def with_token(self, ctx: AgentRunContext) -> AgentRunContext:
        """`ctx` with the session token in its warm session's headers (the runner's copy)."""
        mcp = ctx.context.mcp
        if mcp is None or mcp.session is None:
            return ctx
        headers = {"Authorization": f"Bearer {self.token(mcp.session.session_id)}"}
        session = mcp.session.model_copy(update={"headers": headers})
        full = mcp.model_copy(update={"session": session})
        return ctx.model_copy(update={"context": ctx.context.model_copy(update={"mcp": full})})


def wants_warm(config: object) -> bool:
    """The agent's runner config asks for a warm session (`[agents.config] warm = true`)."""
    return isinstance(config, dict) and config.get("warm") is True  # pyright: ignore[reportUnknownMemberType] -- agent config is an untyped TOML table

"""Warm harness sessions on the host side: the stable session endpoint's identity, token and binding.

A warm harness process (`[agents.config] warm = true`) lives across the runs of one conversation, so its
MCP config cannot carry a run's URL and token. It is given `/sessions/{session_id}/mcp` and a session
token instead; this module names the session, derives its token, and keeps which run the endpoint
currently serves. Does not own serving the endpoint (`facts/server.py`) nor the warm processes (they live
in the runner's plugin, `runners/_harness_warm.py`).

Invariants:
- A session id names (agent, conversation, thread): `ses_` + 32 hex digits of their SHA-256. The token is
  an HMAC of the session id under a key drawn when this host process starts, so it is stable for the
  session while the host (and the plugins it supervises) live, is never stored, and a restart changes it.
- The binding lives in this process's memory only: the session endpoint URL handed out is this host's
  own `public_url`, and a run is bound on the host that runs it (docs/architecture.md § warm sessions).
- Fail closed: a session is bound to at most one run; `unbind_run` removes the binding of a run that
  ended, and a session without a binding serves nothing. Binding a session that another run holds moves
  it (the conversation queue runs one run at a time, so that other run has ended or is about to).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import threading

from mcphost.protocol import AgentRunContext, WarmSessionAccess

logger = logging.getLogger(__name__)

SESSION_PATH = "/sessions/{session_id}/mcp"
SESSION_ID = re.compile(r"^ses_[0-9a-f]{32}$")


def session_url(public_url: str, session_id: str) -> str:
    return f"{public_url.rstrip('/')}/sessions/{session_id}/mcp"


class WarmSessions:
    """Session ids, session tokens and the session → run bindings of this host process."""

    def __init__(
        self,
        *,
        max_sessions: int = 8,
        idle_timeout_s: float = 600.0,
        max_rss_mb: int = 2048,
        key: bytes | None = None,
    ) -> None:
        self._key = key or secrets.token_bytes(32)
        self._limits = {
            "max_sessions": max_sessions,
            "idle_timeout_s": idle_timeout_s,
            "max_rss_mb": max_rss_mb,
        }
        self._run_of: dict[str, str] = {}
        self._session_of: dict[str, str] = {}
        self._lock = threading.Lock()
        """`bind` runs inside a run's start transaction, on SQLite on the writer thread
        (`Database.run_write`), while `unbind_run` runs on the event loop: each move is atomic."""

    @staticmethod
    def session_id(agent_id: str, conversation_id: str, thread_id: str | None) -> str:
        digest = hashlib.sha256(f"{agent_id}\0{conversation_id}\0{thread_id or ''}".encode()).hexdigest()
        return f"ses_{digest[:32]}"

    def token(self, session_id: str) -> str:
        """The session's bearer token (a secret: only for the runner's context)."""
        return "mst_" + hmac.new(self._key, session_id.encode(), hashlib.sha256).hexdigest()

    def token_matches(self, session_id: str, token: str) -> bool:
        return hmac.compare_digest(self.token(session_id), token)

    def bind(self, session_id: str, run_id: str) -> None:
        """From now on the session endpoint serves `run_id` (its grant, its token's run)."""
        with self._lock:
            earlier = self._run_of.get(session_id)
            if earlier is not None and earlier != run_id:
                logger.warning("warm session %s moves from run %s to run %s", session_id, earlier, run_id)
                self._session_of.pop(earlier, None)
            self._run_of[session_id] = run_id
            self._session_of[run_id] = session_id

    def unbind_run(self, run_id: str) -> str | None:
        """The run ended: its session (if any) serves nothing until the next bind; the session id."""
        with self._lock:
            session_id = self._session_of.pop(run_id, None)
            if session_id is not None and self._run_of.get(session_id) == run_id:
                del self._run_of[session_id]
        return session_id

    def run_of(self, session_id: str) -> str | None:
        return self._run_of.get(session_id)

    def offer(self, ctx: AgentRunContext, *, agent_id: str, public_url: str) -> AgentRunContext:
        """`ctx` with its warm session endpoint (token-free) and the session bound to the run; `ctx`
        itself when the run has no conversation or no MCP endpoint."""
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
        )
        self.bind(session_id, ctx.run_id)
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

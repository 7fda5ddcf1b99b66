"""`FactsServer`: the per-run MCP endpoint `/runs/{run_id}/mcp`, its authentication and its lifetime.

Is the ASGI endpoint the host mounts (`FactsServer.__call__`, the endpoint of `routes`) and owns the
checks every HTTP request passes before MCP sees it (DNS rebinding, bearer token, run grant), the SDK
session manager that serves both protocol eras, when sessions close (`end_run`, `close`, the sweeper).
Does not own tools or the call pipeline (`_dispatch.py`), the session bookkeeping and how a session is
closed (`_sessions.py`), nor the grant itself (`grants.py`, the `runs` table).

Invariants:
- One SDK server and one tool table serve every run; the path's run id and the bearer token select the
  run. Every HTTP request is checked in this order: Host/Origin (421/403), the run exists (404), a
  bearer token is present (401), it is the run's (401, compared in constant time against the stored
  SHA-256), the grant is active (401). Refusals are JSON-RPC error bodies (`id: null`, code -32001 for
  401) that say why; tokens are never logged or echoed. A 401 on an existing run is audited on that run
  (tool `http <METHOD>`, digest of the body), within a per-run refusal budget (`RefusalBudget`) so
  unauthenticated traffic cannot turn into unbounded database writes.
- Both eras on one endpoint: a request whose `MCP-Protocol-Version` names a 2026-07-28+ revision is
  served statelessly; anything else goes through the 2025-11-25 handshake and gets a session. A session
  belongs to the principal (run id, token hash) that opened it: the SDK answers 404 when it is used on
  another run's path or with another token.
- `end_run(run_id)` makes this process refuse the run's token at once (401, whatever the database says
  yet), cancels the run's in-flight calls (they answer `cancelled`), forgets its limits and closes the
  sessions it opened here. Runs ended by another process are noticed within the grant cache TTL; the
  sweeper then closes their sessions here too.
- `/sessions/{session_id}/mcp` (with `warm`, `mcphost.warm`): a warm harness session's stable endpoint,
  served by every replica on the database. Checked in this order: Host/Origin, the session id's form
  (404), its session token (401, constant time, under the database's key), the session's current run
  read fresh from the database for this request and its grant still active here (else 403: refused
  between runs; `end_run` makes this process refuse at once, the run's end commit every replica); then
  served exactly as a request of that run (its `RunAccess`: grant, limits, audit), each call a span
  under that run's trace whatever `_meta` the warm process sends. Its handshake-era MCP sessions belong
  to the warm session, not to one run, and are not closed by `end_run`. A refused session request is
  audited on the session's current or latest run (tool `http <METHOD> session`, within the refusal
  budget); with no run to hold it, it is logged and counted (`_refuse_session`).
- A storage outage (`StorageUnavailableError`) while reading a run's grant or a session's run is a 503
  that says to retry, logged as a warning with the driver's error; finding the run to audit a refusal
  on during one only skips the audit row. Any other error propagates to the app's error handling (a
  500 there, logged with its traceback): it is a bug, not an outage.
- Host and Origin are checked by the host's one `HttpGuard` (`guard.py`), the same policy `/v1` uses
  (DNS-rebinding and cross-site protection): 421 for a Host it does not serve, 403 for a foreign Origin.
- Everything that runs in the background (the SDK session manager, the audit writer, the sweeper) is
  owned by `running()` and stopped when it exits, queued audit rows stored first; requests arriving
  while it is not entered get 503.
- `close()`, awaited before the HTTP server stops (`serving.serve_http`), refuses every request from then
  on (503) and closes each handshake-era session a request is in flight on (a client's open GET stream,
  say, which a warm process keeps for its whole life): the HTTP server then finds no response to wait
  for, instead of waiting its graceful timeout and cancelling the stream with a traceback.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.routing import BaseRoute, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcphost.common.periodic import Periodic
from mcphost.errors import StorageUnavailableError
from mcphost.facts._dispatch import ACCESS_KEY, FactsDispatch
from mcphost.facts._grants import GrantCache, RunAccess
from mcphost.facts._limits import LimitRegistry, RefusalBudget
from mcphost.facts._sessions import InFlight, RunSessions, close_session
from mcphost.facts.endpoint import MCP_PATH, UNAUTHORIZED_RPC_CODE, mcp_routes, refusal
from mcphost.facts.providers import (
    ContextProvider,
    HostToolProvider,
    KnowledgeRetriever,
    ModelCaller,
    ReplayAnswers,
    RunParker,
)
from mcphost.grants import token_matches
from mcphost.guard import HttpGuard
from mcphost.projection import Projector
from mcphost.runtimes.fence import fence_of, fenced_matches
from mcphost.stores import GrantRecord, Stores
from mcphost.warm import SESSION_ID, WarmSessions

logger = logging.getLogger(__name__)

MAX_REQUEST_BODY_BYTES = 16 * 1024 * 1024
"""Room for a 10 MiB storage value as base64 inside a JSON-RPC request."""
SWEEP_INTERVAL_S = 30.0
END_RUN_WAIT_S = 2.0
"""How long `end_run` waits for the run's cancelled calls to answer before closing its sessions."""
SESSION_CLOSE_GRACE_S = 0.5
"""How long a closing session keeps its streams open so the last answers reach the client."""
REFUSED_BODY_DIGEST_BYTES = 1024 * 1024
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
_SESSION_METHODS = frozenset({"GET", "POST", "DELETE"})
"""The methods a session refusal is recorded under by name (others as `OTHER`: bounded metric labels)."""
_UNATTRIBUTED = "session:*"
"""The refusal budget shared by refusals on sessions that no run ever served (their log lines)."""


def _cause(exc: StorageUnavailableError) -> object:
    """What the log says about a storage outage: the driver's error behind the fixed message."""
    return exc.__cause__ or exc.message


def _bearer(headers: Headers) -> str | None:
    value = headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


async def _read_body(receive: Receive, limit: int) -> bytes:
    """Up to `limit` bytes of the request body."""
    body = bytearray()
    while len(body) < limit:
        message = await receive()
        if message["type"] != "http.request":
            break
        body.extend(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return bytes(body[:limit])


def _principal(run_id: str, record: GrantRecord) -> AuthenticatedUser:
    """The identity the SDK binds sessions to: the run and its token's hash (never the token)."""
    token_hash = record.grant.token_hash
    return AuthenticatedUser(AccessToken(token=token_hash, client_id=run_id, scopes=[], subject=token_hash))


class FactsServer:
    """The host-wide MCP server behind `/runs/{run_id}/mcp`.

    The server is itself the ASGI endpoint of `/runs/{run_id}/mcp`: mount `routes` in the host's Starlette
    app (or serve `asgi_app`), enter `running()` in its lifespan, and call `end_run(run_id)` when a run ends.
    """

    def __init__(
        self,
        stores: Stores,
        *,
        context_provider: ContextProvider | None = None,
        host_tools: HostToolProvider | None = None,
        knowledge: KnowledgeRetriever | None = None,
        models: ModelCaller | None = None,
        guard: HttpGuard | None = None,
        on_call: Callable[[str, str], None] | None = None,
        grant_ttl_s: float = 2.0,
        session_idle_timeout_s: float = 600.0,
        json_response: bool = False,
        refusal_audits_per_s: float = 5.0,
        refusal_audit_burst: int = 20,
        replay: ReplayAnswers | None = None,
        park: RunParker | None = None,
        warm: WarmSessions | None = None,
        skills: Projector | None = None,
    ) -> None:
        """
        Args:
            stores: the host's stores (runs, facts, audit).
            context_provider: returns the context a run was started with (see `providers`).
            host_tools: upstream tools exposed as `<server>__<tool>`; none without it.
            knowledge: knowledge retrieval; without it `knowledge_retrieve` answers `not_found`.
            models: the host's models (`proxy.calls.ModelCalls`); without it `models_list` lists none and
                `models_invoke` / `models_rerank` / `models_embed` answer `not_found`.
            guard: the host's Host/Origin policy, shared with `/v1` (default: loopback names and
                origins only).
            on_call: called with (tool, outcome) for every audited call, as its audit row is written
                (the host's `mcphost_mcp_calls_total`).
            grant_ttl_s: how long a grant read from the database is trusted before it is read again.
            session_idle_timeout_s: a handshake-era session with no request in flight for this long ends.
            json_response: answer POSTs with JSON bodies instead of SSE streams.
            refusal_audits_per_s, refusal_audit_burst: how many refused HTTP requests per run are
                audited (a token bucket); the rest are refused without an audit row.
            replay: serve a replay (`mcphost replay`): every call is answered from the recording
                instead of the stores, host tools or knowledge.
            park: parks a run whose runner parks (`grant.parks`) when one of its calls needs an
                approval; without it such a call waits like any other.
            warm: the warm sessions whose endpoint `/sessions/{session_id}/mcp` this server serves (the
                grant of the run each is bound to); without it that path answers 404.
            skills: the host's skill folders, served as `skill://` resources to the runs granted them;
                without it none are listed.
        """
        self._stores = stores
        self._grants = GrantCache(stores.runs, ttl_s=grant_ttl_s)
        self._limits = LimitRegistry(stores.audit)
        self._dispatch = FactsDispatch(
            stores,
            self._grants,
            self._limits,
            context_provider=context_provider,
            host_tools=host_tools,
            knowledge=knowledge,
            models=models,
            on_call=on_call,
            replay=replay,
            park=park,
            skills=skills,
        )
        self._guard = guard or HttpGuard()
        self._session_idle_timeout_s = session_idle_timeout_s
        self._json_response = json_response
        self._sessions = RunSessions()
        self._refusals = RefusalBudget(refusal_audits_per_s, refusal_audit_burst)
        self._manager: StreamableHTTPSessionManager | None = None
        self._tg: TaskGroup | None = None
        self._closing = False
        self._in_flight = InFlight()
        self._warm = warm
        self._on_call = on_call
        self._routes = mcp_routes(self)
        self.asgi_app: ASGIApp = Router(routes=self._routes)
        """A standalone ASGI app serving only `/runs/{run_id}/mcp` (no lifespan: enter `running()`)."""

    @property
    def warm(self) -> WarmSessions | None:
        """The warm sessions this server serves at `/sessions/{session_id}/mcp` (None: that path is 404)."""
        return self._warm

    @property
    def routes(self) -> list[BaseRoute]:
        """The route to mount in the host's Starlette app: `MCP_PATH`, served by this server itself."""
        return list(self._routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI endpoint of `MCP_PATH` (a Starlette `Route` passes the raw ASGI call to an instance)."""
        if scope["type"] != "http":
            return
        if "session_id" in scope.get("path_params", {}):
            await self.handle_session(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    # -- lifetime --------------------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[FactsServer]:
        """Serve requests: owns the SDK session manager (sessions and their tasks), the audit writer and
        the sweeper; on exit, queued audit rows are stored before the rest stops."""
        if self._manager is not None:
            raise RuntimeError("FactsServer.running() is already entered; enter it once, in the lifespan.")
        manager = StreamableHTTPSessionManager(
            self._dispatch.server,
            json_response=self._json_response,
            security_settings=None,  # Host/Origin are checked before the manager sees a request.
            session_idle_timeout=self._session_idle_timeout_s,
            max_request_body_size=MAX_REQUEST_BODY_BYTES,
        )
        async with manager.run(), anyio.create_task_group() as tg:
            await tg.start(self._dispatch.audit.run)
            self._manager, self._tg = manager, tg
            tg.start_soon(
                Periodic(
                    "the facts server sweep", self.sweep, interval_s=SWEEP_INTERVAL_S, wait_first=True
                ).run
            )
            try:
                yield self
            finally:
                self._manager = self._tg = None
                await self._dispatch.audit.close()
                tg.cancel_scope.cancel()

    async def close(self) -> None:
        """Stop serving: refuse every request from now on (503) and close the sessions requests are in
        flight on, so those responses end. Await it before the HTTP server stops; the sessions close
        concurrently, each bounded like `end_run`'s."""
        self._closing = True
        sessions, manager = self._in_flight.sessions(), self._manager
        if not sessions or manager is None:
            return
        logger.info("the MCP server is closing: closing %d sessions with requests in flight", len(sessions))
        async with anyio.create_task_group() as tg:
            for session_id, (path, principal) in sessions.items():
                tg.start_soon(close_session, manager, path, session_id, principal)

    async def end_run(self, run_id: str) -> None:
        """The run ended: refuse its token from now on, cancel its calls and close its sessions here.

        Returns once the cancelled calls have answered (`cancelled`), at most `END_RUN_WAIT_S` later;
        the run's sessions close in the background a moment after, so those answers reach the client.
        """
        self._grants.end(run_id)
        cancelled = self._dispatch.cancel_run(run_id)
        self._limits.drop(run_id)
        sessions = self._sessions.pop(run_id)
        if cancelled or sessions:
            logger.info(
                "run %s ended: cancelled %d facts calls, closing %d sessions",
                run_id,
                cancelled,
                len(sessions),
            )
        if cancelled:
            with anyio.move_on_after(END_RUN_WAIT_S):
                await self._dispatch.wait_idle(run_id)
        if sessions and self._tg is not None:
            self._tg.start_soon(self._close_sessions, run_id, sessions)

    async def _close_sessions(self, run_id: str, sessions: dict[str, AuthenticatedUser]) -> None:
        await anyio.sleep(SESSION_CLOSE_GRACE_S)
        for session_id, principal in sessions.items():
            if (manager := self._manager) is not None:
                await close_session(manager, MCP_PATH.format(run_id=run_id), session_id, principal)

    def in_flight(self, run_id: str) -> int:
        """How many facts calls of the run are running on this process."""
        return self._dispatch.in_flight(run_id)

    def open_sessions(self, run_id: str) -> int:
        """How many handshake-era sessions the run has open on this process."""
        return self._sessions.count(run_id)

    async def sweep(self) -> None:
        """Drop stale cache entries and limits; close sessions of runs that ended elsewhere."""
        self._grants.sweep()
        self._limits.sweep()
        for run_id in self._sessions.runs():
            record = await self._grants.get(run_id)
            if record is None or not record.active:
                await self.end_run(run_id)

    # -- requests --------------------------------------------------------------------------------------

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authenticate one HTTP request to `/runs/{run_id}/mcp` and hand it to the MCP session manager."""
        started = time.perf_counter()
        headers = Headers(scope=scope)
        refused = self._guard.site_refusal(headers)
        if refused is not None:
            await refusal(refused.status, refused.message, -32600)(scope, receive, send)
            return
        run_id = str(scope.get("path_params", {}).get("run_id", ""))
        if not _RUN_ID.match(run_id):
            await refusal(404, f"run {run_id[:100]!r} does not exist", -32600)(scope, receive, send)
            return
        read, record = await self._read_grant(run_id, scope, receive, send)
        if not read:
            return
        if record is None:
            await refusal(404, f"run {run_id} does not exist", -32600)(scope, receive, send)
            return
        token = _bearer(headers)
        reason: str | None = None
        if token is None:
            reason = "missing Authorization: Bearer token"
        elif not token_matches(token, record.grant.token_hash):
            reason = await self._claim_refusal(run_id, token, record.grant.token_hash)
        if reason is None and not record.active:
            reason = f"run {run_id} is not active"
        if reason is not None:
            await self._refuse(run_id, reason, started, scope, receive, send)
            return
        manager = self._serving()
        if manager is None:
            await refusal(503, self._not_serving(), -32603)(scope, receive, send)
            return
        principal = _principal(run_id, record)
        inner: dict[str, Any] = {**scope, "user": principal, ACCESS_KEY: RunAccess(run_id, record)}
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        send = send if session_id is not None else self._watch_new_session(run_id, principal, send)
        with self._in_flight.serving(scope["path"], session_id, principal):
            await manager.handle_request(inner, receive, send)
        if session_id is not None and scope["method"] == "DELETE":
            self._sessions.closed(run_id, session_id)

    async def _claim_refusal(self, run_id: str, token: str, token_hash: str) -> str | None:
        """None when `token` is the MCP token of the claim that holds the remote run now (`runtimes/
        fence.py`), else why it is refused: a runtime whose lease lapsed keeps a token of an old fence."""
        fence = fence_of(token)
        if fence is None or not fenced_matches(token, token_hash, run_id, fence):
            return "token does not belong to this run"
        current = await self._stores.dispatch.held_fence(run_id)
        if current != fence:
            return (
                f"token is of claim {fence} of run {run_id}, which no longer holds it (its runtime's lease "
                "lapsed, or the run ended)"
            )
        return None

    async def handle_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authenticate one HTTP request to `/sessions/{session_id}/mcp` and serve it as a request of the
        session's current run (its grant, its audit, its limits), or refuse it (403) between runs."""
        started = time.perf_counter()
        headers = Headers(scope=scope)
        refused = self._guard.site_refusal(headers)
        if refused is not None:
            await refusal(refused.status, refused.message, -32600)(scope, receive, send)
            return
        session_id = str(scope.get("path_params", {}).get("session_id", ""))
        warm = self._warm
        if warm is None or not SESSION_ID.match(session_id):
            await refusal(404, f"warm session {session_id[:100]!r} does not exist", -32600)(
                scope, receive, send
            )
            return
        token = _bearer(headers)
        if token is None or not warm.token_matches(session_id, token):
            reason = (
                "missing Authorization: Bearer token"
                if token is None
                else "token does not belong to this session"
            )
            await self._refuse_session(session_id, 401, reason, started, scope, receive, send)
            return
        try:
            # Read fresh for every request (never cached): the run that ended stops here at its commit.
            run_id = await warm.current_run(session_id)
        except StorageUnavailableError as exc:
            logger.warning("could not read the current run of warm session %s: %s", session_id, _cause(exc))
            await refusal(503, "the host cannot read warm sessions right now; retry", -32603)(
                scope, receive, send
            )
            return
        record = None
        if run_id is not None:
            read, record = await self._read_grant(run_id, scope, receive, send)
            if not read:
                return
        if run_id is None or record is None or not record.active:
            message = (
                f"warm session {session_id} has no active run: the host refuses every call between the "
                "runs of a session; the next run of its conversation binds it again"
            )
            await self._refuse_session(session_id, 403, message, started, scope, receive, send)
            return
        manager = self._serving()
        if manager is None:
            await refusal(503, self._not_serving(), -32603)(scope, receive, send)
            return
        # The SDK binds handshake-era sessions to the session (stable across runs), not to one run.
        principal = AuthenticatedUser(
            AccessToken(token=session_id, client_id=session_id, scopes=[], subject=session_id)
        )
        access = RunAccess(run_id, record, session_id=session_id)
        inner: dict[str, Any] = {**scope, "user": principal, ACCESS_KEY: access}
        with self._in_flight.serving(scope["path"], headers.get(MCP_SESSION_ID_HEADER), principal):
            await manager.handle_request(inner, receive, send)

    def _serving(self) -> StreamableHTTPSessionManager | None:
        """The session manager, or None when requests are refused (not running, or closing)."""
        return None if self._closing else self._manager

    def _not_serving(self) -> str:
        if self._closing:
            return "the MCP server is shutting down"
        return "the MCP server is not running"

    async def _refuse_session(
        self,
        session_id: str,
        status: int,
        reason: str,
        started: float,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Answer a refused session request with `status` and `reason`, leaving evidence of it.

        Within the session's refusal budget, the refusal is audited (tool `http <METHOD> session`,
        `unauthorized`) on the session's current run, else on its latest run (the one that just ended,
        whose warm process made the call); a session no run ever served has no run to hold the row, so
        the refusal is logged (within a host-wide budget) and counted in `mcphost_mcp_calls_total`
        instead. Past the budgets the request is still refused, only not recorded."""
        code = UNAUTHORIZED_RPC_CODE
        response = refusal(status, reason, code)
        method = scope["method"] if scope["method"] in _SESSION_METHODS else "OTHER"
        tool = f"{method} session"
        warm = self._warm
        if warm is not None and self._refusals.allow(f"session:{session_id}"):
            run_id: str | None = None
            try:
                run_id = await warm.current_run(session_id) or await warm.latest_run(session_id)
            except StorageUnavailableError as exc:
                logger.warning(
                    "could not find the run of warm session %s to audit a refusal on: %s",
                    session_id,
                    _cause(exc),
                )
            if run_id is not None:
                body = await _read_body(receive, REFUSED_BODY_DIGEST_BYTES)
                await self._dispatch.audit_refusal(run_id, tool, body, len(response.body), started)
                await response(scope, receive, send)
                return
            if self._refusals.allow(_UNATTRIBUTED):
                logger.warning(
                    "refused %s on warm session %s, which no run serves or served (HTTP %d): %s",
                    method,
                    session_id,
                    status,
                    reason,
                )
        if self._on_call is not None:
            self._on_call(f"http {tool}", "refused")
        await response(scope, receive, send)

    async def _read_grant(
        self, run_id: str, scope: Scope, receive: Receive, send: Send
    ) -> tuple[bool, GrantRecord | None]:
        """(True, the run's grant record or None when there is no such run), or (False, None) when the
        stores could not answer (503 sent)."""
        try:
            return True, await self._grants.get(run_id)
        except StorageUnavailableError as exc:
            logger.warning("could not read the grant of run %s: %s", run_id, _cause(exc))
            await refusal(503, "the host cannot read run grants right now; retry", -32603)(
                scope, receive, send
            )
            return False, None

    async def _refuse(
        self, run_id: str, reason: str, started: float, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Answer 401 with the reason, auditing the attempt on the run (within the refusal budget)."""
        response = refusal(401, reason)
        if self._refusals.allow(run_id):
            body = await _read_body(receive, REFUSED_BODY_DIGEST_BYTES)
            await self._dispatch.audit_refusal(run_id, scope["method"], body, len(response.body), started)
        await response(scope, receive, send)

    def _watch_new_session(self, run_id: str, principal: AuthenticatedUser, send: Send) -> Send:
        async def watching(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                created = Headers(raw=message["headers"]).get(MCP_SESSION_ID_HEADER)
                if created is not None:
                    self._sessions.opened(run_id, created, principal)
            await send(message)

        return watching

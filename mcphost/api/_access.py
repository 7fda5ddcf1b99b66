"""Who may use a route: the caller of a request, the check of the role its route declares, and the
rule of a `sender` key's own runs.

Owns finding the caller (`guard.Caller`: `_middleware.ApiGuard` finds it for `/v1`; `check_access` for a
meta endpoint that needs a key), refusing a key whose role does not reach the route (403, naming the role)
and hiding the runs a sender did not create. Does not own the keys, the roles or what each reaches
(`guard.py`) nor which route requires what (`_routes`, one role per row).

Invariants:
- `_routes.routes()` puts every handler behind `check_access`: the role is checked before the handler
  reads a body or the stores, so a refused request reads and changes nothing.
- A run a sender key did not create answers exactly as a run that does not exist (404, the same
  message: `stores.runs.run_not_found`), so a sender cannot confirm another key's run ids.
- The caller is kept in the request's scope (`scope["state"]`), per request; no key is kept anywhere.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import Scope

from mcphost.api._state import api_state
from mcphost.config import PublicEndpoint
from mcphost.errors import ForbiddenError, UnauthorizedError
from mcphost.guard import Access, Caller, Refusal
from mcphost.models import Run
from mcphost.stores.runs import run_not_found

CALLER_STATE = "mcphost_caller"


def remember(scope: Scope, caller: Caller) -> None:
    """Keep the request's caller for `check_access` and the handlers."""
    scope.setdefault("state", {})[CALLER_STATE] = caller


def caller_of(request: Request) -> Caller:
    """The caller of a request whose route checked its access (`check_access`)."""
    found = request.scope.get("state", {}).get(CALLER_STATE)
    assert isinstance(found, Caller), "the route's access is checked before its handler runs"
    return found


def _authenticated(request: Request) -> Caller:
    found = request.scope.get("state", {}).get(CALLER_STATE)
    if isinstance(found, Caller):
        return found
    verdict = api_state(request).guard.authenticate(request.headers)
    if isinstance(verdict, Refusal):
        raise UnauthorizedError(verdict.message)  # as on /v1: every refusal there is a 401
    remember(request.scope, verdict)
    return verdict


def check_access(request: Request, role: Access, *, own_runs: bool, public_as: PublicEndpoint | None) -> None:
    """Let the request through to a route that requires `role`, or raise.

    Raises:
        UnauthorizedError: no key, a wrong key, or a refused Host or Origin (a keyed meta endpoint).
        ForbiddenError: a key whose role does not reach `role` (and, where `own_runs`, is no sender).
    """
    if role in ("public", "signed"):
        return
    assert role not in ("run-token", "runtime-token", "site"), (
        "the facts server, the runtime protocol and the console check their own"
    )
    if public_as is not None and api_state(request).guard.is_public(public_as):
        return
    caller = _authenticated(request)
    if caller.reaches(role) or (own_runs and caller.own_runs_only):
        return
    also = " (or a 'sender' key, for the runs its events created)" if own_runs else ""
    raise ForbiddenError(
        f"{request.method} {request.url.path} needs a key with the role {role!r}{also}; key {caller.key!r} "
        f"has the role {caller.role!r}. Use a key with that role (or 'admin'), or change the key's role in "
        "[[api_keys]].",
        details={"required_role": role, "key": caller.key, "role": caller.role},
    )


def own_run(request: Request, run: Run) -> Run:
    """`run`, unless the caller is a sender that did not create it: then the run is not found."""
    caller = caller_of(request)
    if caller.own_runs_only and run.created_by != caller.key:
        raise run_not_found(run.run_id)
    return run

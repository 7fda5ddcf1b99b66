"""The HTTP API under `/v1` (DESIGN §7): event ingest, runs, resumable result streams, facts reads,
artifacts, runners, `/healthz`, `/metrics`, `/openapi.json` and `/docs`.

Owns the routes, what each accepts (pydantic query and body models with `extra="forbid"`), the shape of
each answer (the response models, which `/openapi.json` publishes), the one mapping of errors to HTTP
(`_errors`: every `HostError` becomes its JSON error response there), the middleware in front of the
routes (`_middleware`: the host's `HttpGuard` with the API keys, the storage 503, CORS, request metrics)
and the role check every route makes before its handler (`_access`, with the role each row of the route
table declares).
Does not own the policy of the guard (`guard.py`) nor the composition of the host: `app.py` builds the
`ApiState` the routes and middleware read. Endpoints raise; they never build an error response.

Module map: `_routes` (the route table, `routes()` and the OpenAPI document), `_endpoints` (events, runs,
run records, conversations, agents, runners, health and metrics endpoints), `_artifacts` (multipart upload, range downloads), `_resources` (knowledge bases, their search, upstream tools),
`_models` (request and response models), `_http` (query and body parsing, capped body reads, the
result streams: `json_event`, `EventStream`), `_errors` (errors → HTTP,
`CatchAll`), `_middleware` (the middleware, outermost first), `_access` (the caller, the role check, a
sender key's own runs), `_docs` (the `/docs` page), `_state`
(`ApiState`, `ApiLimits`); the metrics are `mcphost.metrics` (`HostMetrics`, re-exported). The two HTTP-only errors,
`RangeNotSatisfiableError` (416) and `UnavailableError` (503), live in `mcphost.errors` with the rest of
the tree and are re-exported here.

Invariants:
- Input is validated before anything is stored: a refused request changes nothing. Bodies are read
  with a size cap enforced while streaming (`Content-Length` is checked first, the byte count always),
  so an oversized body is refused with 413 without being buffered; uploads stream to disk, capped.
- Result streams read the results store, never a live queue: a stream that resumes after host sequence
  N (`Last-Event-ID`, else `?after=N`) gets every later result exactly once, in order. Each result is one
  SSE event whose `id` is its sequence; admission (`event: run`) and the end marker (`event: end`) carry no
  id, so they never move a client's resume point. A stream ends after the run's terminal result.
- A stream's producer runs in the request's task, its keep-alive, disconnect watch and send timeout in
  one watcher task owned by the response (`EventStream`); a client that goes away stops both, one that
  takes nothing for `SEND_TIMEOUT_S` is dropped. Streams end with their runs, also while `mcphost serve`
  drains.
- Metrics are this process's (prometheus_client, in `mcphost.metrics`): runs that ended here by status and
  their durations, MCP calls by tool and outcome, approval decisions by decision, schedule fires by
  outcome, HTTP requests by route template, active runs, plugin restarts, build info, and the process
  and Python collectors.
"""

from __future__ import annotations

from mcphost.api._artifacts import parse_range
from mcphost.api._channels import admit_channel_event
from mcphost.api._errors import EXCEPTION_HANDLERS, error_response, host_error_response
from mcphost.api._middleware import middleware
from mcphost.api._models import RunsPage
from mcphost.api._routes import openapi, routes
from mcphost.api._state import DEFAULT_MAX_UPLOAD_BYTES, MAX_EVENT_BODY_BYTES, ApiLimits, ApiState
from mcphost.errors import RangeNotSatisfiableError, UnavailableError
from mcphost.metrics import UNMATCHED_ROUTE, HostMetrics

__all__ = [
    "DEFAULT_MAX_UPLOAD_BYTES",
    "EXCEPTION_HANDLERS",
    "MAX_EVENT_BODY_BYTES",
    "UNMATCHED_ROUTE",
    "ApiLimits",
    "ApiState",
    "HostMetrics",
    "RangeNotSatisfiableError",
    "RunsPage",
    "UnavailableError",
    "admit_channel_event",
    "error_response",
    "host_error_response",
    "middleware",
    "openapi",
    "parse_range",
    "routes",
]

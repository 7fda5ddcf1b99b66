"""The host's operational error tree, drawn once here (STYLE 11).

```
HostError                          code            HTTP
├── ConfigError                    invalid_argument  (config file/key/expectation; the host does not start)
├── InvalidArgumentError           invalid_argument  400
│   ├── PayloadTooLargeError       payload_too_large 413
│   └── RangeNotSatisfiableError   invalid_argument  416 (a `Range` an artifact cannot satisfy)
├── NotFoundError                  not_found       404
│   ├── RunNotFoundError
│   ├── NoBindingError             (no agent bound to the event)
│   └── RunnerNotFoundError        runner.not_found
├── ConflictError                  conflict        409
│   ├── AmbiguousBindingError      (several agents match one event)
│   ├── IllegalTransitionError     (a run status move the table does not allow)
│   └── ConcurrencyRejectedError   (a run is already active under the `reject` policy)
├── UnauthorizedError              unauthorized    401
├── ForbiddenError                 unauthorized    403 (an API key whose role does not reach the route)
├── RateLimitedError               rate_limited    429
│   └── BudgetExceededError        budget_exceeded 429 (an `[agents.budget]` model budget is spent)
├── DeadlineExceededError          deadline_exceeded 504
├── UnavailableError               runtime_error   503 (the host is draining and takes no new work)
├── StorageUnavailableError        storage_unavailable 503 (the database or data_dir cannot be read or written)
├── StorageFullError               storage_full    507 (the disk under data_dir or the database is full)
├── StorageIntegrityError          runtime_error   500 (a blob that does not match its SHA-256)
├── ArtifactFetchError             runtime_error   502 (a lazy artifact's platform did not give its bytes)
├── PluginError                    runner.crashed  502 (a plugin process that died or broke protocol)
├── ModelCallError                 runtime_error   502 (a host model's chain failed or answered garbage)
└── gateway.upstream.UpstreamError runtime_error   500 (an upstream tool server unreachable or unusable)
```

Every class's docstring starts with "Raised when" (`tests/test_layout.py` checks every `HostError`
subclass in the product, here and elsewhere).

Broken invariants are `assert`/`ValueError`, not HostErrors. Failures an agent can fix come back from MCP
tools as `is_error` results, not as exceptions crossing the protocol.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from mcphost.common import excgroups

_E = TypeVar("_E", bound=BaseException)


class HostError(Exception):
    """Base of every operational failure. `code` is a PROTOCOL §5 code; `status` the HTTP status."""

    code: ClassVar[str] = "runtime_error"
    status: ClassVar[int] = 500

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class ConfigError(HostError):
    """Raised when the config file, a key in it or what it expects of the machine is wrong (the host does
    not start; the CLI exits 2 with the message)."""

    code = "invalid_argument"
    status = 400


class InvalidArgumentError(HostError):
    """Raised when a request, a tool call's arguments or a CLI argument is malformed or out of range; the
    message names the field and what is allowed."""

    code = "invalid_argument"
    status = 400


class PayloadTooLargeError(InvalidArgumentError):
    """Raised when a body, an upload or a value is over its limit; the message gives the limit."""

    code = "payload_too_large"
    status = 413


class RangeNotSatisfiableError(InvalidArgumentError):
    """Raised when an artifact download asks for a `Range` the artifact cannot satisfy.

    A `Range` the artifact cannot satisfy (raised by the HTTP API's artifact downloads).
    """

    status = 416


class NotFoundError(HostError):
    """Raised when what a request names (a run, artifact, schedule, approval, delivery, conversation…) does
    not exist, or is not visible to the caller: both answer the same 404."""

    code = "not_found"
    status = 404


class RunNotFoundError(NotFoundError):
    """Raised when a run id names no run (or one a sender key may not see)."""


class NoBindingError(NotFoundError):
    """Raised when no configured agent is bound to an event (its type, source and match keys)."""


class RunnerNotFoundError(NotFoundError):
    """Raised when an agent names a runner no plugin serves."""

    code = "runner.not_found"


class ConflictError(HostError):
    """Raised when a request is valid but the state it meets does not allow it now (a reused event id, a
    decided approval, an active run)."""

    code = "conflict"
    status = 409


class AmbiguousBindingError(ConflictError):
    """Raised when several agents match one event and none is named."""


class IllegalTransitionError(ConflictError):
    """Raised when a run status move is not in the table of allowed moves."""


class ConcurrencyRejectedError(ConflictError):
    """Raised when a conversation already has an active run under the `reject` concurrency policy."""


class UnauthorizedError(HostError):
    """Raised when a request has no valid key or token for what it reaches (an API key, a run token, a
    hook signature, a runtime token)."""

    code = "unauthorized"
    status = 401


class ForbiddenError(HostError):
    """Raised when a known API key whose role does not reach the route (`[[api_keys]] role`); `details` names the
    role the route needs. PROTOCOL §5 has one code for "not granted", `unauthorized`."""

    code = "unauthorized"
    status = 403


class RateLimitedError(HostError):
    """Raised when a caller is over its rate limit (`Retry-After` says when to come back)."""

    code = "rate_limited"
    status = 429


class BudgetExceededError(RateLimitedError):
    """Raised when a host model call is refused before it reached the upstream: the budget `details["budget"]` names
    (`model_usd_per_run`, ...) would be exceeded by its reservation."""

    code = "budget_exceeded"


class DeadlineExceededError(HostError):
    """Raised when a bounded wait ends before its answer (a tool call's or an upstream's deadline)."""

    code = "deadline_exceeded"
    status = 504


class UnavailableError(HostError):
    """Raised when the host is draining for shutdown and takes no new work (the HTTP API)."""

    code = "runtime_error"
    status = 503


class StorageUnavailableError(HostError):
    """Raised when the database or `data_dir` cannot be used right now (gone, unreachable, read-only).

    The message says what failed and what an operator can do; it never carries a driver's text with
    credentials or SQL in it. Clients may retry (`Retry-After`); `/healthz` reports the same reason.
    """

    code = "storage_unavailable"
    status = 503


class StorageFullError(HostError):
    """Raised when the disk under `data_dir` (or the database's) has no room left: nothing was stored."""

    code = "storage_full"
    status = 507


class StorageIntegrityError(HostError):
    """Raised when a stored blob does not match its SHA-256 (it is never served)."""

    code = "runtime_error"
    status = 500


class ArtifactFetchError(HostError):
    """Raised when a lazy artifact's bytes could not be fetched from its platform (HTTP 404, a 5xx, a
    timeout, a refused token): nothing was stored, and the next read tries again."""

    code = "runtime_error"
    status = 502


class PluginError(HostError):
    """Raised when a plugin process died, broke the protocol or could not start."""

    code = "runner.crashed"
    status = 502


class ModelCallError(HostError):
    """Raised when a host model call of the MCP model tools found no usable answer: every model of its
    fallback chain failed (429, 5xx, unreachable) or the one that answered sent something that is not
    an answer. `details` names the model and each attempt."""

    code = "runtime_error"
    status = 502


def find_error(exc: BaseException, kind: type[_E] | tuple[type[_E], ...]) -> _E | None:
    """`exc` when it is a `kind`, else the first `kind` inside it when it is an exception group (errors
    raised inside task groups arrive wrapped, nested as deep as the task groups were), else None."""
    return excgroups.find(exc, kind)

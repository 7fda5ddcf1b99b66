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
└── PluginError                    runner.crashed  502 (a plugin process that died or broke protocol)
```

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
    code = "invalid_argument"
    status = 400


class InvalidArgumentError(HostError):
    code = "invalid_argument"
    status = 400


class PayloadTooLargeError(InvalidArgumentError):
    code = "payload_too_large"
    status = 413


class RangeNotSatisfiableError(InvalidArgumentError):
    """A `Range` the artifact cannot satisfy (raised by the HTTP API's artifact downloads)."""

    status = 416


class NotFoundError(HostError):
    code = "not_found"
    status = 404


class RunNotFoundError(NotFoundError):
    pass


class NoBindingError(NotFoundError):
    pass


class RunnerNotFoundError(NotFoundError):
    code = "runner.not_found"


class ConflictError(HostError):
    code = "conflict"
    status = 409


class AmbiguousBindingError(ConflictError):
    pass


class IllegalTransitionError(ConflictError):
    pass


class ConcurrencyRejectedError(ConflictError):
    pass


class UnauthorizedError(HostError):
    code = "unauthorized"
    status = 401


class ForbiddenError(HostError):
    """A known API key whose role does not reach the route (`[[api_keys]] role`); `details` names the
    role the route needs. PROTOCOL §5 has one code for "not granted", `unauthorized`."""

    code = "unauthorized"
    status = 403


class RateLimitedError(HostError):
    code = "rate_limited"
    status = 429


class BudgetExceededError(RateLimitedError):
    """A host model call refused before it reached the upstream: the budget `details["budget"]` names
    (`model_usd_per_run`, ...) would be exceeded by its reservation."""

    code = "budget_exceeded"


class DeadlineExceededError(HostError):
    code = "deadline_exceeded"
    status = 504


class UnavailableError(HostError):
    """The host is draining for shutdown and takes no new work (raised by the HTTP API)."""

    code = "runtime_error"
    status = 503


class StorageUnavailableError(HostError):
    """The database or `data_dir` cannot be used right now (gone, unreachable, read-only).

    The message says what failed and what an operator can do; it never carries a driver's text with
    credentials or SQL in it. Clients may retry (`Retry-After`); `/healthz` reports the same reason.
    """

    code = "storage_unavailable"
    status = 503


class StorageFullError(HostError):
    """The disk under `data_dir` (or the database's) has no room left: nothing was stored."""

    code = "storage_full"
    status = 507


class StorageIntegrityError(HostError):
    code = "runtime_error"
    status = 500


class PluginError(HostError):
    code = "runner.crashed"
    status = 502


def find_error(exc: BaseException, kind: type[_E] | tuple[type[_E], ...]) -> _E | None:
    """`exc` when it is a `kind`, else the first `kind` inside it when it is an exception group (errors
    raised inside task groups arrive wrapped, nested as deep as the task groups were), else None."""
    return excgroups.find(exc, kind)

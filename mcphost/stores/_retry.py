"""Database failures: which ones are a dropped connection, what a client is told, and retrying.

Owns the translation of driver errors into `StorageUnavailableError` or, for a full disk,
`StorageFullError` (`storage_error`), the test for a
dropped connection (`is_disconnect`) and `idempotent`, the decorator that retries a store method when
its connection was dropped. Does not own transactions (`engine.py`) or decide which methods are
idempotent (each store marks its own, and says so in its docstring).

Invariants:
- A client never sees a driver's text: `storage_error` gives a fixed message; the driver error (SQL,
  parameters, server text) stays the `__cause__` and goes to the log only.
- Integrity errors are not translated: the stores that expect them (a repeated key) turn them into
  their own answers.
- Only an idempotent store method is retried, and only when its connection was dropped (invalidated,
  closed under it, reset): repeating it whole gives the same answer and the same stored rows whether or
  not the first attempt committed. Every store method opens exactly one transaction, so retrying the
  method is retrying the transaction. Attempts: `ATTEMPTS`, with full-jitter exponential back-off
  (`WAIT_BASE_S` doubling, capped at `WAIT_MAX_S`), so replicas that lost their connections together do
  not come back in lockstep. Between attempts the caller stays cancellable.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

import anyio
from sqlalchemy.exc import DBAPIError, DisconnectionError, IntegrityError, SQLAlchemyError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from mcphost.errors import StorageFullError, StorageUnavailableError
from mcphost.stores.faults import is_disk_full

log = logging.getLogger(__name__)

ATTEMPTS = 4
"""Tries of an idempotent transaction whose connection was dropped (the first one included)."""
WAIT_BASE_S = 0.05
WAIT_MAX_S = 1.0
FULL_MESSAGE = (
    "The database has no room left (its disk is full); nothing was stored. Free space under the database "
    "and retry."
)
_FULL_SQLSTATE = "53100"  # PostgreSQL disk_full
_SQLITE_FULL = "database or disk is full"
UNAVAILABLE_MESSAGE = (
    "The database could not complete this operation (the connection failed or the database refused it); "
    "retry shortly. The cause is in the host's log."
)

P = ParamSpec("P")
T = TypeVar("T")


def is_disconnect(exc: BaseException | None) -> bool:
    """Whether `exc` (or the driver error behind a `StorageUnavailableError`) is a dropped connection."""
    if isinstance(exc, StorageUnavailableError):
        exc = exc.__cause__
    if isinstance(exc, DisconnectionError):
        return True
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or isinstance(exc.orig, OSError)
    return isinstance(exc, ConnectionError)


def _is_full(exc: BaseException) -> bool:
    orig = getattr(exc, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return is_disk_full(exc) or sqlstate == _FULL_SQLSTATE or _SQLITE_FULL in str(orig or "")


def storage_error(exc: BaseException) -> StorageUnavailableError | StorageFullError | None:
    """The client-facing error for a database failure, or None when `exc` is not one to translate.

    Integrity errors are left to the stores that expect them. A full disk is `StorageFullError`; other
    SQLAlchemy errors (a lost or refused connection, a locked or read-only database, an operation the
    server cancelled) and connection-level OS errors are `StorageUnavailableError`. Both carry a fixed
    message.
    """
    if isinstance(exc, IntegrityError | StorageUnavailableError | StorageFullError):
        return None
    if not isinstance(exc, SQLAlchemyError | ConnectionError):
        return None
    if _is_full(exc):
        return StorageFullError(FULL_MESSAGE)
    return StorageUnavailableError(UNAVAILABLE_MESSAGE)


def _log_retry(name: str, attempt: int, cause: BaseException | None) -> None:
    log.warning(
        "%s lost its database connection (attempt %d of %d); retrying: %s",
        name,
        attempt,
        ATTEMPTS,
        getattr(cause, "__cause__", None) or cause,
    )


def _log_tenacity_retry(name: str, state: RetryCallState) -> None:
    outcome = state.outcome
    # tenacity counts from the second attempt (the first ran before it; see `idempotent`)
    _log_retry(name, state.attempt_number + 1, None if outcome is None else outcome.exception())


def idempotent(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Retry `method` (one transaction, safe to repeat) when its database connection was dropped.

    The first attempt runs bare: it is the only one nearly every call makes, and tenacity's retry
    object, built per call, cost more than some of the transactions it wraps. The later attempts, if
    any, run under tenacity with the same back-off (the first wait is its wait after attempt one)."""
    name = method.__qualname__

    @functools.wraps(method)
    async def retrying(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except Exception as exc:
            if not is_disconnect(exc):
                raise
            _log_retry(name, 1, exc)
        await anyio.sleep(random.uniform(0, min(WAIT_BASE_S, WAIT_MAX_S)))  # full jitter, as tenacity's
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(ATTEMPTS - 1),
            wait=wait_random_exponential(multiplier=2 * WAIT_BASE_S, max=WAIT_MAX_S),
            retry=retry_if_exception(is_disconnect),
            sleep=anyio.sleep,
            before_sleep=functools.partial(_log_tenacity_retry, name),
            reraise=True,
        ):
            with attempt:
                return await method(*args, **kwargs)
        raise AssertionError("unreachable: tenacity re-raises the last failure")

    return retrying

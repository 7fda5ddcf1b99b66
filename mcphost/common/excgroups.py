"""Walking exception groups: errors raised inside task groups arrive wrapped, nested as deep as the groups.

Owns the one walk over a tree of `BaseExceptionGroup`s and the three questions asked of it: the first
exception of a kind (`find`), the first leaf (`first_leaf`, for a one-line reason) and the leaf a chain
of single-exception groups wraps (`sole_leaf`, which keeps a group of several failures whole). Does not
own what a caller does with the answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeGuard, TypeVar

_E = TypeVar("_E", bound=BaseException)


def is_exception_group(exc: BaseException) -> TypeGuard[BaseExceptionGroup[BaseException]]:
    """`isinstance(exc, BaseExceptionGroup)`, with the members typed: a bare `isinstance` leaves the
    group's type argument unknown."""
    return isinstance(exc, BaseExceptionGroup)


def walk(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then (when it is a group) everything inside it, depth first, in order."""
    yield exc
    if is_exception_group(exc):
        for inner in exc.exceptions:
            yield from walk(inner)


def find(exc: BaseException, kind: type[_E] | tuple[type[_E], ...]) -> _E | None:
    """`exc` when it is a `kind`, else the first `kind` inside it when it is a group, else None."""
    for found in walk(exc):
        if isinstance(found, kind):
            return found
    return None


def first_leaf(exc: BaseException) -> BaseException:
    """The first exception in `exc` that is not a group (`exc` itself when it is none)."""
    return next(found for found in walk(exc) if not isinstance(found, BaseExceptionGroup))


def sole_leaf(exc: BaseException) -> BaseException:
    """What a chain of single-exception groups wraps; a group of several is returned as it is."""
    while is_exception_group(exc) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc

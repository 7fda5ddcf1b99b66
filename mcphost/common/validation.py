"""A pydantic `ValidationError` as "where: what": the one wording of a refused value, host and runners alike.

Owns turning an error's `loc` into a dotted path and its `msg` into the text users read. Does not own the
sentence around it (each boundary says what was refused and what to do) nor which errors to show (the
first, or a list): callers pick `describe` or `problems`.

Invariants: a path is the `loc` parts joined with dots (list indices included, `items.0.text`), with
`skip` parts left out (the union tags of a discriminated union) and `root` when nothing is left; the
message drops pydantic's "Value error, " prefix (a validator's own sentence stands alone); inputs are never
echoed (errors are read without `input`, `url` or `ctx`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from pydantic import ValidationError


@dataclass(frozen=True, slots=True)
class Problem:
    """One error of a `ValidationError`."""

    where: str
    """The dotted path of the refused value (`root` for the value itself)."""
    what: str
    """pydantic's message, without its "Value error, " prefix."""
    type: str
    """pydantic's error type (`missing`, `extra_forbidden`, ...)."""

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def problems(exc: ValidationError, *, root: str, skip: Collection[object] = ()) -> list[Problem]:
    """Every error of `exc`, in pydantic's order."""
    found: list[Problem] = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(part) for part in error["loc"] if part not in skip) or root
        found.append(Problem(where, error["msg"].removeprefix("Value error, "), error["type"]))
    return found


def describe(exc: ValidationError, *, root: str, skip: Collection[object] = ()) -> str:
    """The first error as "where: what"."""
    return str(problems(exc, root=root, skip=skip)[0])

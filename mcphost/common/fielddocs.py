"""Field descriptions from the docstrings under the fields, read when a model's schema is first built.

Owns `DocumentedModel`, the base of every host and protocol model whose fields are documented the way
STYLE 6 asks (a string literal under the field becomes its description, so it reaches the JSON Schemas
runners, API clients and models read). It does not own the schemas: pydantic builds them as before.

Why not pydantic's `use_attribute_docstrings=True`: it reads the docstrings while each class is created.
On Python before 3.13 that walks the stack to the frame defining the class, asks `inspect` for each
frame's module (a scan of `sys.modules`), tokenizes the class's source and parses it twice. With a few
hundred models that was about half of what importing them cost, paid by every command and every plugin
start, though most of them never build a schema (`defer_build=True`). Here the docstrings are read at the
last moment they matter: when pydantic first builds the core schema of a class (its first validation or
JSON Schema) or of a model that nests it. Each module's source is parsed once, on the first such build
of one of its classes.

Invariants: a field's description is the one `use_attribute_docstrings=True` gives (the same rules;
a test compares both for every model); a `Field(description=...)` wins over the docstring; a field
inherited without being annotated again keeps the docstring of the class that declared it; a class
without readable source (built at run time, no file) gets no descriptions, as with pydantic.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import re
import sys
import weakref
from collections.abc import Iterator
from functools import cache

from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic_core import CoreSchema

_described: weakref.WeakSet[type[BaseModel]] = weakref.WeakSet()


def describe_fields(model: type[BaseModel]) -> None:
    """Give every field of `model` without a description the docstring under its declaration, if any."""
    for name, field in model.__pydantic_fields__.items():
        if field.description is None:
            field.description = _docstring(model, name)
    _described.add(model)


class DocumentedModel(BaseModel):
    """A model whose field descriptions are the docstrings under its fields, read on its first schema build
    (do not also set `use_attribute_docstrings`: that reads them again, at class creation)."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[BaseModel], handler: GetCoreSchemaHandler, /
    ) -> CoreSchema:
        if cls not in _described:
            describe_fields(cls)
        return handler(source)


def _docstring(model: type[BaseModel], name: str) -> str | None:
    # The class that declared the field: the first in the MRO that annotates it (a parametrized generic
    # annotates nothing itself; its origin follows it in the MRO).
    for owner in model.__mro__:
        if name in inspect.get_annotations(owner):
            if not issubclass(owner, DocumentedModel):
                return None
            return _class_docs(owner).get(name)
    return None


def _class_docs(owner: type[BaseModel]) -> dict[str, str]:
    found = _statement_docs(owner.__module__, owner.__qualname__)
    if found is not None:
        return found
    candidates = _module_docs(owner.__module__).get(owner.__qualname__, [])
    if len(candidates) > 1:  # the same name defined twice (in branches, or again): match the annotations
        annotated = set(inspect.get_annotations(owner))
        candidates = [c for c in candidates if set(c[0]) == annotated] or candidates
    return candidates[-1][1] if candidates else {}


@cache
def _statement_docs(module_name: str, qualname: str) -> dict[str, str] | None:
    """The field docstrings of a module-level class read from its own statement alone, or None when that
    statement cannot be told apart cheaply (then the whole module is parsed, `_module_docs`).

    Parsing only the class's lines costs a fraction of parsing its module (a large module's whole tree
    took ~10 ms per model module on a 2-core machine, paid by every process that validates with it).
    The statement is found only when unambiguous: a name without a dot (not nested, not local), exactly
    one `class NAME` line in the module at any indentation, that line at column 0; it ends before the
    next line at column 0 that is code. A cut that is not a complete statement fails to parse and falls
    back too.
    """
    if "." in qualname:
        return None
    lines, classes = _class_lines(module_name)
    starts = classes.get(qualname, [])
    if len(starts) != 1 or not lines[starts[0]].startswith("class"):
        return None
    first = starts[0]
    end = first + 1
    while end < len(lines) and not _ends_statement(lines[end]):
        end += 1
    try:
        body = ast.parse("".join(lines[first:end])).body
    except SyntaxError:
        return None
    if len(body) != 1 or not isinstance(body[0], ast.ClassDef):
        return None
    visitor = _DocstringVisitor()
    visitor.generic_visit(body[0])
    return visitor.docs


_CLASS_LINE = re.compile(r"[ \t]*class[ \t]+(\w+)")


@cache
def _class_lines(module_name: str) -> tuple[list[str], dict[str, list[int]]]:
    """The module's source lines, and the index of each `class NAME` line by NAME (any indentation)."""
    filename = getattr(sys.modules.get(module_name), "__file__", None)
    lines = linecache.getlines(filename) if filename else []
    classes: dict[str, list[int]] = {}
    for index, line in enumerate(lines):
        if "class" in line and (found := _CLASS_LINE.match(line)):
            classes.setdefault(found.group(1), []).append(index)
    return lines, classes


def _ends_statement(line: str) -> bool:
    """Whether `line` starts a new module-level statement (code at column 0; a `)` closes a header)."""
    return bool(line) and line[0] not in " \t\r\n#)"


@cache
def _module_docs(module_name: str) -> dict[str, list[tuple[frozenset[str], dict[str, str]]]]:
    """Per class qualname in the module's source: its annotated names and field docstrings."""
    module = sys.modules.get(module_name)
    if module is None:
        return {}
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):  # no file (built at run time, an interactive session)
        return {}
    found: dict[str, list[tuple[frozenset[str], dict[str, str]]]] = {}
    for qualname, node in _classes(ast.parse(source).body, ""):
        annotated = frozenset(
            s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
        )
        visitor = _DocstringVisitor()
        visitor.generic_visit(node)
        found.setdefault(qualname, []).append((annotated, visitor.docs))
    return found


def _classes(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.ClassDef]]:
    """Every class statement under `body` with its `__qualname__` (Python's rules: a class nests as
    `Outer.Inner`, a class in a function as `function.<locals>.Inner`)."""
    for node in body:
        if isinstance(node, ast.ClassDef):
            qualname = f"{prefix}{node.name}"
            yield qualname, node
            yield from _classes(node.body, f"{qualname}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _classes(node.body, f"{prefix}{node.name}.<locals>.")
        else:  # if/for/while/with/try/match: their statements nest without a name of their own
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from _classes([child], prefix)
                elif isinstance(child, ast.excepthandler | ast.match_case):
                    yield from _classes(
                        [c for c in ast.iter_child_nodes(child) if isinstance(c, ast.stmt)], prefix
                    )


class _DocstringVisitor(ast.NodeVisitor):
    """pydantic's rule for attribute docstrings: a string statement right after an annotated assignment
    to a name documents that name; nested classes and functions are not looked into."""

    def __init__(self) -> None:
        super().__init__()
        self.docs: dict[str, str] = {}
        self._target: str | None = None
        self._previous: type[ast.AST] | None = None

    def visit(self, node: ast.AST) -> None:
        super().visit(node)
        self._previous = type(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name):
            self._target = node.target.id

    def visit_Expr(self, node: ast.Expr) -> None:
        if (
            isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and self._previous is ast.AnnAssign
        ):
            if self._target:
                self.docs[self._target] = inspect.cleandoc(node.value.value)
            self._target = None

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        pass

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        pass

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        pass

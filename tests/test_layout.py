"""The layout rules of docs/architecture.md that a machine can check: a module past 600 lines says why."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 600


def test_every_product_module_past_600_lines_says_why_in_its_docstring() -> None:
    unexplained: list[str] = []
    for package in ("mcphost", "mcphost_runners", "mcphost_bridge"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            source = path.read_text(encoding="utf-8")
            if source.count("\n") <= LIMIT:
                continue
            docstring = ast.get_docstring(ast.parse(source)) or ""
            if f"Size: past {LIMIT} lines because" not in docstring:
                unexplained.append(str(path.relative_to(ROOT)))
    assert unexplained == []


def _classes() -> list[tuple[str, ast.ClassDef]]:
    found: list[tuple[str, ast.ClassDef]] = []
    for path in sorted((ROOT / "mcphost").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [
            (str(path.relative_to(ROOT)), node) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
        ]
    return found


def test_every_host_error_says_when_it_is_raised() -> None:
    """The error tree (`mcphost/errors.py`): every subclass of `HostError`, wherever it is defined, starts its
    docstring with "Raised when", so a reader of a handler knows what the class stands for."""
    classes = _classes()
    tree = {"HostError"}
    grew = True
    while grew:  # subclasses of subclasses, by name (the product has one class of each name that matters)
        before = len(tree)
        tree |= {
            node.name
            for _, node in classes
            if any(isinstance(base, ast.Name) and base.id in tree for base in node.bases)
        }
        grew = len(tree) > before
    silent = [
        f"{path}: {node.name}"
        for path, node in classes
        if node.name in tree - {"HostError"} and not (ast.get_docstring(node) or "").startswith("Raised when")
    ]
    assert len(tree) > 20  # the walk found the tree
    assert silent == []


def _exception_names() -> set[str]:
    """Builtin exception class names (`ValueError`, `OSError`, ...)."""
    import builtins

    return {
        name
        for name, value in vars(builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }


def test_no_class_is_named_like_an_exception_unless_it_is_one() -> None:
    """STYLE 5: a class named `…Error` is an exception. A record of an error (a run's `RunFailure`, an
    answer's `ErrorDetail`) says so in its name; `RunError` was a pydantic model."""
    classes: list[tuple[str, ast.ClassDef]] = []
    for package in ("mcphost", "mcphost_runners", "mcphost_bridge"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            classes += [
                (str(path.relative_to(ROOT)), n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
            ]
    product = {node.name for _, node in classes}

    def base_names(node: ast.ClassDef) -> list[str]:
        names = [
            b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
            for b in node.bases
        ]
        return [n for n in names if n]

    # An exception: a builtin one, a library's (a base from outside the product named like one), or a
    # product class deriving from one, by name.
    exceptions = _exception_names()
    grew = True
    while grew:
        before = len(exceptions)
        for _, node in classes:
            if any(
                name in exceptions or (name not in product and name.endswith(("Error", "Exception")))
                for name in base_names(node)
            ):
                exceptions.add(node.name)
        grew = len(exceptions) > before
    misnamed = [
        f"{path}: {node.name}"
        for path, node in classes
        if node.name.endswith("Error") and node.name not in exceptions
    ]
    assert "HostError" in exceptions  # the walk found the tree
    assert misnamed == []


def _is_fixture(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr in ("fixture", "hookimpl"):
            return True
    return node.name.startswith("pytest_")


def test_conftest_files_hold_fixtures_and_hooks_only() -> None:
    """Helpers live in private modules the tests import by name (`tests/mcphost/facts/_helpers.py`), so a
    reader finds where a name comes from; conftest.py holds what pytest injects: fixtures and hooks."""
    helpers: list[str] = []
    for path in sorted((ROOT / "tests").rglob("conftest.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) or (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_fixture(node)
            ):
                helpers.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert helpers == []

"""Why a Python plugin died before `initialize`, read from the last lines of its stderr.

Owns one question: did the process fail to import its code, and was that because one of mcphost's own
packages was shadowed (a package of the same name found first on the plugin's module search path) or
not found at all? The answer replaces the bare "last stderr line" in the plugin's `last_error`, which is
what `mcphost runners --check`, `GET /v1/runners` and the error of a run whose runner never registered
show. It does not own the process, the stderr pump or the decision to restart.

Invariant: only a diagnosis the lines prove is given; anything else (another exception, a traceback cut
off before its frames) is None, and the caller keeps the last stderr line as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import mcphost

OWN_PACKAGES = ("mcphost", "mcphost_runners", "mcphost_bridge")
"""The import packages of the mcphost distribution (the wheel's `packages` in pyproject.toml)."""
INSTALLED_AT = Path(mcphost.__file__).resolve().parent.parent
"""Where mcphost's packages are installed, side by side (site-packages, or the checkout when editable)."""

_FRAME = re.compile(r'^\s*File "(?P<path>[^"<]+)", line \d+')
_EXCEPTION = re.compile(r"^(?P<kind>ModuleNotFoundError|ImportError): (?P<text>.*)$")
_RUNPY_SPEC = re.compile(r": Error while finding module specification for '[\w.]+' \((?P<exception>.*)\)$")
"""`python -m a.b` when `a` cannot be imported at all."""
_RUNPY_MISSING = re.compile(r": No module named (?P<name>[\w.]+)$")
"""`python -m a.b` when `a` imports but has no `b`."""
_NO_MODULE = re.compile(r"^No module named '(?P<name>[\w.]+)'")


def import_failure(stderr_tail: Sequence[str], python: str) -> str | None:
    """What the tail says failed, worded for an operator, or None when it shows no import failure.

    `python` is the plugin command's first word, named in the message when a module is not found."""
    for line in stderr_tail:
        frame = _FRAME.match(line)
        shadow = _shadowing_package(Path(frame["path"])) if frame else None
        if shadow is not None:
            name, folder = shadow
            return (
                f"mcphost's {name!r} is shadowed: Python imported it from {str(folder)!r} instead of "
                f"{str(INSTALLED_AT / name)!r}; {_REMEDY}; last stderr line: {stderr_tail[-1]!r}"
            )
    missing = next((name for line in reversed(stderr_tail) if (name := _missing_module(line))), None)
    if missing is None:
        return None
    top = missing.partition(".")[0]
    if top not in OWN_PACKAGES:
        return f"module not found: {missing!r} is not installed for {python!r}"
    if missing != top and _is_installed(missing):
        return (
            f"mcphost's {top!r} is shadowed: Python found a {top!r} without {missing!r} before "
            f"{str(INSTALLED_AT / top)!r}; {_REMEDY}"
        )
    return (
        f"module not found: {python!r} does not see mcphost's {missing!r} (installed in "
        f"{str(INSTALLED_AT)!r}); run mcphost with the Python it is installed in, or reinstall it"
    )


_REMEDY = (
    "rename that folder or take it off the plugin's module search path "
    "(PYTHONPATH, or the working directory of a `python -m` command without -P)"
)


def _shadowing_package(path: Path) -> tuple[str, Path] | None:
    """(package name, folder) when `path` lies in a package named like one of mcphost's that is not it."""
    for folder in path.parents:
        if folder.name in OWN_PACKAGES and (folder / "__init__.py").is_file():
            if folder.resolve() != (INSTALLED_AT / folder.name).resolve():
                return folder.name, folder
            return None
    return None


def _missing_module(line: str) -> str | None:
    """The dotted name of a module a stderr line says is missing."""
    if runpy := _RUNPY_SPEC.search(line):
        line = runpy["exception"]
    elif runpy := _RUNPY_MISSING.search(line):
        return runpy["name"]
    exception = _EXCEPTION.match(line)
    if exception is None or (named := _NO_MODULE.match(exception["text"])) is None:
        return None
    return named["name"]


def _is_installed(module: str) -> bool:
    """Whether mcphost's installation has `module` (a dotted name under one of its packages)."""
    path = INSTALLED_AT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

"""Issue 28, item 5: `RuntimeError: deque mutated during iteration` from SQLAlchemy's event dispatch
(a listener added while another task iterated the engine's listeners)."""

from __future__ import annotations

import ast
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.lowlevel
import pytest

from mcphost.stores import Stores
from tests.mcphost.stores.factories import admitted

ROOT = Path(__file__).resolve().parents[2]


async def test_a_hook_added_or_removed_while_a_statement_runs_counts_from_the_next_event(
    stores: Stores,
) -> None:
    """Issue 28, item 5: `RuntimeError: deque mutated during iteration` from SQLAlchemy's event dispatch
    when a listener was added while another task iterated the engine's listeners."""
    # A hook that registers another and takes itself off mid-dispatch, on the hot-path write (the writer
    # thread on SQLite) and on a read: an engine listener added or removed there (SQLAlchemy's deque,
    # iterated by that very dispatch) failed the statement with "deque mutated during iteration".
    later: list[str] = []

    def after(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        later.append(statement.split()[0])

    def swap(*_: object) -> None:
        stores.db.hooks.add("before_cursor_execute", after)
        stores.db.hooks.remove("before_cursor_execute", swap)

    stores.db.hooks.add("before_cursor_execute", swap)
    run = await admitted(stores)
    # A second write: on PostgreSQL an admission can be one statement (its lock goes with the `BEGIN`).
    await admitted(stores, "conv-second")
    assert later  # `after` saw the statements after the first, and the first ran
    stores.db.hooks.remove("before_cursor_execute", after)
    later.clear()
    stores.db.hooks.add("before_cursor_execute", swap)
    assert (await stores.runs.get(run.run_id)).run_id == run.run_id
    await stores.runs.get(run.run_id)
    assert "SELECT" in later


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_hooks_change_on_the_event_loop_while_the_writer_thread_dispatches(stores: Stores) -> None:
    """Issue 28, item 5 (deque mutated during iteration), as `bench.peers --quick` hit it: the scheduler's
    tick on the SQLite writer thread while the bench added its statement counters on the event loop."""
    # The bench's race, made deterministic: the writer thread is held inside its statement's dispatch
    # while the event loop adds and removes hooks, then goes on.
    seen: list[str] = []

    def other(*_: object) -> None:
        seen.append("other")

    loop = anyio.lowlevel.current_token()  # the writer thread is mcphost's own, not an anyio worker

    def hold(*_: object) -> None:
        if not seen:
            seen.append("hold")
            anyio.from_thread.run_sync(stores.db.hooks.add, "before_cursor_execute", other, token=loop)
            anyio.from_thread.run_sync(stores.db.hooks.remove, "before_cursor_execute", hold, token=loop)

    stores.db.hooks.add("before_cursor_execute", hold)
    await admitted(stores)
    assert seen[0] == "hold"
    assert "other" in seen[1:]


def _listener_calls(path: Path) -> list[str]:
    """`event.listen` / `event.remove` / `event.listens_for` and `.attach(` calls in `path`, each as
    "file: enclosing function"."""
    found: list[str] = []

    def walk(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                target = child.func
                by_event = isinstance(target.value, ast.Name) and target.value.id == "event"
                if (by_event and target.attr in ("listen", "remove", "listens_for")) or (
                    target.attr == "attach" and "hooks" in ast.unparse(target.value)
                ):
                    found.append(f"{path.relative_to(ROOT)}: {function}")
            walk(child, name)

    walk(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_engine_listeners_are_registered_only_where_an_engine_is_made() -> None:
    """Issue 28, item 5: every `event.listen` on an engine happens before the engine is shared — in
    `Database.__init__` (the engine and the SQLite writer's, with `EngineHooks.attach`; the writer's own in
    `SqliteWriter.__init__`, which `Database.__init__` calls before it shares that engine) and nowhere else,
    in the product, the bench and the tests; listeners that come and go are `Database.hooks`."""
    calls: list[str] = []
    for folder in ("mcphost", "bench", "tests", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path != Path(__file__):
                calls += _listener_calls(path)
    assert sorted(set(calls)) == [
        "mcphost/stores/_hooks.py: attach",
        "mcphost/stores/_writer.py: __init__",
        "mcphost/stores/engine.py: __init__",
    ]

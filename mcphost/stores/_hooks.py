"""Listeners on the database's engines that may come and go while statements run.

Owns `EngineHooks`: one fixed SQLAlchemy listener per event on every engine of a `Database`, registered
when the engine is created, forwarding to the hooks registered now. Does not own what the hooks do
(statement counters, fault injection, capture of a run's transactions: tests and benchmarks).

Invariants:
- Nothing calls `event.listen` / `event.remove` on an engine once it runs statements. SQLAlchemy keeps
  an engine's listeners in a `deque` and iterates it for every event; a listener added or removed
  meanwhile — from the event loop while the SQLite writer thread runs a transaction, or from inside a
  listener — makes that iteration raise `RuntimeError: deque mutated during iteration` in whatever
  statement was running (a scheduler tick, a run's end). So the engines' listeners are fixed at
  creation, and the hooks behind them are an immutable tuple per event, replaced whole (copy on write):
  a dispatch reads the tuple once and calls what it holds then; a hook added or removed during it
  counts from the next event on.
- Without hooks an event costs one call that loops over an empty tuple.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any, Literal, get_args

from sqlalchemy import Engine, event

HookEvent = Literal["begin", "before_cursor_execute", "commit", "rollback"]
"""The engine events a hook can follow (SQLAlchemy's `ConnectionEvents`, with their arguments)."""

Hook = Callable[..., None]


class EngineHooks:
    """The hooks of one database's engines, per event; safe to change while statements run."""

    def __init__(self) -> None:
        self._hooks: dict[HookEvent, tuple[Hook, ...]] = dict.fromkeys(get_args(HookEvent), ())

    def attach(self, engine: Engine) -> None:
        """Register the forwarding listeners on `engine`: only before it runs its first statement."""
        for name in self._hooks:
            event.listen(engine, name, self._forwarder(name))

    def _forwarder(self, name: HookEvent) -> Hook:
        hooks = self._hooks

        def forward(*args: Any) -> None:
            for hook in hooks[name]:  # the tuple of now: a change during the loop replaces, never mutates
                hook(*args)

        return forward

    def add(self, name: HookEvent, hook: Hook) -> None:
        """Call `hook` with the event's arguments on every engine, from the next event on."""
        self._hooks[name] = (*self._hooks[name], hook)

    def remove(self, name: HookEvent, hook: Hook) -> None:
        """Stop calling `hook` (its first registration) from the next event on."""
        hooks = list(self._hooks[name])
        hooks.remove(hook)
        self._hooks[name] = tuple(hooks)

    @contextmanager
    def added(self, name: HookEvent, hook: Hook) -> Generator[None, None, None]:
        """`hook` registered for the block."""
        self.add(name, hook)
        try:
            yield
        finally:
            self.remove(name, hook)

"""A typed face for the few asyncpg calls the benchmarks make straight to PostgreSQL.

asyncpg ships no type information, so every value from it is unknown to pyright. The benchmarks (and
tests/mcphost/stores/test_query_plans.py) reach it only through `connect_pg`, which returns the connection as
`PgConnection`: the methods they call, with asyncpg's documented signatures. The one untyped call is here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, cast

import asyncpg  # pyright: ignore[reportMissingTypeStubs]


class PgConnection(Protocol):
    """The part of `asyncpg.Connection` the benchmarks use."""

    def transaction(self) -> AbstractAsyncContextManager[Any]: ...

    async def copy_records_to_table(
        self, table_name: str, *, records: Iterable[Sequence[Any]], columns: Sequence[str]
    ) -> str: ...

    async def execute(self, query: str, *args: Any) -> str: ...

    async def fetchval(self, query: str, *args: Any) -> Any: ...

    async def fetch(self, query: str, *args: Any) -> list[Any]: ...

    async def close(self) -> None: ...


async def connect_pg(dsn: str) -> PgConnection:
    """Open an asyncpg connection to `dsn` (a plain `postgresql://` DSN)."""
    conn = await asyncpg.connect(dsn)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType] -- asyncpg is untyped
    return cast(PgConnection, conn)

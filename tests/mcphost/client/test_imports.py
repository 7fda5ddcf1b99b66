"""`mcphost.client` imports no server code: checked in a fresh interpreter through `sys.modules` (the
import-linter contracts check the import graph; this checks what really loads, `mcphost/__init__.py`
and the transitive imports of httpx2 included)."""

from __future__ import annotations

import json
import subprocess
import sys

import mcphost.client

SERVER = ("starlette", "sse_starlette", "uvicorn", "sqlalchemy", "alembic", "aiosqlite", "asyncpg", "mcp")


def _loaded_after(code: str) -> set[str]:
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_importing_the_client_loads_no_server_module_and_no_pydantic() -> None:
    loaded = _loaded_after("import mcphost.client")
    assert "httpx2" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] in SERVER) == []
    ours = sorted(m for m in loaded if m.split(".")[0] == "mcphost")
    assert all(m == "mcphost" or m.startswith(("mcphost.client", "mcphost.common")) for m in ours), ours
    assert "pydantic" not in loaded  # an answer model brings it, with the first call that returns one


def test_an_answer_model_and_a_typed_result_still_load_no_server_module() -> None:
    code = (
        "from mcphost.client import ResultEvent\n"
        "import mcphost.client.models\n"
        "raw = {'seq': 1, 'type': 'run.completed', 'run_id': 'run_1', 'data': {}}\n"
        "assert type(ResultEvent(1, 'run.completed', raw).result).__name__ == 'RunCompleted'"
    )
    loaded = _loaded_after(code)
    assert "pydantic" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] in SERVER) == []
    ours = {m.split(".")[1] for m in loaded if m.startswith("mcphost.")}
    assert ours <= {"client", "common", "protocol"}, ours


def test_the_public_names_are_pinned() -> None:
    assert mcphost.client.__all__ == [
        "APIConnectionError",
        "APIError",
        "AsyncClient",
        "AsyncRunStream",
        "Client",
        "ClientError",
        "ResultEvent",
        "RunEnd",
        "RunFailure",
        "RunStream",
    ]

"""Expected failures end with one line on stderr and a documented exit code, never a traceback.

Storage that cannot be reached (a PostgreSQL database that does not exist, a closed port) exits 2; a
reader that goes away (`mcphost runs --json | head -1`) exits 141 quietly; Ctrl-C (SIGINT) exits 130.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import anyio
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from mcphost.cli import EXIT_INTERRUPTED, EXIT_PIPE, EXIT_USAGE
from mcphost.models import RunStatus
from mcphost.stores import open_stores
from tests._postgres import NO_POSTGRES, POSTGRES_URL, fresh_postgres_database_sync
from tests.examples.clikit import cli_env
from tests.mcphost.test_cli import mcphost, wait_for_running, write_config

READ_COMMANDS = [
    ["runs"],
    ["show", "run_x"],
    ["grant", "--conversation", "c"],
    ["state", "list", "runner", "--runner-id", "r"],
    ["kb", "list"],
    ["db", "upgrade"],
]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _assert_one_line(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mcphost: error: ")
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_a_closed_postgres_port_is_one_line_and_exit_2(tmp_path: Path, command: list[str]) -> None:
    port = _closed_port()
    config = write_config(tmp_path, f"postgresql+asyncpg://postgres@127.0.0.1:{port}/mcphost")
    done = mcphost(*command, "--config", str(config), cwd=tmp_path)
    _assert_one_line(done, EXIT_USAGE, f"Cannot connect to PostgreSQL at 127.0.0.1:{port}")


@pytest.mark.postgres
@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_a_missing_postgres_database_is_one_line_and_exit_2(tmp_path: Path, command: list[str]) -> None:
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    url = make_url(POSTGRES_URL).set(database="mcphost_cli_no_such_db").render_as_string(hide_password=False)
    done = mcphost(*command, "--config", str(write_config(tmp_path, url)), cwd=tmp_path)
    _assert_one_line(done, EXIT_USAGE, "'mcphost_cli_no_such_db' does not exist", "createdb")


async def _schema_revision(url: str, statement: str | None = None) -> list[str]:
    """The database's `alembic_version` rows, after `statement` if one is given."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            if statement is not None:
                await conn.exec_driver_sql(statement)
            return [
                str(v)
                for v in (await conn.exec_driver_sql("SELECT version_num FROM alembic_version")).scalars()
            ]
    finally:
        await engine.dispose()


_REVISION_CASES: dict[str, tuple[str, list[str], tuple[str, ...]]] = {
    "newer": (
        "UPDATE alembic_version SET version_num = 'f00d'",
        ["f00d"],
        ("at schema revision 'f00d'", "newer mcphost"),
    ),
    "missing": ("DELETE FROM alembic_version", [], ("no single schema revision", "Restore its revision row")),
}


@pytest.mark.parametrize("case", list(_REVISION_CASES))
@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_database_at_a_revision_this_mcphost_cannot_migrate_is_one_line_exit_2_and_left_alone(
    tmp_path: Path, dialect: str, case: str
) -> None:
    """A schema revision this mcphost's migrations do not name (a newer mcphost's), or none at all on a
    database that holds the tables, is refused before Alembic runs, with what to do next; the database
    keeps its revision rows. (Alembic answered the first with a traceback, and the second by creating
    the tables again: "table events already exists", reported as an unwritable file.)"""
    statement, rows, needles = _REVISION_CASES[case]
    with ExitStack() as stack:
        if dialect == "postgres":
            if not POSTGRES_URL:
                pytest.skip(NO_POSTGRES)
            url = stack.enter_context(fresh_postgres_database_sync(POSTGRES_URL))
        else:
            url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'mcphost.db'}"
        config = str(write_config(tmp_path, url))
        assert mcphost("db", "upgrade", "--config", config, cwd=tmp_path).returncode == 0
        anyio.run(_schema_revision, url, statement)
        for command in (["run", "hello", "--conversation", "cli"], ["db", "upgrade"]):
            done = mcphost(*command, "--config", config, cwd=tmp_path)
            _assert_one_line(done, EXIT_USAGE, *needles, "Nothing was changed")
        assert anyio.run(_schema_revision, url) == rows


def _with_closed_stdout(*args: str, cwd: Path) -> tuple[int, str]:
    """Run `mcphost ARGS` with a stdout pipe whose reader is gone before the command writes anything:
    what `mcphost ... | head -1` does once head has read its line."""
    with subprocess.Popen(
        [sys.executable, "-m", "mcphost.cli", *args],
        cwd=cwd,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()
        stderr = process.stderr.read()
        return process.wait(timeout=60), stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    done = mcphost("run", "hello", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(mcphost("runs", "--json", cwd=tmp_path).stdout)["items"][0]["run_id"]
    for args in (["runs", "--json"], ["runs"], ["show", run_id], ["show", run_id, "--json"]):
        code, stderr = _with_closed_stdout(*args, cwd=tmp_path)
        assert (code, stderr) == (EXIT_PIPE, ""), args


async def test_ctrl_c_during_a_run_is_one_line_and_exit_130(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    process = await anyio.open_process(
        [
            sys.executable,
            "-m",
            "mcphost.cli",
            "run",
            "slow:60",
            "--conversation",
            "m1",
            "--config",
            str(config),
        ],
        cwd=tmp_path,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
    )
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'mcphost.db'}"
    try:
        run_id = await wait_for_running(db_url, tmp_path / "data")
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(30):
            await process.wait()
        assert process.stderr is not None
        stderr = (await process.stderr.receive()).decode() if process.returncode else ""
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == EXIT_INTERRUPTED
    assert stderr.strip() == "mcphost: error: interrupted"
    async with open_stores(db_url, tmp_path / "data") as stores:
        assert (await stores.runs.get(run_id)).status is not RunStatus.RUNNING

"""Storage faults as an operator meets them: starting on storage that cannot be opened, a disk that fills
up, and storage that goes away under a running host.

Real faults where this machine can make them: a tiny tmpfs (full, or remounted read-only) when mounting is
permitted (root), a refused port, a PostgreSQL database that does not exist or is dropped. Where mounting
is not permitted, the test that needs it is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path

import anyio
import httpx2
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from mcphost.app import open_host
from mcphost.stores._retry import UNAVAILABLE_MESSAGE
from mcphost.stores.engine import Database, normalize_url
from mcphost.stores.health import StorageProbe
from tests._postgres import NO_POSTGRES, POSTGRES_URL, fresh_postgres_database
from tests.e2e.httpkit import api_settings, asgi_client, event_body
from tests.mcphost.test_cli import cli_env

STARTUP_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def config_file(tmp_path: Path, *, data_dir: Path, database_url: str | None = None) -> Path:
    db = f'database_url = "{database_url}"\n' if database_url else ""
    path = tmp_path / "mcphost.toml"
    path.write_text(f'[host]\ndata_dir = "{data_dir}"\n{db}', encoding="utf-8")
    return path


def start(command: str, config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # serve binds an ephemeral port (:0): a port picked free here can be taken by another test before
    # the child binds it, and these tests are about storage, not the address.
    args = ["run", "hello"] if command == "run" else ["serve", "--listen", "127.0.0.1:0"]
    return subprocess.run(
        [sys.executable, "-m", "mcphost.cli", *args, "--config", str(config)],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def assert_refused_to_start(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 2 and exactly one stderr line, `mcphost: error: ...` containing `words`; that line."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mcphost: error: "), lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    return lines[0]


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Generator[Path, None, None]:
    """A tmpfs of `size` mounted at `where` for the block; skips the test where mounting is not permitted."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def _remount_read_only(where: Path) -> None:
    done = subprocess.run(
        ["mount", "-o", "remount,ro", str(where)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot remount {where} read-only: {done.stderr.strip()}")


# -- starting on storage that cannot be used ---------------------------------------------------------


def test_a_sqlite_file_under_a_regular_file_exits_2_naming_the_url(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file", encoding="utf-8")
    url = f"sqlite:///{blocker / 'mcphost.db'}"
    done = start("run", config_file(tmp_path, data_dir=tmp_path / "data", database_url=url), tmp_path)
    assert_refused_to_start(done, url, "database_url")


def test_a_read_only_sqlite_file_exits_2_naming_the_url(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "8m") as mount:
        url = f"sqlite:///{mount / 'mcphost.db'}"
        config = config_file(tmp_path, data_dir=tmp_path / "data", database_url=url)
        made = subprocess.run(
            [sys.executable, "-m", "mcphost.cli", "db", "upgrade", "--config", str(config)],
            cwd=tmp_path,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=STARTUP_TIMEOUT_S,
            check=False,
        )
        assert made.returncode == 0, made.stderr
        _remount_read_only(mount)
        done = start("serve", config, tmp_path)
        assert_refused_to_start(done, url, "read-only")


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["serve", "run"])
def test_a_missing_postgres_database_exits_2_saying_create_it(tmp_path: Path, command: str) -> None:
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    url = make_url(POSTGRES_URL).set(database="mcphost_no_such_db").render_as_string(hide_password=False)
    done = start(command, config_file(tmp_path, data_dir=tmp_path / "data", database_url=url), tmp_path)
    line = assert_refused_to_start(done, "mcphost_no_such_db", "does not exist", "createdb")
    assert make_url(url).render_as_string(hide_password=True) in line


def test_a_refused_postgres_port_exits_2_and_hides_the_password(tmp_path: Path) -> None:
    port = _free_port()  # nothing listens there
    url = f"postgresql+asyncpg://mcphost:s3cret-pw@127.0.0.1:{port}/mcphost"
    done = start("serve", config_file(tmp_path, data_dir=tmp_path / "data", database_url=url), tmp_path)
    line = assert_refused_to_start(done, f"127.0.0.1:{port}", "Start the server", "database_url")
    assert "s3cret-pw" not in done.stderr
    assert "mcphost:***@" in line


# -- a full disk -------------------------------------------------------------------------------------


# -- storage that goes away under a running host -----------------------------------------------------


def storage_error(response: httpx2.Response, *words: str) -> str:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "storage_unavailable", error
    assert response.headers["retry-after"] == "5"
    for word in words:
        assert word in error["message"], error["message"]
    assert "Traceback" not in response.text
    return str(error["message"])


async def test_a_removed_sqlite_file_is_503_and_unhealthy(tmp_path: Path) -> None:
    db_file = tmp_path / "db" / "mcphost.db"
    settings = api_settings(f"sqlite+aiosqlite:///{db_file}", tmp_path / "data")
    async with open_host(settings) as host, asgi_client(host) as client:
        assert (await client.get("/healthz")).status_code == 200
        db_file.unlink()  # SQLite would go on writing to the unlinked file: everything written is lost
        host.stores.health.expire()
        storage_error(await client.get("/healthz"), str(db_file), "removed")
        storage_error(await client.get("/v1/runs"), str(db_file))


async def test_the_storage_probe_is_cached_and_shared(database_url: str, tmp_path: Path) -> None:
    async with open_host(api_settings(database_url, tmp_path / "data")) as host, asgi_client(host) as client:
        probe = StorageProbe(host.stores.db, tmp_path / "data", ttl_s=3600)
        answers = [await probe.check() for _ in range(20)]
        assert probe.probes == 1
        assert all(a is answers[0] for a in answers)
        assert answers[0].ok
        probe.expire()
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(probe.check)
        assert probe.probes == 2  # twenty concurrent callers shared one probe
        assert (await client.get("/healthz")).status_code == 200


async def test_an_unreachable_database_is_unhealthy_naming_the_real_cause_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = _free_port()  # nothing listens there
    db = Database(f"postgresql+asyncpg://mcphost:s3cret-pw@127.0.0.1:{port}/mcphost")
    try:
        with caplog.at_level(logging.WARNING, logger="mcphost.stores.health"):
            health = await StorageProbe(db, tmp_path).check()
    finally:
        await db.dispose()
    assert health.reason is not None
    assert health.reason.startswith(
        f"cannot reach the database postgresql+asyncpg://mcphost:***@127.0.0.1:{port}/"
    )
    assert str(port) in health.reason.split(": ", 1)[1]  # the refused connection, not a fixed text
    assert UNAVAILABLE_MESSAGE not in health.reason
    assert "s3cret-pw" not in health.reason
    records = [r for r in caplog.records if r.name == "mcphost.stores.health"]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert str(port) in records[0].getMessage()
    assert "s3cret-pw" not in records[0].getMessage()


async def _set_read_only(database_url: str, on: bool) -> None:
    """`default_transaction_read_only` for the database of `database_url`, and its sessions dropped so
    the host's next connections get it."""
    assert POSTGRES_URL is not None
    name = make_url(database_url).database
    admin = create_async_engine(normalize_url(POSTGRES_URL), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        async with admin.connect() as conn:
            value = "on" if on else "off"
            await conn.exec_driver_sql(f'ALTER DATABASE "{name}" SET default_transaction_read_only = {value}')
            await conn.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
            )
    finally:
        await admin.dispose()


@pytest.mark.postgres
async def test_a_postgres_database_turned_read_only_is_503_and_unhealthy(tmp_path: Path) -> None:
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    async with (
        fresh_postgres_database(POSTGRES_URL) as url,
        open_host(api_settings(url, tmp_path / "data")) as host,
        asgi_client(host) as client,
    ):
        assert (await client.get("/healthz")).status_code == 200
        await _set_read_only(url, True)
        try:
            messages: list[str] = []
            for _ in range(5):  # the first probe may meet a connection the server just dropped
                host.stores.health.expire()
                messages.append(storage_error(await client.get("/healthz"), "database"))
                if "read-only" in messages[-1]:
                    break
            assert "read-only" in messages[-1], messages
            assert make_url(url).render_as_string(hide_password=True) in messages[-1]
            storage_error(await client.post("/v1/events", json=event_body("x")), "read-only")
        finally:
            await _set_read_only(url, False)
        for _ in range(5):
            host.stores.health.expire()
            if (await client.get("/healthz")).status_code == 200:
                break
        assert (await client.get("/healthz")).status_code == 200  # healthy again once writable


async def test_a_data_dir_whose_file_system_turns_read_only_is_503_and_unhealthy(
    database_url: str, tmp_path: Path
) -> None:
    # The database stays off the tmpfs: a file system with SQLite's files open for writing (its shared
    # memory is mapped) cannot be remounted read-only ("mount point is busy").
    with tmpfs(tmp_path / "fs", "16m") as mount:
        _remount_read_only(mount)  # skips here, outside the host, where remounting is not permitted
        await anyio.run_process(["mount", "-o", "remount,rw", str(mount)])
        async with open_host(api_settings(database_url, mount / "data")) as host, asgi_client(host) as client:
            assert (await client.get("/healthz")).status_code == 200
            await anyio.run_process(["mount", "-o", "remount,ro", str(mount)])
            try:
                host.stores.health.expire()
                storage_error(await client.get("/healthz"), str(mount / "data"), "not writable")
                storage_error(await client.post("/v1/events", json=event_body("x")), "not writable")
            finally:
                await anyio.run_process(["mount", "-o", "remount,rw", str(mount)])
            host.stores.health.expire()
            assert (await client.get("/healthz")).status_code == 200  # healthy again once writable

"""Storage faults as an operator meets them: starting on storage that cannot be opened, a disk that fills
up, and storage that goes away under a running host.

Real faults where this machine can make them: a tiny tmpfs (full, or remounted read-only) when mounting is
permitted (root), a refused port, a PostgreSQL database that does not exist or is dropped. Where mounting
is not permitted, the test that needs it is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from mcphost.api import ApiLimits
from mcphost.app import open_host
from tests.conftest import NO_POSTGRES, POSTGRES_URL
from tests.e2e.httpkit import api_settings, asgi_client, row_counts
from tests.mcphost.test_cli import cli_env

STARTUP_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(tmp_path: Path, *, data_dir: Path, database_url: str | None = None) -> Path:
    db = f'database_url = "{database_url}"\n' if database_url else ""
    path = tmp_path / "mcphost.toml"
    path.write_text(f'[host]\ndata_dir = "{data_dir}"\n{db}', encoding="utf-8")
    return path


def _start(command: str, config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    args = ["run", "hello"] if command == "run" else ["serve", "--listen", f"127.0.0.1:{_free_port()}"]
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


@pytest.mark.parametrize("command", ["serve", "run"])
def test_a_data_dir_under_a_regular_file_exits_2_with_one_line(tmp_path: Path, command: str) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file", encoding="utf-8")
    config = _config(tmp_path, data_dir=blocker / "data")
    done = _start(command, config, tmp_path)
    assert_refused_to_start(done, str(blocker / "data"), "regular file", "data_dir")


def test_a_sqlite_file_under_a_regular_file_exits_2_naming_the_url(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file", encoding="utf-8")
    url = f"sqlite:///{blocker / 'mcphost.db'}"
    done = _start("run", _config(tmp_path, data_dir=tmp_path / "data", database_url=url), tmp_path)
    assert_refused_to_start(done, url, "database_url")


def test_a_read_only_sqlite_file_exits_2_naming_the_url(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "8m") as mount:
        url = f"sqlite:///{mount / 'mcphost.db'}"
        config = _config(tmp_path, data_dir=tmp_path / "data", database_url=url)
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
        done = _start("serve", config, tmp_path)
        assert_refused_to_start(done, url, "read-only")


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["serve", "run"])
def test_a_missing_postgres_database_exits_2_saying_create_it(tmp_path: Path, command: str) -> None:
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    url = make_url(POSTGRES_URL).set(database="mcphost_no_such_db").render_as_string(hide_password=False)
    done = _start(command, _config(tmp_path, data_dir=tmp_path / "data", database_url=url), tmp_path)
    line = assert_refused_to_start(done, "mcphost_no_such_db", "does not exist", "createdb")
    assert make_url(url).render_as_string(hide_password=True) in line


def test_a_refused_postgres_port_exits_2_and_hides_the_password(tmp_path: Path) -> None:
    port = _free_port()  # nothing listens there
    url = f"postgresql+asyncpg://mcphost:s3cret-pw@127.0.0.1:{port}/mcphost"
    done = _start("serve", _config(tmp_path, data_dir=tmp_path / "data", database_url=url), tmp_path)
    line = assert_refused_to_start(done, f"127.0.0.1:{port}", "Start the server", "database_url")
    assert "s3cret-pw" not in done.stderr
    assert "mcphost:***@" in line


# -- a full disk -------------------------------------------------------------------------------------


async def test_an_upload_to_a_full_disk_is_507_and_stores_nothing(database_url: str, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "1m") as mount:
        data_dir = mount / "data"
        async with (
            open_host(api_settings(database_url, data_dir)) as host,
            asgi_client(host, limits=ApiLimits(max_upload_bytes=8 * 1024 * 1024)) as client,
        ):
            before = await row_counts(host.stores)
            response = await client.post(
                "/v1/artifacts", params={"name": "big.bin"}, content=os.urandom(2 * 1024 * 1024)
            )
            assert response.status_code == 507, response.text
            error = response.json()["error"]
            assert error["code"] == "storage_full"
            assert "is full, so nothing was stored" in error["message"]
            assert str(data_dir) in error["message"]
            assert "Traceback" not in response.text
            assert await row_counts(host.stores) == before
            assert [p for p in data_dir.rglob("*") if p.is_file()] == []  # the staged part is gone
            small = await client.post("/v1/artifacts", params={"name": "small.bin"}, content=b"fits")
            assert small.status_code == 201, small.text

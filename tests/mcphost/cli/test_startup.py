"""`mcphost --help` and `--version` start without the server; `--config` goes before or after the command.

The parser is built from the standard library only: a test reads which modules `--help` imports, so a
change that pulls SQLAlchemy, pydantic or `mcp` back into the start-up path fails here (timings are
measured in `bench/startup.py`, not asserted).
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.types import Receive, Scope, Send

from mcphost import cli
from mcphost.facts import FactsEndpoint
from tests.examples.clikit import EXAMPLES, REPO, cli_env
from tests.mcphost.test_cli import mcphost

HEAVY = ("sqlalchemy", "pydantic", "mcp", "uvicorn", "starlette", "anyio", "httpx2", "alembic")
"""Top-level packages the help path must not import."""


def _imported_by(*args: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mcphost.cli", *args],
        env=cli_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return done, modules


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_no_server_database_or_mcp_module(flag: str) -> None:
    done, modules = _imported_by(flag)
    assert done.returncode == 0, done.stderr
    assert "mcphost" in done.stdout
    assert "mcphost.cli" in modules  # the measurement saw the CLI's own imports
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert heavy == []
    # Of mcphost itself only the CLI, the excgroups walk (standard library only, for the error path) and
    # the collector's start-up pause (`gc` only).
    ours = {m for m in modules if m.startswith("mcphost.") and not m.startswith("mcphost.cli")}
    assert ours <= {"mcphost.common", "mcphost.common.excgroups", "mcphost.common.gcstart"}


def test_a_command_help_imports_nothing_of_the_server_either() -> None:
    done, modules = _imported_by("runs", "--help")
    assert done.returncode == 0, done.stderr
    assert "--config FILE" in done.stdout
    assert not [m for m in modules if m.split(".")[0] in HEAVY]


SERVER = ("sqlalchemy", "alembic", "starlette", "uvicorn", "mcp", "aiosqlite", "asyncpg")
"""Top-level packages of the server that its HTTP clients (`send`, `cancel --url`) must not import."""


def _server_modules(modules: set[str]) -> list[str]:
    ours = ("mcphost.app", "mcphost.serving", "mcphost.api", "mcphost.stores", "mcphost.orchestrator")
    return sorted(m for m in modules if m.split(".")[0] in SERVER or m.startswith(ours))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "args",
    [
        ["send", "hello", "--url", "URL"],
        ["send", "hello"],  # the server's URL from the data directory and the config, not --url
        ["cancel", "run_1", "--url", "URL"],
    ],
)
def test_the_http_clients_import_no_server_module(args: list[str], tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    (tmp_path / "mcphost.toml").write_text(f'[host]\nlisten = "{url.removeprefix("http://")}"\n')
    done, modules = _imported_by(*[url if a == "URL" else a for a in args], cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"cannot reach mcphost at {url}" in done.stderr  # it ran as far as the request
    assert "httpx2" in modules
    assert _server_modules(modules) == []
    assert [m for m in modules if m.split(".")[0] in ("croniter", "dateutil")] == []  # no cron schedule
    if args[0] == "send" and "--url" in args:  # the event goes as JSON: the server validates it
        assert [m for m in modules if m.split(".")[0] == "pydantic"] == []
    if "--url" in args:  # a client of a server with its own config: no config read, no host models built
        assert [
            m for m in modules if m.startswith(("mcphost.config", "mcphost.protocol", "mcphost.models"))
        ] == []


@pytest.mark.parametrize("how", ["--url", "MCPHOST_URL"])
def test_send_to_a_given_url_reads_no_config_so_a_broken_one_does_not_stop_it(
    how: str, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    (tmp_path / "mcphost.toml").write_text("[host\nthis is not TOML\n")
    env = cli_env() | ({"MCPHOST_URL": url} if how == "MCPHOST_URL" else {})
    done = subprocess.run(
        [sys.executable, "-m", "mcphost.cli", "send", "hello", *(["--url", url] if how == "--url" else [])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert f"cannot reach mcphost at {url}" in done.stderr
    assert "Traceback" not in done.stderr


def _imported_by_code(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}


def test_importing_the_composition_imports_no_server_part_until_a_host_is_opened() -> None:
    modules = _imported_by_code("import mcphost.app")
    assert "mcphost.app" in modules
    assert _server_modules(modules) == ["mcphost.app"]
    assert not [m for m in modules if m.split(".")[0] in ("pydantic", "prometheus_client", "croniter")]


def test_importing_the_protocol_builds_no_validator_of_the_result_union() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import mcphost.protocol as p; print(p.RESULT_ADAPTER.pydantic_complete)"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "False"  # built on the first result validated, not at import


def test_cancel_without_url_still_cancels_in_the_database(tmp_path: Path) -> None:
    done, modules = _imported_by("cancel", "run_missing", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "run_missing" in done.stderr
    assert "mcphost.app" in modules


def test_the_values_the_parser_copies_match_their_sources() -> None:
    from mcphost.api import DEFAULT_MAX_UPLOAD_BYTES
    from mcphost.cli._state import OWNER_FLAGS
    from mcphost.models import ID_PATTERN, RunStatus
    from mcphost.protocol import STATE_SCOPES
    from mcphost.serving import DEFAULT_GRACE_S

    assert tuple(s.value for s in RunStatus) == cli.RUN_STATUSES
    assert cli.STATE_SCOPES == STATE_SCOPES
    assert cli.OWNER_FLAGS == OWNER_FLAGS
    assert cli.ID_PATTERN == ID_PATTERN
    assert cli.DEFAULT_GRACE_S == DEFAULT_GRACE_S
    assert cli.DEFAULT_MAX_UPLOAD_BYTES == DEFAULT_MAX_UPLOAD_BYTES


def test_config_after_the_command_wins_over_one_before_it(tmp_path: Path) -> None:
    config = tmp_path / "mine.toml"
    config.write_text(f'[host]\ndata_dir = "{tmp_path / "after"}"\n', encoding="utf-8")
    done = mcphost("--config", str(tmp_path / "missing.toml"), "runs", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "after" / "mcphost.db").is_file()


def _documented_lines() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for path in [*sorted(EXAMPLES.glob("*.toml")), REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for line in path.read_text(encoding="utf-8").splitlines():
            match = re.search(r"mcphost (--config \S+ [^`]*)", line)
            if match:
                command = match.group(1).split("  #")[0].strip()
                found.append((f"{path.name}: {command}", shlex.split(command)))
    return found


def test_every_documented_mcphost_config_line_parses_as_written() -> None:
    lines = _documented_lines()
    assert len(lines) >= 7  # examples/*.toml name seven such commands
    parser = cli.build_parser()
    for where, argv in lines:
        args = parser.parse_args(argv)
        assert args.config == argv[1], where
        assert args.command == argv[2], where


OPTIONAL_AT_START = ("slack_sdk", "genai_prices", "websockets")
"""Libraries of one feature each, loaded when the feature is first used (a Slack request, a model with no
price of its own, a Discord Gateway channel), never to start a host."""


def test_starting_a_host_imports_no_library_of_a_single_feature() -> None:
    modules = _imported_by_code("import mcphost.app, mcphost.channels, mcphost.llm")
    assert "mcphost.channels.slack" in modules  # the measurement saw the channel adapters load
    assert sorted(m for m in modules if m.split(".")[0] in OPTIONAL_AT_START) == []


MCP_SDK = ("mcp", "mcp_types")
"""The MCP SDK's packages: a host loads them when a run first calls its MCP endpoint (or for `[tools.*]`)."""


def test_a_run_whose_runner_never_calls_its_mcp_endpoint_never_loads_the_mcp_sdk(tmp_path: Path) -> None:
    (tmp_path / "mcphost.toml").write_text(
        '[[agents]]\nid = "echo"\nrunner = "plugin:mcphost/echo/default"\n'
    )
    done, modules = _imported_by("run", "hello", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "completed" in done.stdout + done.stderr
    assert {"mcphost.orchestrator", "mcphost.gateway.host_tools"} <= modules
    assert sorted(m for m in modules if m.split(".")[0] in MCP_SDK) == []
    facts_loaded = {m for m in modules if m.startswith("mcphost.facts.")}
    assert facts_loaded == {"mcphost.facts.endpoint", "mcphost.facts._listing"}
    assert "mcphost.gateway.upstream" not in modules


def test_a_run_whose_runner_reads_facts_loads_the_mcp_server_then(tmp_path: Path) -> None:
    done, modules = _imported_by("run", "hello", cwd=tmp_path)  # the embedded default: memo, over MCP
    assert done.returncode == 0, done.stderr
    assert "state_get" in done.stdout  # memo read the host's facts through its MCP endpoint
    # (`importlib.import_module` loads the server module itself, which `-X importtime` does not list)
    assert {"mcphost.facts._dispatch", "mcp"} <= modules
    # its loopback app serves the run's endpoints only (`app.run_app`): nothing of the /v1 API is imported
    assert sorted(m for m in modules if m == "mcphost.api" or m.startswith("mcphost.api.")) == []


@pytest.mark.parametrize(("runner", "preloads"), [("memo", True), ("echo", False)])
def test_a_one_shot_run_loads_its_mcp_server_as_it_starts_when_its_runner_calls_mcp(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    runner: str,
    preloads: bool,
) -> None:
    """memo's server starts loading at admission, before its first call arrives (the load overlaps the
    runner's own start); echo's manifest says it never calls MCP (`context.calls_mcp`), so nothing loads."""
    seen: list[str] = []
    preload, answer = FactsEndpoint.preload, FactsEndpoint.__call__

    def recorded_preload(self: FactsEndpoint) -> None:
        seen.append("preload")
        preload(self)

    async def recorded_answer(self: FactsEndpoint, scope: Scope, receive: Receive, send: Send) -> None:
        seen.append("request")
        await answer(self, scope, receive, send)

    monkeypatch.setattr(FactsEndpoint, "preload", recorded_preload)
    monkeypatch.setattr(FactsEndpoint, "__call__", recorded_answer)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mcphost.toml").write_text(
        f'[[agents]]\nid = "a"\nrunner = "plugin:mcphost/{runner}/default"\n'
    )
    assert cli.main(["run", "hello"]) == 0
    assert "hello" in capsys.readouterr().out  # both answer with what they heard
    if preloads:
        assert seen[0] == "preload"
        assert "request" in seen  # memo then read its facts over MCP
    else:
        assert seen == []


def test_a_run_on_sqlite_imports_no_postgresql_dialect(tmp_path: Path) -> None:
    done, modules = _imported_by("run", "hello", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "sqlalchemy.dialects.sqlite" in modules  # the measurement saw the database opened
    postgresql = [m for m in modules if m.startswith("sqlalchemy.dialects.postgresql") or m == "asyncpg"]
    assert postgresql == []  # loaded when a PostgreSQL engine or statement is first built


def test_importing_the_stores_and_the_api_builds_none_of_their_models() -> None:
    code = (
        "import pydantic, mcphost.stores, mcphost.api\n"
        "todo, built = [pydantic.BaseModel], []\n"
        "while todo:\n"
        "    for sub in todo.pop().__subclasses__():\n"
        "        todo.append(sub)\n"
        "        if sub.__module__.startswith(('mcphost.stores', 'mcphost.api')) and sub.__pydantic_complete__:\n"
        "            built.append(sub.__qualname__)\n"
        "print(sorted(built))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"  # each is built on its first validation (defer_build)

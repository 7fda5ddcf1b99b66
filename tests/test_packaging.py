"""The LICENSE, the Dockerfile and compose.yaml: what can be checked without docker.

`docker` is not available where the suite runs, so the image is not built here. Instead the files are parsed
and held to what the product needs — every COPY source exists and is not dockerignored, the runtime stage
runs as a user without privileges and has a healthcheck, every `MCPHOST_*` variable is a real setting — and
the container's command is run on this machine with the environment the Dockerfile and compose.yaml give it:
the server must start on a non-loopback listen with the compose API key, answer the image's healthcheck
command, and complete a run through `mcphost send`.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from mcphost.config import HostSettings
from mcphost.plugins._startup import OWN_PACKAGES
from tests._json import obj
from tests._postgres import POSTGRES_URL, fresh_postgres_database_sync
from tests.mcphost.test_serve import cli_env, free_port, mcphost, start_server

REPO = Path(__file__).resolve().parents[1]
NON_ROOT_UID = 10001

__all__ = ["start_server"]  # the fixture, shared with test_serve


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])

    def all(self, keyword: str) -> list[str]:
        return [args for key, args in self.instructions if key == keyword]


def _logical_lines(text: str) -> Iterator[str]:
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"


def dockerfile_stages() -> list[Stage]:
    stages: list[Stage] = []
    for line in _logical_lines((REPO / "Dockerfile").read_text(encoding="utf-8")):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, parts[0]))
        elif stages:
            stages[-1].instructions.append((keyword, args.strip()))
    return stages


def _env_pairs(args: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in shlex.split(args))


def _exec_form(args: str) -> list[str]:
    value = yaml.safe_load(args)  # a JSON array is YAML
    assert isinstance(value, list), f"not the exec form: {args}"
    return [str(part) for part in cast(list[object], value)]


def compose() -> dict[str, Any]:
    return obj(yaml.safe_load((REPO / "compose.yaml").read_text(encoding="utf-8")))


_VARIABLE = re.compile(r"\$\{(\w+)(?::?[-?]([^}]*))?\}")


def interpolate(value: str, environ: dict[str, str]) -> str:
    """Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?error}` substitution."""

    def one(match: re.Match[str]) -> str:
        name, rest = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if "?" in match.group(0).split(name, 1)[1][:2]:
            raise AssertionError(f"compose would refuse to start without {name}: {rest}")
        return rest or ""

    return _VARIABLE.sub(one, value)


def host_setting(variable: str) -> str:
    assert variable.startswith("MCPHOST_"), variable
    key = variable.removeprefix("MCPHOST_").lower()
    assert key in HostSettings.model_fields, f"{variable} is no [host] setting"
    return key


def test_the_license_is_the_apache_license_pyproject_names() -> None:
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == {"text": "Apache-2.0"}


def test_every_package_the_wheel_installs_is_named_mcphost_and_known_to_the_plugin_diagnosis() -> None:
    """No generic top-level name (`runners`, `bridge`) a user's folder or another distribution also has;
    and `mcphost.plugins._startup` tells a shadowed package of ours from any other import failure."""
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["hatch"]["build"]
    packages = wheel["targets"]["wheel"]["packages"]
    assert tuple(packages) == OWN_PACKAGES
    assert all(name.startswith("mcphost") for name in packages)


def test_every_copy_source_exists_and_is_not_dockerignored() -> None:
    ignored = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied: list[str] = []
    for stage in dockerfile_stages():
        for args in stage.all("COPY"):
            parts = [part for part in args.split() if not part.startswith("--")]
            if "--from=" in args:
                continue
            copied += parts[:-1]
    assert {
        "pyproject.toml",
        "uv.lock",
        "mcphost",
        "mcphost_runners",
        "mcphost_bridge",
        "package.json",
    } <= set(copied)
    for source in copied:
        assert (REPO / source).exists(), f"COPY {source}: not in the repository"
        hits = [p for p in ignored if fnmatch.fnmatch(source, p) or source == p.rstrip("/")]
        assert not hits, f"COPY {source} is excluded by .dockerignore {hits}"


def test_the_runtime_stage_is_unprivileged_has_a_healthcheck_and_serves() -> None:
    stages = dockerfile_stages()
    assert [s.name for s in stages][-1] == "runtime", "the last stage is the image"
    runtime = stages[-1]
    assert runtime.all("USER") == ["mcphost"]
    assert f"--uid {NON_ROOT_UID}" in " ".join(runtime.all("RUN"))
    assert any("/healthz" in check for check in runtime.all("HEALTHCHECK"))
    assert _exec_form(runtime.all("CMD")[-1]) == ["mcphost", "serve"]
    env: dict[str, str] = {}
    for args in runtime.all("ENV"):
        env |= _env_pairs(args)
    for variable in env:
        if variable.startswith("MCPHOST_"):
            host_setting(variable)
    assert env["MCPHOST_DATA_DIR"] == "/data"
    # The dev tools never reach the image.
    build = next(s for s in stages if s.name == "build")
    assert all("--no-dev" in args for args in build.all("RUN") if "uv sync" in args)


def test_compose_runs_mcphost_on_a_healthy_postgres_with_real_settings() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "mcphost", "runtime"}
    app = services["mcphost"]
    assert app["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in services["postgres"]
    for variable in app["environment"]:
        host_setting(variable)
    url = interpolate(app["environment"]["MCPHOST_DATABASE_URL"], {})
    assert url.startswith("postgresql+asyncpg://"), url
    assert all(str(port).startswith("127.0.0.1:") for port in app["ports"]), "published on loopback only"
    with pytest.raises(AssertionError, match="MCPHOST_API_KEY"):
        interpolate(app["environment"]["MCPHOST_API_KEY"], {})


def _healthcheck_command(port: int) -> list[str]:
    runtime = dockerfile_stages()[-1]
    check = runtime.all("HEALTHCHECK")[-1]
    command = _exec_form(check.split("CMD", 1)[1].strip())
    assert command[0] == "python"
    return [sys.executable, *(part.replace(":8787/", f":{port}/") for part in command[1:])]


COMPOSE_KEY = "compose-test-key-0123456789"


@pytest.fixture
def compose_postgres() -> Iterator[str | None]:
    """Compose's `postgres` service: a database of its own on this machine's server (None: SQLite).

    Never the server's shared database: what an earlier run left there (a schema another checkout
    migrated, say) is not this test's to meet."""
    if not POSTGRES_URL:
        yield None
        return
    with fresh_postgres_database_sync(POSTGRES_URL) as url:
        yield url


def compose_host_env(tmp_path: Path, port: int, postgres: str | None) -> dict[str, str]:
    """The image's ENV and compose's environment for the `mcphost` service, on this machine: a free port,
    the data volume under `tmp_path`, and `postgres` as compose's `postgres` (None: SQLite)."""
    env: dict[str, str] = {}
    for args in dockerfile_stages()[-1].all("ENV"):
        env |= {k: v for k, v in _env_pairs(args).items() if k.startswith("MCPHOST_")}
    for variable, value in compose()["services"]["mcphost"]["environment"].items():
        env[variable] = interpolate(str(value), {"MCPHOST_API_KEY": COMPOSE_KEY})
    env["MCPHOST_DATA_DIR"] = str(tmp_path / "data")  # the image's /data volume
    env["MCPHOST_LISTEN"] = f"0.0.0.0:{port}"  # the container's listen, on a free port
    env["MCPHOST_PUBLIC_URL"] = f"http://127.0.0.1:{port}"
    if postgres:
        env["MCPHOST_DATABASE_URL"] = postgres
    else:
        del env["MCPHOST_DATABASE_URL"]  # SQLite under data_dir, as `docker run` without compose
        env["MCPHOST_BLOB_BACKEND"] = "disk"
    return env


def test_compose_has_a_runtime_sidecar_that_takes_its_token_from_the_environment() -> None:
    from mcphost.cli import build_parser
    from mcphost.cli._runtimes import TOKEN_ENV, parse_labels

    services = compose()["services"]
    sidecar, host = services["runtime"], services["mcphost"]
    assert sidecar["image"] == host["image"], "the host's image, with its plugins"
    assert sidecar["profiles"] == ["runtime"], "started once its token exists"
    assert sidecar["depends_on"]["mcphost"]["condition"] == "service_healthy"
    assert sidecar["healthcheck"] == {"disable": True}, "the image's /healthz check is the host's"
    assert set(sidecar["environment"]) == {TOKEN_ENV}
    assert interpolate(sidecar["environment"][TOKEN_ENV], {TOKEN_ENV: "mcprt_x"}) == "mcprt_x"
    command = [interpolate(str(part), {}) for part in sidecar["command"]]
    assert command[:2] == ["mcphost", "runtime"]
    args = build_parser().parse_args(command[1:])
    assert args.host == "http://mcphost:8787", "the host service's listen, on compose's network"
    assert args.token is None, "the token never on the command line (the process list shows it)"
    assert (args.slots, parse_labels(args.labels)) == (2, {"pool": "local"})
    assert "runtime-data" in compose()["volumes"]


@pytest.mark.slow
def test_the_runtime_sidecar_command_registers_with_the_compose_host(
    tmp_path: Path,
    start_server: Any,
    compose_postgres: str | None,
) -> None:
    """compose's `runtime` command and environment, with a token from `mcphost runtimes add`, against the
    `mcphost` service's command: the sidecar registers and heartbeats (GET /v1/runtimes says so)."""
    import httpx2

    port = free_port()
    env = compose_host_env(tmp_path, port, compose_postgres)
    start_server(**env)
    name = f"sidecar-{uuid.uuid4().hex[:8]}"
    added = mcphost("runtimes", "add", name, cwd=tmp_path, timeout=60, **env)
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert token.startswith("mcprt_")
    command = [interpolate(str(part), {}) for part in compose()["services"]["runtime"]["command"]]
    command = [f"http://127.0.0.1:{port}" if part == "http://mcphost:8787" else part for part in command]
    command[command.index("--workdir") + 1] = str(tmp_path / "runtime")
    sidecar_env = {
        k: v
        for k, v in env.items()
        if k in ("MCPHOST_DATA_DIR", "MCPHOST_DATABASE_URL", "MCPHOST_BLOB_BACKEND")
    }
    sidecar_env["MCPHOST_DATA_DIR"] = str(tmp_path / "runtime-data")  # its own volume, not the host's
    with (tmp_path / "sidecar.log").open("w") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "mcphost.cli", *command[1:]],
            cwd=tmp_path, env=cli_env(**sidecar_env, MCPHOST_RUNTIME_TOKEN=token),
            stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            answer = httpx2.get(
                f"http://127.0.0.1:{port}/v1/runtimes",
                headers={"authorization": f"Bearer {COMPOSE_KEY}"},
                timeout=30,
            )
            listed = [r for r in answer.json()["runtimes"] if r["name"] == name]
            if listed and listed[0]["alive"]:
                break
            assert daemon.poll() is None, (tmp_path / "sidecar.log").read_text()
            assert time.monotonic() < deadline, (listed, (tmp_path / "sidecar.log").read_text())
            time.sleep(0.2)
        (found,) = listed
        assert (found["name"], found["state"], found["slots"], found["labels"]) == (
            name,
            "online",
            2,
            {"pool": "local"},
        )
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        assert mcphost("runtimes", "remove", name, cwd=tmp_path, timeout=60, **env).returncode == 0


@pytest.mark.slow
def test_the_container_command_serves_with_the_compose_environment(
    tmp_path: Path,
    start_server: Any,
    compose_postgres: str | None,
) -> None:
    """The image's CMD, ENV and HEALTHCHECK with compose's environment, on this machine instead of docker."""
    port = free_port()
    runtime = dockerfile_stages()[-1]
    env = compose_host_env(tmp_path, port, compose_postgres)
    supplied = {"MCPHOST_API_KEY": COMPOSE_KEY}
    assert _exec_form(runtime.all("CMD")[-1])[:2] == ["mcphost", "serve"]
    server = start_server(**env)

    health = subprocess.run(
        _healthcheck_command(port), capture_output=True, text=True, timeout=30, check=False
    )
    assert health.returncode == 0, health.stderr

    sent = mcphost(
        "send", "hello from compose", "--url", f"http://127.0.0.1:{port}", "--json",
        cwd=tmp_path, MCPHOST_API_KEY=supplied["MCPHOST_API_KEY"],
    )  # fmt: skip
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert "hello from compose" in sent.stdout
    code, _ = server.stop()
    assert code == 0, server.log()


def test_a_container_without_an_api_key_refuses_to_listen_beyond_loopback(tmp_path: Path) -> None:
    done = mcphost(
        "serve", cwd=tmp_path,
        MCPHOST_DATA_DIR=str(tmp_path / "data"), MCPHOST_LISTEN=f"0.0.0.0:{free_port()}",
    )  # fmt: skip
    assert done.returncode != 0
    assert "without an API key" in done.stderr
    assert "Traceback" not in done.stderr

"""The TypeScript client (`clients/typescript`): its generated types are those of today's API and
protocol, the browser bundle the console imports (`mcphost/console/static/client.js`) is built from
today's source, it builds with `tsc`, and its `node --test` suite passes against a real `mcphost serve`.

Needs Node and `npm ci` in clients/typescript (CI does both); elsewhere these tests skip and say so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Generator
from pathlib import Path

import pytest

from mcphost.cli import main

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "clients" / "typescript"
MISBEHAVE = [sys.executable, str(REPO / "tests" / "plugins" / "misbehave.py")]
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    (NODE is None or not (PACKAGE / "node_modules" / ".bin" / "tsc").exists()) and not os.environ.get("CI"),
    reason="the TypeScript client needs node and `npm ci` in clients/typescript",
)


def _node(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    return subprocess.run(
        [NODE, *args], cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_generated_types_are_those_of_the_api_and_the_protocol(tmp_path: Path) -> None:
    assert main(["schema", str(tmp_path / "schemas")]) == 0
    env = {
        **os.environ,
        "MCPHOST_SCHEMA_DIR": str(tmp_path / "schemas"),
        "MCPHOST_GENERATED_DIR": str(tmp_path),
    }
    done = _node("scripts/generate.mjs", env=env)
    assert done.returncode == 0, done.stderr
    for name in ("openapi.ts", "protocol.ts"):
        committed = (PACKAGE / "src" / "generated" / name).read_text(encoding="utf-8")
        assert (tmp_path / name).read_text(encoding="utf-8") == committed, (
            f"clients/typescript/src/generated/{name} is stale: run `npm run generate` in clients/typescript"
        )


def test_the_consoles_bundle_is_built_from_the_clients_source(tmp_path: Path) -> None:
    out = tmp_path / "client.js"
    done = _node("scripts/bundle.mjs", env={**os.environ, "MCPHOST_BUNDLE_OUT": str(out)})
    assert done.returncode == 0, done.stderr
    committed = REPO / "mcphost" / "console" / "static" / "client.js"
    assert out.read_text(encoding="utf-8") == committed.read_text(encoding="utf-8"), (
        "mcphost/console/static/client.js is stale: run `npm run bundle` in clients/typescript"
    )
    # one module with the package's exports and no imports left: a browser loads it as it is
    text = committed.read_text(encoding="utf-8")
    assert not re.search(r"^\s*import\b", text, re.MULTILINE), "the bundle still imports a module"
    exported = set(
        re.findall(r"^export (?:async function\*?|function|class|const) (\w+)", text, re.MULTILINE)
    )
    assert {"McphostClient", "APIError", "APIConnectionError", "RunStream", "readEvents"} <= exported


@pytest.fixture
def server(tmp_path: Path) -> Generator[str, None, None]:
    """A real `mcphost serve` with the agents the TypeScript tests address (by bot_id): echo, bad
    (misbehave), and cron (schedule events)."""
    config = tmp_path / "mcphost.toml"
    config.write_text(
        f'[host]\ndata_dir = "{tmp_path / "data"}"\nbundled_plugins = false\n'
        '[[plugins]]\nname = "echo"\ncommand = ["' + sys.executable + '", "-m", "mcphost_runners.echo"]\n'
        f'[[plugins]]\nname = "misbehave"\ncommand = {json.dumps(MISBEHAVE)}\n'
        '[[agents]]\nid = "echo"\nrunner = "plugin:mcphost/echo/default"\nmatch = { bot_id = "echo" }\n'
        '[[agents]]\nid = "bad"\nrunner = "plugin:test/misbehave/default"\nmatch = { bot_id = "bad" }\n'
        '[[agents]]\nid = "cron"\nrunner = "plugin:mcphost/echo/default"\nevent_types = ["schedule.triggered"]\n',
        encoding="utf-8",
    )
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPHOST_")}
    with log.open("w") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mcphost.cli",
                "serve",
                "--config",
                str(config),
                "--listen",
                "127.0.0.1:0",
            ],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 90
        while "serving on " not in (text := log.read_text(errors="replace")):
            assert process.poll() is None, f"mcphost serve exited {process.returncode}:\n{text}"
            assert time.monotonic() < deadline, f"mcphost serve did not start:\n{text}"
            time.sleep(0.05)
        yield text.split("serving on ", 1)[1].split()[0]
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def test_the_client_builds_and_its_node_tests_pass_against_mcphost_serve(server: str) -> None:
    built = _node(str(PACKAGE / "node_modules" / "typescript" / "bin" / "tsc"), "-p", "tsconfig.json")
    assert built.returncode == 0, built.stdout + built.stderr
    env = {**os.environ, "MCPHOST_URL": server}
    env.pop("MCPHOST_API_KEY", None)
    done = _node("--test", "--test-reporter=tap", "dist/test/", env=env)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    summary = dict(re.findall(r"^# (tests|pass|fail) (\d+)$", done.stdout, re.MULTILINE))
    assert summary == {"tests": "9", "pass": "9", "fail": "0"}, done.stdout[-3000:]

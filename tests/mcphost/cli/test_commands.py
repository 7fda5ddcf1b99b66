"""`init`, `config check`, `cancel`, `show --follow`, `runs --watch` and `completion`, run as a user does."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from mcphost.app import open_database
from mcphost.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from mcphost.config import load_settings
from mcphost.models import RunStatus
from mcphost.retention import LEASE
from mcphost.stores import open_stores
from mcphost.stores.leases import LeaseStore
from tests.examples.clikit import NO_BUNDLED, cli_env, mcphost
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.openai_chat import Reply, serve_fake_chat
from tests.fakes.script import Text, always
from tests.mcphost.test_cli import wait_for_running, write_config


async def test_init_writes_a_commented_config_that_loads_and_refuses_to_overwrite(tmp_path: Path) -> None:
    code, _, err = await mcphost("init", cwd=tmp_path)
    assert code == 0, err
    written = (tmp_path / "mcphost.toml").read_text(encoding="utf-8")
    assert written.count("\n# ") >= 10  # commented
    settings = load_settings(tmp_path / "mcphost.toml")
    assert [a.id for a in settings.agents] == ["default"]

    (tmp_path / "mcphost.toml").write_text("# mine\n", encoding="utf-8")
    code, _, err = await mcphost("init", cwd=tmp_path)
    assert code == EXIT_USAGE
    assert "--force" in err
    assert (tmp_path / "mcphost.toml").read_text(encoding="utf-8") == "# mine\n"
    code, _, err = await mcphost("init", "--force", cwd=tmp_path)
    assert code == 0, err
    assert (tmp_path / "mcphost.toml").read_text(encoding="utf-8") == written

    code, out, err = await mcphost("config", "check", cwd=tmp_path, env=NO_BUNDLED)
    assert code == EXIT_FAILED  # bundled plugins off: the default agent's memo runner is not provided
    assert "fail  agent default" in out


async def test_config_check_passes_a_good_setup_one_line_per_check(tmp_path: Path) -> None:
    code, _, err = await mcphost("init", cwd=tmp_path)
    assert code == 0, err
    code, out, err = await mcphost("config", "check", "--json", cwd=tmp_path)
    assert code == 0, out + err
    checks = [json.loads(line) for line in out.splitlines()]
    assert {c["status"] for c in checks} == {"ok"}
    names = [c["check"] for c in checks]
    assert names[0] == "config"
    assert {"plugin echo", "plugin claude-code", "agent default", "database"} <= set(names)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_config_check_fails_each_broken_part_and_names_it(tmp_path: Path) -> None:
    port = _closed_port()
    config = tmp_path / "mcphost.toml"
    config.write_text(
        f'[host]\ndatabase_url = "postgresql+asyncpg://postgres@127.0.0.1:{port}/x"\n'
        '[[plugins]]\nname = "gone"\ncommand = ["no-such-program-xyz"]\n'
        '[[agents]]\nid = "nobody"\nrunner = "plugin:acme/none/default"\nevent_types = ["a.b"]\n'
        '[[agents]]\nid = "coder"\nrunner = "plugin:mcphost/claude-code/default"\n'
        'config = { cli_path = "/nonexistent/claude" }\nevent_types = ["c.d"]\n'
        '[tools.broken]\ncommand = ["no-such-server-xyz"]\n',
        encoding="utf-8",
    )
    code, out, err = await mcphost("config", "check", "--timeout", "5", cwd=tmp_path)
    assert code == EXIT_FAILED, err
    assert "Traceback" not in err
    failed = {line[6:30].strip() for line in out.splitlines() if line.startswith("fail")}
    assert failed == {"plugin gone", "agent nobody", "agent coder", "tools broken", "database"}
    assert any(line.startswith("fail  database") and f"127.0.0.1:{port}" in line for line in out.splitlines())
    assert any(line.startswith("ok    plugin echo") for line in out.splitlines())


async def test_config_check_of_a_config_that_does_not_load_exits_2(tmp_path: Path) -> None:
    (tmp_path / "mcphost.toml").write_text("[host]\nlisten = 'nowhere'\n", encoding="utf-8")
    code, out, err = await mcphost("config", "check", "--json", cwd=tmp_path)
    assert code == EXIT_USAGE, err
    (check,) = [json.loads(line) for line in out.splitlines()]
    assert (check["check"], check["status"]) == ("config", "fail")
    assert "listen" in check["detail"]


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mcphost.cli", *args],
        cwd=cwd,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_cancel_ends_a_running_run_and_follow_streams_it_to_the_end(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'mcphost.db'}"
    running = _start(["run", "slow:60", "--conversation", "m1", "--config", str(config)], tmp_path)
    try:
        run_id = await wait_for_running(db_url, tmp_path / "data")
        follow = _start(
            ["show", run_id, "--follow", "--json", "--interval", "0.1", "--config", str(config)], tmp_path
        )
        with follow:
            code, _, err = await mcphost("cancel", run_id, "--config", str(config), cwd=tmp_path)
            assert code == 0, err
            assert "cancel requested" in err
            out, follow_err = await anyio.to_thread.run_sync(lambda: follow.communicate(timeout=60))
        assert follow.returncode == EXIT_FAILED, follow_err
        lines = [json.loads(line) for line in out.splitlines()]
        assert lines[-1]["run"]["run_id"] == run_id
        assert lines[-1]["run"]["status"] == "cancelled"
        seqs = [line["seq"] for line in lines[:-1]]
        assert seqs == sorted(set(seqs))
        assert lines[-2]["type"] == "run.failed"
        with anyio.fail_after(60):
            await anyio.to_thread.run_sync(running.wait)
    finally:
        for process in (running,):
            if process.poll() is None:
                process.kill()
                process.wait()
        running.stdout.close()  # type: ignore[union-attr]  # PIPE was given
        running.stderr.close()  # type: ignore[union-attr]  # PIPE was given

    code, _, err = await mcphost("cancel", run_id, "--config", str(config), cwd=tmp_path)
    assert code == EXIT_FAILED
    assert "already" in err
    async with open_stores(db_url, tmp_path / "data") as stores:
        assert (await stores.runs.get(run_id)).status is RunStatus.CANCELLED


async def test_follow_of_a_completed_run_prints_its_results_and_exits_0(tmp_path: Path) -> None:
    code, _, err = await mcphost("run", "hello", cwd=tmp_path)
    assert code == 0, err
    code, out, err = await mcphost("runs", "--json", cwd=tmp_path)
    run_id = json.loads(out)["items"][0]["run_id"]
    code, out, err = await mcphost("show", run_id, "--follow", cwd=tmp_path)
    assert code == 0, err
    assert "run.completed" in out.splitlines()[-1]
    assert err.strip().splitlines()[-1].startswith(run_id)


async def test_runs_watch_reprints_as_runs_arrive_until_ctrl_c(tmp_path: Path) -> None:
    watch = _start(["runs", "--watch", "--json", "--interval", "0.2"], tmp_path)
    with watch:
        assert watch.stdout is not None
        first = await anyio.to_thread.run_sync(watch.stdout.readline)
        assert json.loads(first)["items"] == []
        # a hang guard, not a speed bound: a cold `run` beside the watch's polls can take a minute on a
        # CI machine whose cores another test keeps busy
        code, _, err = await mcphost("run", "hello", cwd=tmp_path, timeout=180)
        assert code == 0, err
        with anyio.fail_after(60):
            while True:
                line = await anyio.to_thread.run_sync(watch.stdout.readline)
                if json.loads(line)["items"]:
                    break
        watch.send_signal(signal.SIGINT)
        _, err = await anyio.to_thread.run_sync(lambda: watch.communicate(timeout=30))
    assert watch.returncode == EXIT_INTERRUPTED
    assert err.strip() == "mcphost: error: interrupted"


def _bash_complete(script: str, words: list[str]) -> list[str]:
    line = " ".join(words)
    program = (
        f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}\n"
        '_mcphost_complete; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.split()


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["mcphost", "ca"], ["cancel"]),
        (["mcphost", "kb", "s"], ["search"]),
        (["mcphost", "runs", "--status", "c"], ["completed", "cancelled"]),
        (["mcphost", "--config", "x.toml", "config", "c"], ["check"]),
        (["mcphost", "completion", "f"], ["fish"]),
        (["mcphost", "show", "run_1", "--fo"], ["--follow"]),
    ],
)
async def test_bash_completion_completes_commands_flags_and_choices(
    tmp_path: Path, words: list[str], expected: list[str]
) -> None:
    code, script, err = await mcphost("completion", "bash", cwd=tmp_path)
    assert code == 0, err
    assert sorted(_bash_complete(script, words)) == sorted(expected)


async def test_zsh_and_fish_completion_scripts_name_every_command(tmp_path: Path) -> None:
    for shell in ("zsh", "fish"):
        code, script, err = await mcphost("completion", shell, cwd=tmp_path)
        assert code == 0, err
        for command in ("run", "runs", "show", "cancel", "init", "config", "completion", "state"):
            assert command in script
    code, fish, _ = await mcphost("completion", "fish", cwd=tmp_path)
    assert (
        "-n '__fish_seen_subcommand_from runs' -l status -r -a 'queued running completed failed cancelled parked'"
        in fish
    )


async def test_cancel_with_url_goes_through_the_servers_api(tmp_path: Path) -> None:
    import httpx2

    config = write_config(tmp_path)
    port = _closed_port()
    url = f"http://127.0.0.1:{port}"
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'mcphost.db'}"
    server = _start(["serve", "--listen", f"127.0.0.1:{port}", "--config", str(config)], tmp_path)
    send = None
    try:
        async with httpx2.AsyncClient() as client:
            with anyio.fail_after(60):
                while True:
                    try:
                        if (await client.get(f"{url}/healthz")).status_code == 200:
                            break
                    except httpx2.TransportError:
                        await anyio.sleep(0.1)
        send = _start(
            ["send", "slow:60", "--conversation", "m1", "--url", url, "--config", str(config)], tmp_path
        )
        run_id = await wait_for_running(db_url, tmp_path / "data")
        code, _, err = await mcphost("cancel", run_id, "--url", url, "--reason", "test", cwd=tmp_path)
        assert code == 0, err
        _, send_err = await anyio.to_thread.run_sync(lambda: send.communicate(timeout=60))
        assert send.returncode == EXIT_FAILED
        assert "cancelled" in send_err
        code, _, err = await mcphost("cancel", run_id, "--url", url, cwd=tmp_path)
        assert code == EXIT_FAILED
        assert "conflict" in err
        assert "nothing to cancel" in err
    finally:
        for process in (send, server):
            if process is not None:
                if process.poll() is None:
                    process.terminate()
                process.communicate(timeout=60)


async def test_gc_reports_rows_and_bytes_per_kind_a_dry_run_keeps_everything_and_a_held_lease_waits(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path,
        extra="[retention]\nartifacts_days = 1\ndead_deliveries_days = 2\n",
    )
    settings = load_settings(config)
    async with open_database(settings) as stores:
        expired = await stores.artifacts.put_bytes(
            b"z" * 1234, name=None, mime_type="text/plain", max_bytes=4096, expires_at=1.0
        )
        kept = await stores.artifacts.put_bytes(b"k", name=None, mime_type="text/plain", max_bytes=4096)
    assert kept.expires_at is not None  # artifacts_days gives new artifacts an expiry

    code, out, err = await mcphost("gc", "--dry-run", "--json", "--config", str(config), cwd=tmp_path)
    assert code == 0, err
    dry = [json.loads(line) for line in out.splitlines()]
    assert [(d["kind"], d["rows"], d["bytes"], d["dry_run"]) for d in dry] == [
        ("artifacts", 1, 1234, True),
        ("dead_deliveries", 0, 0, True),
    ]
    async with open_database(settings) as stores:
        assert await stores.artifacts.blobs.stored_size(expired.sha256) == 1234  # nothing deleted
        assert await LeaseStore(stores.db).acquire(LEASE, "host-elsewhere", term_s=600)
    code, out, err = await mcphost("gc", "--config", str(config), cwd=tmp_path)
    assert code == EXIT_FAILED
    assert "holds the 'retention' lease" in err
    async with open_database(settings) as stores:
        await LeaseStore(stores.db).release(LEASE, "host-elsewhere")

    code, out, err = await mcphost("gc", "--config", str(config), cwd=tmp_path)
    assert code == 0, err
    assert out.splitlines() == [
        "artifacts: deleted 1 rows, 1234 bytes",
        "dead_deliveries: deleted 0 rows, 0 bytes",
    ]
    async with open_database(settings) as stores:
        assert await stores.artifacts.blobs.stored_size(expired.sha256) is None
        assert await stores.artifacts.read(kept.artifact_id) == b"k"


async def test_config_check_calls_each_model_once_and_reports_each_without_a_traceback(
    tmp_path: Path,
) -> None:
    async with serve_fake_chat() as chat, fake_anthropic(always(Text("pong"))) as claude:
        chat.script("m1", Reply(content="p", json_body=True))
        chat.script("m2", Reply(status=401, error="invalid api key"))
        config = tmp_path / "mcphost.toml"
        config.write_text(
            '[[agents]]\nid = "default"\nrunner = "plugin:mcphost/memo/default"\n'
            f'[models.good]\nprovider = "openai-compatible"\nbase_url = "{chat.base_url}"\nmodel = "m1"\n'
            f'[models.sonnet]\nprovider = "anthropic"\nbase_url = "{claude.base_url}"\nmodel = "claude-sonnet-4-5"\n'
            f'[models.refused]\nprovider = "openai-compatible"\nbase_url = "{chat.base_url}"\nmodel = "m2"\n'
            f'[models.gone]\nprovider = "openai-compatible"\nbase_url = "http://127.0.0.1:{_closed_port()}/v1"\n'
            'model = "x"\n'
            f'[models.ranker]\nprovider = "openai-compatible"\nbase_url = "{chat.base_url}"\nmodel = "rr"\n'
            'kind = "rerank"\n'
            f'[models.embedder]\nprovider = "openai-compatible"\nbase_url = "{chat.base_url}"\nmodel = "emb"\n'
            'kind = "embedding"\n',
            encoding="utf-8",
        )
        code, out, err = await mcphost("config", "check", "--json", "--timeout", "10", cwd=tmp_path)
        assert code == EXIT_FAILED, out + err
        assert "Traceback" not in err
        models = {c["check"]: c for c in map(json.loads, out.splitlines()) if c["check"].startswith("model ")}
        assert {name: c["status"] for name, c in models.items()} == {
            "model good": "ok",
            "model sonnet": "ok",
            "model refused": "fail",
            "model gone": "fail",
            "model ranker": "ok",
            "model embedder": "ok",
        }
        assert models["model good"]["http_status"] == 200
        assert models["model good"]["latency_ms"] >= 0
        assert models["model refused"]["http_status"] == 401
        assert "invalid api key" in models["model refused"]["detail"]
        assert "could not be reached" in models["model gone"]["detail"]
        assert [r.body.get("max_tokens") for r in chat.requests if r.model == "m1"] == [1]
        assert [r.body["max_tokens"] for r in claude.requests] == [1]
        assert [r.body["documents"] for r in chat.requests if r.model == "rr"] == [["pong"]]
        assert [r.body["input"] for r in chat.requests if r.model == "emb"] == [["ping"]]

        before = len(chat.requests) + len(claude.requests)
        code, out, err = await mcphost("config", "check", "--skip-models", cwd=tmp_path)
        assert code == 0, out + err
        assert "warn  models" in out
        assert len(chat.requests) + len(claude.requests) == before

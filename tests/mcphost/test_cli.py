"""The `mcphost` command line as a user runs it: real subprocesses, a real SQLite file or PostgreSQL.

Covers the quickstart path, the inspection commands, precise failures that store nothing, a host killed
with SIGKILL mid-run, and two host processes sharing one PostgreSQL conversation.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path

import anyio
import jsonschema
import pytest

from mcphost.api import RunsPage
from mcphost.api._routes import openapi
from mcphost.cli import main
from mcphost.common.timestamps import iso8601
from mcphost.config import WebhookConfig
from mcphost.facts._tools import FACTS_TOOLS
from mcphost.models import RunStatus
from mcphost.protocol.facts import FACTS_ANSWERS
from mcphost.stores import Stores, open_stores
from tests._postgres import NO_POSTGRES, POSTGRES_URL, fresh_postgres_database
from tests.mcphost.hostkit import MISBEHAVE, REPO
from tests.mcphost.stores.factories import admitted, nested_json, overwrite_json

ENV_DROP = ("MCPHOST_CONFIG", "MCPHOST_DATABASE_URL", "MCPHOST_DATA_DIR")


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def mcphost(
    *args: str, cwd: Path, timeout: float = 60, env: dict[str, str] | None = None, script: bool = False
) -> subprocess.CompletedProcess[str]:
    """`mcphost ARGS` in `cwd`; `script`: through the installed `mcphost` script, as the README runs it."""
    program = (
        [str(Path(sys.executable).parent / "mcphost")] if script else [sys.executable, "-m", "mcphost.cli"]
    )
    return subprocess.run(
        [*program, *args],
        cwd=cwd,
        env={**cli_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def in_process(
    config: Path, capfd: pytest.CaptureFixture[str]
) -> Callable[..., Awaitable[subprocess.CompletedProcess[str]]]:
    """`mcphost ARGS --config CONFIG` in this process (a subprocess spends seconds importing); `main`
    runs its own event loop, so it runs in a worker thread."""

    async def cli(*args: str) -> subprocess.CompletedProcess[str]:
        code = await anyio.to_thread.run_sync(lambda: main([*args, "--config", str(config)]))
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return cli


def write_config(tmp_path: Path, database_url: str | None = None, *, extra: str = "") -> Path:
    db = f'database_url = "{database_url}"\n' if database_url else ""
    text = (
        f'[host]\ndata_dir = "{tmp_path / "data"}"\n{db}'
        f'[[plugins]]\nname = "misbehave"\ncommand = {json.dumps(MISBEHAVE)}\n'
        '[[agents]]\nid = "echo"\nrunner = "plugin:mcphost/echo/default"\nmatch = { conversation_id = "cli" }\n'
        '[[agents]]\nid = "bad"\nrunner = "plugin:test/misbehave/default"\n'
        'match = { conversation_id = ["m1", "m2", "shared"] }\n' + extra
    )
    path = tmp_path / "mcphost.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
async def sqlite_stores(tmp_path: Path) -> AsyncGenerator[Stores, None]:
    async with open_stores(f"sqlite+aiosqlite:///{tmp_path / 'data' / 'mcphost.db'}", tmp_path / "data") as s:
        yield s


async def counts(stores: Stores, conversation: str) -> tuple[int, int, int]:
    runs = (await stores.runs.list(conversation_id=conversation, limit=100)).items
    events = (await stores.events.page(conversation, None, limit=100)).items
    transcript = (await stores.transcript.page(conversation, None, limit=100)).items
    return len(runs), len(events), len(transcript)


def test_the_quickstart_streams_the_reply_and_prints_the_run(tmp_path: Path) -> None:
    done = mcphost("run", "hello", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Turn 1. I heard “hello”.")
    assert "completed" in done.stderr
    assert (tmp_path / ".mcphost" / "mcphost.db").is_file()

    again = mcphost("run", "tea please", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("Turn 2. I heard “tea please”. You said “hello” earlier.")

    listing = mcphost("runs", "--json", cwd=tmp_path)
    runs = json.loads(listing.stdout)["items"]
    assert [r["status"] for r in runs] == ["completed", "completed"]
    assert set(json.loads(listing.stdout)) == set(RunsPage.model_fields)  # GET /v1/runs's envelope
    assert runs[0]["created_at_iso"] == iso8601(runs[0]["created_at"])
    shown = json.loads(mcphost("show", runs[0]["run_id"], "--json", cwd=tmp_path).stdout)
    types = [r["type"] for r in shown["results"]]
    assert types[0] == "message.delta"
    assert types[-2:] == ["message.completed", "run.completed"]
    assert [t["role"] for t in shown["transcript"]] == ["user", "assistant"]
    assert {a["tool"] for a in shown["audit"]} >= {"state_get", "history_page", "state_set"}
    assert all(a["outcome"] == "ok" for a in shown["audit"])
    assert shown["grant"]["revoked"] is True
    assert "token" not in json.dumps(shown["grant"]).replace("token_hash", "")

    human = mcphost("show", runs[0]["run_id"], cwd=tmp_path)
    assert "grant revoked" in human.stdout
    assert "audit (" in human.stdout
    assert "ran on this host (local)" in human.stdout
    assert shown["runtime"] is None, "a local agent's run has no runtime audit"


def test_runners_lists_registered_and_rejected_manifests(tmp_path: Path) -> None:
    bad = [sys.executable, str(REPO / "tests" / "plugins" / "bad_manifest.py")]
    config = write_config(tmp_path, extra=f'[[plugins]]\nname = "bad"\ncommand = {json.dumps(bad)}\n')
    shown = mcphost("runners", "--check", "--json", "--config", str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    ids = {r["id"] for r in report["runners"]}
    assert {"plugin:mcphost/echo/default", "plugin:test/misbehave/default"} <= ids
    reasons = " ".join(r["reason"] for r in report["rejected"])
    assert "protocol_version '2' is not supported" in reasons


def test_schema_writes_json_schemas(tmp_path: Path) -> None:
    done = mcphost("schema", str(tmp_path / "schemas"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    schema = json.loads((tmp_path / "schemas" / "agent_run_result.schema.json").read_text())
    assert "run.completed" in json.dumps(schema)
    for tool, model in FACTS_ANSWERS.items():
        written = json.loads((tmp_path / "schemas" / f"{tool}_answer.schema.json").read_text())
        assert written == model.model_json_schema() == FACTS_TOOLS[tool].tool.output_schema
    assert json.loads((tmp_path / "schemas" / "openapi.json").read_text()) == openapi()


def _configs() -> list[tuple[str, str]]:
    """Every `mcphost.toml` the README and examples/ show: (where, TOML text)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", readme, re.DOTALL)
    found = [(f"README.md toml block {i}", block) for i, block in enumerate(blocks)]
    found += [
        (str(p.relative_to(REPO)), p.read_text(encoding="utf-8"))
        for p in sorted(REPO.glob("examples/*.toml"))
    ]
    return found


def test_the_written_config_schema_accepts_every_documented_config_and_refuses_a_wrong_key(
    tmp_path: Path,
) -> None:
    assert main(["schema", str(tmp_path)]) == 0
    schema = json.loads((tmp_path / "mcphost_toml.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    configs = _configs()
    assert len(configs) >= 6
    for where, text in configs:
        # jsonschema's stubs leave a deprecated overload of iter_errors partly unannotated.
        errors = [e.message for e in validator.iter_errors(tomllib.loads(text))]  # pyright: ignore[reportUnknownMemberType]
        assert errors == [], where
    for wrong in (
        {"host": {"listn": "x"}},
        {"agents": [{"id": "a"}]},
        {"source": "x"},
        {"host": {"listen": 5}},
    ):
        assert list(validator.iter_errors(wrong)), wrong  # pyright: ignore[reportUnknownMemberType] -- as above


def test_db_upgrade_creates_the_schema(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    done = mcphost("db", "upgrade", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "up to date" in done.stderr
    assert (tmp_path / "data" / "mcphost.db").is_file()


@pytest.mark.parametrize(
    ("args", "config_text", "expected"),
    [
        (["run", "hi", "--limit", "3"], None, "unrecognized arguments: --limit 3"),
        (["runs", "--limit", "0"], None, "expected a whole number from 1 to 100, got 0"),
        (["runs", "--status", "done"], None, "invalid choice: 'done'"),
        (["run", "hi", "--data", "{not json"], None, "--data is not valid JSON"),
        (["run", "hi", "--data", "[1]"], None, "data: Input should be a valid dictionary"),
        (["run", "hi", "--event-type", "Nope"], None, "event_type: String should match pattern"),
        (["run", "hi", "--agent", "ghost"], None, "Agent 'ghost' is not configured"),
        (["run", "hi", "--event-id", "continuation:apr_1"], None, "starts with 'continuation:'"),
        (["run", "hi", "--conversation", "elsewhere"], "", "No agent is bound to 'message.received'"),
        (["run", "hi"], 'run_timeout_s = "soon"\n', "host.run_timeout_s: Input should be a valid number"),
        (["run", "hi"], "[[agents]]\nid = 'x'\nrunner = 'bad id'\n", "agents[0] (id 'x').runner"),
    ],
)
async def test_bad_input_fails_with_a_precise_message_and_stores_nothing(
    tmp_path: Path, args: list[str], config_text: str | None, expected: str
) -> None:
    if config_text is not None:
        config = write_config(tmp_path) if config_text == "" else tmp_path / "custom.toml"
        if config_text:
            config.write_text(f'[host]\ndata_dir = "{tmp_path / "data"}"\n' + config_text, encoding="utf-8")
        args = [*args, "--config", str(config)]
    done = mcphost(*args, cwd=tmp_path)
    assert done.returncode != 0
    assert expected in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    db = tmp_path / ".mcphost" / "mcphost.db"
    other = tmp_path / "data" / "mcphost.db"
    for path in (db, other):
        if path.exists():
            async with open_stores(f"sqlite+aiosqlite:///{path}", path.parent) as stores:
                assert (await stores.runs.list(limit=10)).items == []


async def test_a_host_killed_mid_run_marks_the_run_failed_on_restart(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    env = cli_env()
    killed = await anyio.open_process(
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
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'mcphost.db'}"
    try:
        run_id = await wait_for_running(db_url, tmp_path / "data")
        async with open_stores(db_url, tmp_path / "data") as stores:
            before = await counts(stores, "m1")
        killed.send_signal(signal.SIGKILL)
        with anyio.fail_after(10):
            await killed.wait()
    finally:
        if killed.returncode is None:
            killed.kill()
            await killed.wait()

    again = mcphost("run", "ok", "--conversation", "m2", "--config", str(config), cwd=tmp_path)
    assert again.returncode == 0, again.stderr

    async with open_stores(db_url, tmp_path / "data") as stores:
        run = await stores.runs.get(run_id)
        assert run.status is RunStatus.FAILED
        assert run.error is not None
        assert run.error.code == "host.restarted"
        assert (await stores.runs.grant(run_id)).revoked
        assert await counts(stores, "m1") == before  # every committed row is still there
        assert before == (1, 1, 1)


async def wait_for_running(db_url: str, data_dir: Path) -> str:
    with anyio.fail_after(30):
        while True:
            if (data_dir / "mcphost.db").exists():
                async with open_stores(db_url, data_dir, migrate=False) as stores:
                    try:
                        page = await stores.runs.list(status=RunStatus.RUNNING, limit=1)
                    except Exception:
                        page = None
                    if page is not None and page.items:
                        return page.items[0].run_id
            await anyio.sleep(0.1)


@pytest.mark.postgres
async def test_two_host_processes_never_run_one_conversation_twice_at_once(tmp_path: Path) -> None:
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    async with fresh_postgres_database(POSTGRES_URL) as url:
        config = write_config(tmp_path, url)
        prepared = mcphost("db", "upgrade", "--config", str(config), cwd=tmp_path)
        assert prepared.returncode == 0, prepared.stderr
        command = [sys.executable, "-m", "mcphost.cli", "run", "slow:0.4", "--conversation", "shared"]
        command += ["--config", str(config)]
        exits: list[int | None] = []

        async def one_host() -> None:
            done = await anyio.run_process(command, cwd=tmp_path, env=cli_env(), check=False)
            exits.append(done.returncode)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(one_host)
        assert exits == [0] * 6
        async with open_stores(url, tmp_path / "data") as stores:
            runs = (await stores.runs.list(conversation_id="shared", limit=10)).items
        assert len(runs) == 6
        assert len({r.host_id for r in runs}) == 6
        spans = sorted((r.started_at or 0.0, r.ended_at or 0.0) for r in runs)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, f"two runs of one conversation overlapped: {spans}"


async def test_state_get_list_and_delete_reach_a_value_too_deep_to_serve(
    stores: Stores, database_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    owner = ("plugin:test/misbehave/default", "bad", "m1", "")
    await stores.state.set("conversation", owner, "good", {"n": 1})
    await stores.state.set("conversation", owner, "deep", 0)
    await overwrite_json(
        stores,
        "state",
        "value",
        nested_json(5000),
        scope="conversation",
        owner=json.dumps(list(owner), separators=(",", ":")),
        key="deep",
    )
    config = write_config(tmp_path, database_url)
    ids = ["--runner-id", owner[0], "--binding-id", owner[1], "--conversation-id", owner[2]]
    cli = in_process(config, capfd)

    good = await cli("state", "get", "conversation", "good", *ids)
    assert (good.returncode, json.loads(good.stdout)) == (0, {"n": 1}), good.stderr
    deep = await cli("state", "get", "conversation", "deep", *ids)
    assert deep.returncode == 1
    assert "nests arrays/objects more than 64 levels deep" in deep.stderr
    assert "mcphost state delete conversation deep" in deep.stderr
    listed = await cli("state", "list", "conversation", "--json", *ids)
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)["items"]
    assert [(i["key"], i["value"], i["unservable"]) for i in items] == [
        ("deep", None, True),
        ("good", {"n": 1}, False),
    ]

    missing = await cli("state", "delete", "conversation", "deep", "--runner-id", owner[0])
    assert missing.returncode == 1
    assert "missing binding_id, conversation_id" in missing.stderr
    extra = await cli("state", "delete", "runner", "deep", "--runner-id", owner[0], "--actor-id", "u1")
    assert extra.returncode == 1
    assert "actor_id is not part of it" in extra.stderr
    deleted = await cli("state", "delete", "conversation", "deep", *ids)
    assert deleted.returncode == 0, deleted.stderr
    assert await stores.state.get("conversation", owner, "deep") is None
    again = await cli("state", "delete", "conversation", "deep", *ids)
    assert again.returncode == 1
    assert "No 'conversation' state value 'deep'" in again.stderr
    entry = await stores.state.get("conversation", owner, "good")
    assert entry is not None
    assert entry.value == {"n": 1}


async def test_deliveries_lists_the_dead_letters_and_redelivers_one(
    database_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    url = "http://127.0.0.1:9/receiver"
    secret = "whsec_" + base64.b64encode(b"s" * 32).decode()
    async with open_stores(
        database_url, tmp_path / "data", webhooks=[WebhookConfig(url=url, secret=secret)]
    ) as stores:
        run = await admitted(stores)
        await stores.runs.transition(run.run_id, RunStatus.RUNNING)
        await stores.runs.finish(run.run_id, RunStatus.COMPLETED)
        (row,) = (await stores.deliveries.claim("host-a", lease_s=30)).leases
        await stores.deliveries.retry(row, error="HTTP 500", next_attempt_at=0.0, dead=True)
    config = write_config(tmp_path, database_url, extra=f'[[webhooks]]\nurl = "{url}"\nsecret = "{secret}"\n')
    cli = in_process(config, capfd)

    dead = await cli("deliveries", "--status", "dead", "--json")
    assert dead.returncode == 0, dead.stderr
    listed = json.loads(dead.stdout)["deliveries"]
    assert [(d["delivery_id"], d["last_error"]) for d in listed] == [(row.delivery_id, "HTTP 500")]
    text = await cli("deliveries")
    assert row.delivery_id in text.stdout
    assert "dead" in text.stdout
    again = await cli("deliveries", "redeliver", row.delivery_id)
    assert again.returncode == 0, again.stderr
    assert "pending again" in again.stdout
    assert (
        await cli("deliveries", "--status", "dead", "--json")
    ).stdout.strip() == '{"deliveries":[],"next_cursor":null}'
    assert (await cli("deliveries", "redeliver", "msg_unknown")).returncode != 0


async def test_approvals_lists_and_decides_one_idempotently(
    database_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async with open_stores(database_url, tmp_path / "data") as stores:
        run = await admitted(stores)
        asked = await stores.approvals.request(run.run_id, "tool", {"tool": "state_set", "arguments": {}})
    config = write_config(tmp_path, database_url)
    cli = in_process(config, capfd)

    pending = await cli("approvals", "--status", "pending", "--json")
    assert pending.returncode == 0, pending.stderr
    listed = json.loads(pending.stdout)["approvals"]
    assert [(a["approval_id"], a["status"], a["request"]["tool"]) for a in listed] == [
        (asked.approval_id, "pending", "state_set")
    ]
    text = await cli("approvals")
    assert f"{asked.approval_id}  pending" in text.stdout
    approved = await cli("approvals", "approve", asked.approval_id, "--note", "looks fine")
    assert (approved.returncode, approved.stdout.strip()) == (0, f"{asked.approval_id} is approved")
    again = await cli("approvals", "approve", asked.approval_id)
    assert again.stdout.strip() == f"{asked.approval_id} was already approved; nothing changed"
    refused = await cli("approvals", "deny", asked.approval_id)
    assert refused.returncode == 1
    assert "already approved; it cannot be denied" in refused.stderr
    missing = await cli("approvals", "approve")
    assert missing.returncode == 1
    assert "needs an APPROVAL_ID" in missing.stderr
    assert (await cli("approvals", "deny", "apr_unknown")).returncode != 0
    shown = json.loads((await cli("approvals", "--status", "approved", "--json")).stdout)["approvals"]
    assert [(a["approval_id"], a["note"]) for a in shown] == [(asked.approval_id, "looks fine")]


async def test_approvals_answer_decides_a_question_to_the_user_with_its_text(
    database_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async with open_stores(database_url, tmp_path / "data") as stores:
        run = await admitted(stores)
        question = {"questions": [{"question": "Which colour?"}], "tool_use_id": "toolu_1"}
        asked = await stores.approvals.request(run.run_id, "interaction", question, parked=True)
        tool = await stores.approvals.request(run.run_id, "tool", {"tool": "state_set", "arguments": {}})
    cli = in_process(write_config(tmp_path, database_url), capfd)

    approve = await cli("approvals", "approve", asked.approval_id)
    assert approve.returncode != 0
    assert "decide it with 'answer'" in approve.stderr
    empty = await cli("approvals", "answer", asked.approval_id)
    assert empty.returncode == 1
    assert "needs the answer" in empty.stderr
    blank = await cli("approvals", "answer", asked.approval_id, "   ")
    assert blank.returncode == 1
    stray = await cli("approvals", "deny", asked.approval_id, "no")
    assert stray.returncode == 1
    assert "takes no TEXT" in stray.stderr
    wrong_kind = await cli("approvals", "answer", tool.approval_id, "blue")
    assert wrong_kind.returncode != 0
    assert "'approve' or 'deny'" in wrong_kind.stderr

    answered = await cli("approvals", "answer", asked.approval_id, "Blue, please", "--json")
    assert answered.returncode == 0, answered.stderr
    shown = json.loads(answered.stdout)
    assert (shown["status"], shown["note"], shown["kind"]) == ("approved", "Blue, please", "interaction")
    again = await cli("approvals", "answer", asked.approval_id, "Blue, please")
    assert again.stdout.strip() == f"{asked.approval_id} was already approved; nothing changed"
    async with open_stores(database_url, tmp_path / "data") as stores:
        stored = await stores.approvals.get(asked.approval_id)
        untouched = await stores.approvals.get(tool.approval_id)
    assert (stored.status, stored.note) == ("approved", "Blue, please")
    assert untouched.status == "pending"

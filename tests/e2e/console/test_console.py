"""The console in a real browser: Playwright driving Debian's chromium against `mcphost serve` subprocesses.

One server (memo and a slow misbehave agent) and one with an API key serve every test of the module; each
test opens its own browser context. Runs are created over `/v1` with `httpx2`, the way another client
would, and the pages must show them without a reload. Every page is screenshotted into the test's
`tmp_path`, and into `$MCPHOST_SCREENSHOTS` when it is set (CI keeps that folder as test output).
Waits are Playwright's own conditions (a row with a status appears), never fixed sleeps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.fakes.anthropic import FakeAnthropic, fake_anthropic
from tests.fakes.script import Fail, ModelRequest, Reply, Text
from tests.mcphost.gateway.test_host_tools import UPSTREAM
from tests.mcphost.hostkit import MISBEHAVE
from tests.mcphost.test_serve import Server, cli_env, mcphost

CHROMIUM = shutil.which("chromium")
if CHROMIUM is None:  # pragma: no cover - CI installs chromium (.ci/run)
    pytest.skip("chromium is not installed: `apt-get install -y chromium` (CI does)", allow_module_level=True)

from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright  # noqa: E402

pytestmark = pytest.mark.slow

API_KEY = "console-test-key-0123456789"
VIEWPORT: Any = {"width": 1280, "height": 800}
"""The desktop size every page is checked at (and the README's screenshots are taken at)."""
UI_TIMEOUT_MS = 60_000
"""How long an expectation waits for the page (a loaded CI host is slow; nothing here is timed)."""
expect.set_options(timeout=UI_TIMEOUT_MS)


def _config(folder: Path, extra: str = "") -> Path:
    text = extra + (
        f'[host]\ndata_dir = "{folder / "data"}"\n'
        f'[[plugins]]\nname = "misbehave"\ncommand = {json.dumps(MISBEHAVE)}\n'
        '[[agents]]\nid = "memo"\nrunner = "plugin:mcphost/memo/default"\nmatch = { bot_id = "memo" }\n'
        '[[agents]]\nid = "slow"\nrunner = "plugin:test/misbehave/default"\ntimeout_s = 600\n'
        'match = { bot_id = "slow" }\nactions = { allow = ["deploy"] }\n'
        '[[agents]]\nid = "digest"\nrunner = "plugin:mcphost/memo/default"\nevent_types = ["schedule.triggered"]\n'
        '[[schedules]]\nid = "new-year"\ncron = "0 0 1 1 *"\nagent = "digest"\ntext = "happy new year"\n'
    )
    path = folder / "mcphost.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _serve(folder: Path, extra: str = "", **env: str) -> Iterator[Server]:
    import subprocess
    import sys

    folder.mkdir(parents=True, exist_ok=True)
    stderr = folder / "serve.log"
    with stderr.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcphost.cli", "serve", "--config", str(_config(folder, extra)), "--listen",
             "127.0.0.1:0", "--grace", "1"],
            cwd=folder, env=cli_env(**env), stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            text = stderr.read_text(encoding="utf-8", errors="replace")
            if "serving on " in text:
                yield Server(process, text.split("serving on ", 1)[1].split()[0], stderr)
                return
            assert process.poll() is None, f"mcphost serve exited with {process.returncode}:\n{text}"
            assert time.monotonic() < deadline, f"mcphost serve did not start:\n{text}"
            time.sleep(0.05)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


class Receiver:
    """A webhook receiver on 127.0.0.1 that answers 500 until `accept` is set, then 204."""

    def __init__(self) -> None:
        import http.server
        import threading

        receiver = self
        self.accept = False
        self.received: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.received.append(self.headers.get("webhook-id", ""))
                self.send_response(204 if receiver.accept else 500)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    opened = Receiver()
    yield opened
    opened.server.shutdown()
    opened.server.server_close()


MODEL_CALLER = [sys.executable, str(Path(__file__).parents[2] / "plugins" / "model_caller.py")]
MODEL_KEY_ENV = "MCPHOST_CONSOLE_MODEL_KEY"


def _upstream_script(request: ModelRequest) -> Reply:
    """The primary model's upstream is overloaded (so its calls fall back); the backup answers."""
    if request.body.get("model") == "claude-primary":
        return Fail(503, "overloaded on purpose")
    return Text("the fake model answers")


class ModelUpstream:
    """The fake Anthropic Messages API (`tests/fakes/anthropic.py`) on 127.0.0.1, served from a thread of
    its own so the sync browser tests can share it with `mcphost serve`."""

    def __init__(self) -> None:
        import threading

        self.stop = threading.Event()
        self.ready = threading.Event()
        self.fake: FakeAnthropic | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30), "the fake model upstream did not start"
        assert self.fake is not None

    def _run(self) -> None:
        import anyio
        import anyio.to_thread

        async def main() -> None:
            async with fake_anthropic(_upstream_script) as fake:
                self.fake = fake
                self.ready.set()
                await anyio.to_thread.run_sync(self.stop.wait)

        anyio.run(main)

    def models(self) -> str:
        """`[models.primary]` (falls back to backup) and `[models.backup]`, both priced here, and the agent
        `modeler` (the model-caller plugin) granted both."""
        assert self.fake is not None
        prices = "input_usd_per_mtok = 3.0\noutput_usd_per_mtok = 15.0\n"
        return (
            f'[models.primary]\nprovider = "anthropic"\nbase_url = "{self.fake.base_url}"\n'
            f'api_key_env = "{MODEL_KEY_ENV}"\nmodel = "claude-primary"\nfallback = ["backup"]\n{prices}'
            f'[models.backup]\nprovider = "anthropic"\nbase_url = "{self.fake.base_url}"\n'
            f'api_key_env = "{MODEL_KEY_ENV}"\nmodel = "claude-sonnet-4-5"\n{prices}'
            f'[[plugins]]\nname = "model-caller"\ncommand = {json.dumps(MODEL_CALLER)}\n'
            '[[agents]]\nid = "modeler"\nrunner = "plugin:test/model-caller/default"\n'
            'match = { bot_id = "modeler" }\nresources = { models = ["primary", "backup"] }\n'
        )


@pytest.fixture(scope="module")
def upstream() -> Iterator[ModelUpstream]:
    started = ModelUpstream()
    yield started
    started.stop.set()
    started.thread.join(30)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, receiver: Receiver, upstream: ModelUpstream
) -> Iterator[Server]:
    # approvals the slow agent asks for are announced to `receiver`, retried for 1 s, then dead
    webhook = (
        f'[[webhooks]]\nurl = "{receiver.url}"\nsecret = "whsec_{"A" * 32}"\nevents = ["approval.requested"]\n'
        'agents = ["slow"]\nmax_age_s = 1\n'
    )
    folder = tmp_path_factory.mktemp("console")
    extra = webhook + _resources(folder) + upstream.models()
    yield from _serve(folder, extra, **{MODEL_KEY_ENV: "sk-ant-console-test"})


GUIDE = """# Backups

Backups run every night at two and keep thirty days of snapshots.

# Restores

A restore takes minutes; pick a snapshot by date.
"""


def _resources(folder: Path) -> str:
    """A knowledge base (ingested by the test that searches it), a real upstream tool server, and an agent
    granted both and bound to a source, a conversation and a hook."""
    docs = folder / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(GUIDE, encoding="utf-8")
    return (
        f'[knowledge.docs]\nname = "Product docs"\ndescription = "How backups work"\npaths = ["{docs}"]\n'
        f"[tools.fake]\ncommand = {json.dumps([sys.executable, UPSTREAM, 'stdio'])}\n"
        '[hooks.tickets]\nverify = "bearer"\nsecret = "ticket-secret-0123456789"\nagent = "librarian"\n'
        'event_type = "ticket.opened"\n'
        '[[agents]]\nid = "librarian"\nrunner = "plugin:mcphost/memo/default"\n'
        'event_types = ["message.received", "ticket.opened"]\n'
        'match = { bot_id = "librarian", source = "helpdesk", conversation_id = ["support", "billing"] }\n'
        'resources = { knowledge_bases = ["docs"], tools = ["fake__echo"] }\n'
    )


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _serve(tmp_path_factory.mktemp("console-key"), MCPHOST_API_KEY=API_KEY)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM is not None
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(UI_TIMEOUT_MS)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))

    def on_console(message: ConsoleMessage) -> None:
        # A refused key is how the login prompt learns it must ask: the browser logs that 401, nothing else.
        if message.type == "error" and "status of 401" not in message.text:
            problems.append(f"console {message.type}: {message.text}")

    opened.on("console", on_console)
    yield opened
    context.close()
    assert not problems, problems  # an uncaught script error or a CSP refusal fails the test


def screenshot(page: Page, tmp_path: Path, name: str) -> None:
    """The whole page into `tmp_path`; with `$MCPHOST_SCREENSHOTS` set, also what the window shows (1280 by
    800 on a desktop) into that folder — `docs/console/` holds the README's, taken this way."""
    page.screenshot(path=tmp_path / f"{name}.png", full_page=True)
    if folder := os.environ.get("MCPHOST_SCREENSHOTS"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=Path(folder) / f"{name}.png")


def post_event(url: str, text: str, *, agent: str, conversation: str = "c1", **headers: str) -> str:
    body: dict[str, Any] = {
        "event_type": "message.received",
        "conversation": {"conversation_id": conversation, "bot_id": agent},
        "actor": {"actor_id": "u1"},
        "input": {"text": text},
        "agent_id": agent,
    }
    answer = httpx2.post(f"{url}/v1/events", json=body, headers=headers, timeout=30)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["run_id"])


def wait_ended(url: str, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run = httpx2.get(f"{url}/v1/runs/{run_id}", timeout=30).json()["run"]
        if run["status"] in ("completed", "failed", "cancelled"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.1)


def test_the_runs_list_shows_a_new_run_and_its_status_changes_without_a_reload(
    server: Server, page: Page, tmp_path: Path
) -> None:
    page.goto(f"{server.url}/")
    expect(page).to_have_url(f"{server.url}/console/")
    expect(page.locator("#filter-agent option[value='slow']")).to_be_attached()

    slow = post_event(server.url, "slow:600", agent="slow", conversation="live")
    row = page.locator(f"#runs tr[data-run-id='{slow}']")
    expect(row).to_have_attribute("data-status", "running")
    screenshot(page, tmp_path, "runs")
    answer = httpx2.post(f"{server.url}/v1/runs/{slow}/cancel", json={}, timeout=30)
    assert answer.status_code == 202, answer.text
    expect(row).to_have_attribute("data-status", "cancelled")

    memo = post_event(server.url, "hello from the list", agent="memo", conversation="live")
    expect(page.locator(f"#runs tr[data-run-id='{memo}']")).to_have_attribute("data-status", "completed")

    # filters: each one is GET /v1/runs's (agent, status, time), so the host does the narrowing
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/v1/runs?" in request.url else None)
    page.select_option("#filter-agent", "slow")
    expect(page.locator(f"#runs tr[data-run-id='{memo}']")).to_have_count(0)
    expect(page.locator(f"#runs tr[data-run-id='{slow}']")).to_have_count(1)
    assert any("agent=slow" in url for url in asked), asked
    page.select_option("#filter-agent", "")
    page.select_option("#filter-status", "completed")
    expect(page.locator(f"#runs tr[data-run-id='{slow}']")).to_have_count(0)
    expect(page.locator(f"#runs tr[data-run-id='{memo}']")).to_have_count(1)
    assert "status=completed" in page.url
    page.select_option("#filter-status", "")

    page.fill("#filter-to", "2001-01-01T00:00:00")  # before any run of this host
    page.locator("#filter-to").dispatch_event("change")
    expect(page.locator("#runs tr.empty")).to_have_count(1)
    assert any("until=2001-01-01T" in url or "until=2000-12-31T" in url for url in asked), asked
    page.select_option("#filter-window", "hour")  # a recent period replaces from/to
    expect(page.locator("#filter-to")).to_be_hidden()
    expect(page.locator(f"#runs tr[data-run-id='{memo}']")).to_have_count(1)
    assert "window=hour" in page.url
    assert any("since=" in url for url in asked), asked
    screenshot(page, tmp_path, "runs-filtered")


def test_the_run_detail_shows_its_mcp_calls_results_grant_and_records_and_links_its_conversation(
    server: Server, page: Page, tmp_path: Path
) -> None:
    run_id = post_event(server.url, "what did I say before?", agent="memo", conversation="detail")
    ended = wait_ended(server.url, run_id)
    assert ended["status"] == "completed"
    audit = httpx2.get(f"{server.url}/v1/runs/{run_id}/audit", timeout=30).json()["items"]
    assert audit, "memo reads host facts over MCP"

    page.goto(f"{server.url}/console/run.html?id={run_id}")
    expect(page.locator("#summary [data-status]")).to_have_attribute("data-status", "completed")
    calls = page.locator("#audit tbody tr")
    expect(calls).to_have_count(len(audit))
    for call in audit:
        expect(page.locator(f"#audit tr[data-tool='{call['tool']}']").first).to_have_attribute(
            "data-outcome", call["outcome"]
        )
    expect(page.locator("#results li[data-type='run.completed']")).to_have_count(1)
    expect(page.locator("#results li[data-type='message.completed']")).to_contain_text("memo has no model")
    expect(page.locator("#grant")).to_contain_text("Runner plugin:mcphost/memo/default, agent memo")
    expect(page.locator("#grant table")).to_contain_text("history_page")
    expect(page.locator("#transcript li[data-role='user']")).to_contain_text("what did I say before?")
    expect(page.locator("#events tbody tr").first).to_be_visible()
    expect(page.locator("#cancel")).to_be_disabled()
    assert not any(ended["usage"].values()), ended["usage"]  # memo counts nothing: no empty Usage row
    expect(page.locator("#summary dt", has_text="Usage")).to_have_count(0)
    # the timeline: the run, then every MCP call as a bar inside the run's span, in the audit's order
    expect(page.locator("#timeline .wf-call")).to_have_count(len(audit))
    assert page.locator("#timeline .wf-call").evaluate_all("rows => rows.map(r => r.dataset.tool)") == [
        call["tool"] for call in audit
    ]
    assert all(call["started_at"] is not None for call in audit)
    # measured in one script: a refresh may replace the timeline between two locator calls
    bars = page.locator("#timeline").evaluate(
        """t => {
          const track = t.querySelector(".wf-run .wf-track").getBoundingClientRect();
          return [...t.querySelectorAll(".wf-call .wf-bar")].map((bar) => {
            const box = bar.getBoundingClientRect();
            return [box.left - track.left, track.right - box.right, box.width];
          });
        }"""
    )
    assert len(bars) == len(audit)
    for from_start, to_end, width in bars:
        assert from_start >= -1, bars
        assert to_end >= -1, bars
        assert width > 0, bars
    assert words_broken_in_tables(page) == []
    expect(page.locator("#model-calls-none")).to_have_text("No host model calls.")
    screenshot(page, tmp_path, "run-memo")

    page.click("#summary a[href^='/console/conversation.html']")
    expect(page.locator("#conv-transcript li[data-role='user']")).to_contain_text("what did I say before?")
    expect(page.locator("#conv-transcript li[data-role='assistant']")).to_contain_text("memo has no model")
    expect(page.locator("#conv-events li").first).to_contain_text("message.received")
    screenshot(page, tmp_path, "conversation")


def usd(value: float) -> str:
    """Dollars as the console shows them (api.js `usd`): to the micro-dollar, zeros past the cents dropped."""
    return "$" + re.sub(r"0{1,4}$", "", f"{value:.6f}")


def model_run(url: str, conversation: str) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """A completed run of `modeler`: its id, its model call rows and its MCP audit rows."""
    run_id = post_event(url, "models:primary,backup", agent="modeler", conversation=conversation)
    ended = wait_ended(url, run_id)
    assert ended["status"] == "completed", ended["error"]
    usage = httpx2.get(f"{url}/v1/runs/{run_id}/usage", timeout=30).json()["items"]
    audit = httpx2.get(f"{url}/v1/runs/{run_id}/audit", timeout=30).json()["items"]
    return run_id, usage, audit


def test_the_run_page_shows_its_model_calls_on_the_time_axis_with_its_mcp_calls(
    server: Server, page: Page, tmp_path: Path
) -> None:
    run_id, usage, audit = model_run(server.url, "models")
    # the primary model's upstream answered 503: its call fell back to backup, a row per attempt
    assert [(r["model_id"], r["attempt"], r["status"], r["streamed"]) for r in usage] == [
        ("primary", 1, "failed", False),
        ("backup", 2, "ok", False),
        ("backup", 1, "ok", True),
    ]
    assert [a["tool"] for a in audit] == ["state_get", "state_set"]

    page.goto(f"{server.url}/console/run.html?id={run_id}")
    expect(page.locator("#summary [data-status]")).to_have_attribute("data-status", "completed")
    expect(page.locator("#timeline .wf-model")).to_have_count(3)
    # one time axis, in the order things happened: the runner read state, asked a model (which fell
    # back), wrote state, then asked again streamed
    kinds = page.locator("#timeline .wf-row[data-kind]").evaluate_all(
        "rows => rows.map(r => r.dataset.kind === 'model' ? `model:${r.dataset.model}:${r.dataset.attempt}` : r.dataset.kind === 'mcp' ? r.dataset.tool : r.dataset.kind)"
    )
    assert kinds == [
        "run",
        "state_get",
        "model:primary:1",
        "model:backup:2",
        "state_set",
        "model:backup:1",
    ], kinds
    expect(page.locator("#timeline .wf-model[data-status='failed']")).to_have_count(1)
    expect(page.locator("#timeline .wf-model .wf-ttft")).to_have_count(1)  # the streamed call's first token
    bars = page.locator("#timeline").evaluate(
        """t => {
          const track = t.querySelector(".wf-run .wf-track").getBoundingClientRect();
          return [...t.querySelectorAll(".wf-model .wf-bar, .wf-call .wf-bar")].map((bar) => {
            const box = bar.getBoundingClientRect();
            return [box.left - track.left, track.right - box.right, box.width];
          });
        }"""
    )
    assert len(bars) == 5
    for from_start, to_end, width in bars:
        assert from_start >= -1, bars
        assert to_end >= -1, bars
        assert width > 0, bars

    # the model calls as numbers: tokens, cost, latency, first token, status, attempt
    rows = page.locator("#model-calls tbody tr")
    expect(rows).to_have_count(3)
    failed = page.locator("#model-calls tr[data-model='primary']")
    expect(failed).to_have_attribute("data-status", "failed")
    expect(failed.locator("td[data-label='Status']")).to_contain_text("HTTP 503")
    streamed = rows.nth(2)
    expect(streamed.locator("td[data-label='Attempt']")).to_have_text("1")
    expect(streamed.locator("td[data-label='Input']")).to_have_text(f"{usage[2]['input_tokens']:,}")
    expect(streamed.locator("td[data-label='Output']")).to_have_text(f"{usage[2]['output_tokens']:,}")
    expect(streamed.locator("td[data-label='First token']")).to_have_text(re.compile(r"^\d+\.\d ms$"))
    expect(rows.nth(1).locator("td[data-label='First token']")).to_have_text("not streamed")
    expect(rows.nth(1).locator("td[data-label='Latency']")).to_have_text(f"{usage[1]['latency_ms']:.1f} ms")
    cost = sum(r["cost_usd"] for r in usage)
    expect(page.locator("#model-totals")).to_contain_text(usd(cost))
    assert words_broken_in_tables(page) == []
    screenshot(page, tmp_path, "run")


def test_the_usage_page_totals_by_day_model_agent_and_actor_with_a_chart_and_filters(
    server: Server, page: Page, tmp_path: Path
) -> None:
    model_run(server.url, "usage-page")
    totals = {
        group: httpx2.get(f"{server.url}/v1/usage", params={"group_by": group}, timeout=30).json()["totals"]
        for group in ("day", "model", "agent", "actor")
    }
    [today] = totals["day"]
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/v1/usage" in request.url else None)

    page.goto(f"{server.url}/console/usage.html")
    for group, rows in totals.items():
        for total in rows:
            row = page.locator(f"#usage-{group} tr[data-key='{total['key'] or ''}']")
            expect(row.locator("td[data-label='Calls']")).to_have_text(f"{total['calls']:,}")
            expect(row.locator("td[data-label='Failed']")).to_have_text(f"{total['failed']:,}")
            expect(row.locator("td[data-label='Input tokens']")).to_have_text(f"{total['input_tokens']:,}")
            expect(row.locator("td[data-label='Output tokens']")).to_have_text(f"{total['output_tokens']:,}")
            expect(row.locator("td[data-label='Cost']")).to_have_text(usd(total["cost_usd"]))
    expect(page.locator("#usage-agent tr[data-key='modeler']")).to_have_count(1)
    expect(page.locator("#usage-model tr[data-key='primary'] td[data-label='Failed']")).not_to_have_text("0")
    expect(page.locator("#total-calls")).to_have_text(f"{today['calls']:,}")
    expect(page.locator("#total-cost")).to_have_text(usd(today["cost_usd"]))
    # the chart: a bar for the day, as tall as the largest (the only one), its value the day's cost
    bar = page.locator(f"#usage-chart svg rect.bar[data-day='{today['key']}']")
    expect(bar).to_have_count(1)
    assert float(bar.get_attribute("data-value") or "nan") == pytest.approx(today["cost_usd"])
    expect(page.locator("#usage-chart svg")).to_have_attribute("aria-label", re.compile(today["key"]))
    assert words_broken_in_tables(page) == []
    screenshot(page, tmp_path, "usage")

    page.select_option("#filter-metric", "calls")
    expect(bar).to_have_attribute("data-value", str(today["calls"]))
    assert "metric=calls" in page.url

    # from/to are whole UTC days sent as the API's bounds: the day after `to` is the exclusive end
    page.fill("#filter-to", "2001-01-01")
    page.click("#filters button[type=submit]")
    expect(page.locator("#usage-model tr.empty")).to_have_count(1)
    expect(page.locator("#usage-chart")).to_contain_text("nothing to chart")
    assert "to=2001-01-01" in page.url
    assert any("to=2001-01-02T00%3A00%3A00.000Z" in url for url in asked), asked
    page.fill("#filter-to", "")
    page.fill("#filter-from", today["key"])
    page.click("#filters button[type=submit]")
    expect(page.locator(f"#usage-day tr[data-key='{today['key']}']")).to_have_count(1)
    assert any(f"from={today['key']}T00%3A00%3A00Z" in url for url in asked), asked


WORDS_BROKEN = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll("td, th")) {
    if (!cell.getClientRects().length) continue; // not rendered (a closed <details>, a hidden table)
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest("code, pre, a, .raw")) continue; // ids, links and JSON: not prose
      for (const match of node.textContent.matchAll(/[\\p{L}\\p{N}_]+/gu)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
        if (lines.size > 1) broken.push(match[0]);
      }
    }
  }
  return broken;
}"""
"""The words (letters, digits and `_`) of the prose in any table cell of the page that are split across
lines; a break at a hyphen, slash, dot or space is a break between words. Ids, links and JSON (`code`,
`pre`, `a`, `.raw`) may break anywhere: they are not words, and a cell must not push its table wider
than the page."""


def words_broken_in_tables(page: Page) -> list[str]:
    return list(page.evaluate(WORDS_BROKEN))


def test_the_schedules_page_lists_creates_pauses_resumes_and_deletes(
    server: Server, page: Page, tmp_path: Path
) -> None:
    page.goto(f"{server.url}/console/schedules.html")
    config = page.locator("#schedules tr[data-schedule-id='new-year']")
    expect(config).to_have_attribute("data-origin", "config")
    expect(config).to_contain_text("0 0 1 1 *")
    expect(config.locator("button")).to_have_count(0)  # the config file's schedules are read-only here

    page.fill("#new-id", "hourly-digest")
    page.fill("#new-every", "1h")
    page.select_option("#new-agent", "digest")
    page.fill("#new-text", "the digest")
    page.click("#create button[type=submit]")
    made = page.locator("#schedules tr[data-schedule-id='hourly-digest']")
    expect(made).to_have_attribute("data-paused", "false")
    expect(page.locator("#new-id")).to_have_value("")  # the form is cleared for the next one
    expect(page.locator("#create-error")).to_be_empty()
    stored = httpx2.get(f"{server.url}/v1/schedules/hourly-digest", timeout=30).json()
    assert stored["spec"]["every"] == "1h"
    assert stored["spec"]["agent"] == "digest"
    assert stored["spec"]["text"] == "the digest"
    expect(made.locator("td[data-label='Next fire']")).not_to_be_empty()
    assert words_broken_in_tables(page) == []
    screenshot(page, tmp_path, "schedules")

    made.locator("button.pause").click()
    expect(made).to_have_attribute("data-paused", "true")
    assert httpx2.get(f"{server.url}/v1/schedules/hourly-digest", timeout=30).json()["paused"] is True
    made.locator("button.resume").click()
    expect(made).to_have_attribute("data-paused", "false")

    made.locator("button.delete").click()
    expect(made).to_have_count(0)
    assert httpx2.get(f"{server.url}/v1/schedules/hourly-digest", timeout=30).status_code == 404


def test_the_conversations_page_searches_newest_first_and_a_conversation_shows_its_runs_and_is_deleted(
    server: Server, page: Page, tmp_path: Path
) -> None:
    first = post_event(server.url, "the first conversation", agent="memo", conversation="listed-a")
    wait_ended(server.url, first)
    second = post_event(server.url, "the second conversation", agent="memo", conversation="listed-b")
    wait_ended(server.url, second)

    page.goto(f"{server.url}/console/conversations.html?prefix=listed-")
    rows = page.locator("#conversations tbody tr[data-conversation-id]")
    expect(rows).to_have_count(2)
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.conversationId)") == ["listed-b", "listed-a"]
    expect(rows.first.locator("td[data-label='Newest run']")).to_have_text(second)
    expect(rows.first.locator("td[data-label='Agent']")).to_have_text("memo")
    assert words_broken_in_tables(page) == []
    screenshot(page, tmp_path, "conversations")
    page.fill("#filter-prefix", "listed-a")
    page.click("#filters button[type=submit]")
    expect(rows).to_have_count(1)
    assert "prefix=listed-a" in page.url

    rows.first.locator("a").first.click()
    expect(page.locator(f"#conv-runs tr[data-run-id='{first}']")).to_have_attribute(
        "data-status", "completed"
    )
    expect(page.locator("#conv-transcript li[data-role='user']")).to_contain_text("the first conversation")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete-conversation")
    expect(page.locator("#deleted")).to_contain_text("listed-a")
    expect(page.locator("#conv-transcript li")).to_have_count(0)
    listed = httpx2.get(f"{server.url}/v1/conversations", params={"prefix": "listed-"}, timeout=30).json()
    assert [c["conversation_id"] for c in listed["items"]] == ["listed-b"]


def test_no_page_breaks_a_word_in_a_table_at_desktop_width(server: Server, page: Page) -> None:
    conversation = "a-conversation-with-a-long-identifier-0123456789"
    run_id = post_event(server.url, "a message long enough to wrap in its table cell " * 3, agent="memo",
                        conversation=conversation)  # fmt: skip
    wait_ended(server.url, run_id)
    modeled, _, _ = model_run(server.url, conversation + "-models")
    pages = ["/console/", f"/console/run.html?id={run_id}", f"/console/run.html?id={modeled}",
             "/console/usage.html", "/console/approvals.html?status=",
             "/console/deliveries.html?status=", "/console/agents.html", "/console/schedules.html",
             "/console/conversations.html", f"/console/conversation.html?id={conversation}"]  # fmt: skip
    for path in pages:
        page.goto(f"{server.url}{path}")
        expect(page.locator("table tbody tr").first).to_be_attached()
        page.wait_for_load_state("networkidle")
        assert words_broken_in_tables(page) == [], path
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), f"{path} overflows"


def test_the_run_page_shows_usage_as_numbers(server: Server, page: Page) -> None:
    run_id = post_event(server.url, "usage", agent="slow", conversation="usage")
    assert wait_ended(server.url, run_id)["usage"]["input_tokens"] == 12345
    page.goto(f"{server.url}/console/run.html?id={run_id}")
    expect(page.locator("#summary [data-status]")).to_have_attribute("data-status", "completed")
    usage = page.locator("#summary .usage")
    expect(usage.locator("[data-usage='input tokens']")).to_have_text("input tokens 12,345")
    expect(usage.locator("[data-usage='output tokens']")).to_have_text("output tokens 678")
    expect(usage.locator("[data-usage='cost usd']")).to_have_text("cost usd 0.25")
    expect(usage.locator("[data-usage='extra.cache read']")).to_have_text("extra.cache read 9,000")
    expect(usage).not_to_contain_text("{")  # numbers, not the raw JSON


def test_cancel_from_the_run_page_cancels_a_running_run(server: Server, page: Page, tmp_path: Path) -> None:
    run_id = post_event(server.url, "slow:600", agent="slow", conversation="cancel")
    page.goto(f"{server.url}/console/run.html?id={run_id}")
    expect(page.locator("#summary [data-status]")).to_have_attribute("data-status", "running")
    page.click("#cancel")
    expect(page.locator("#summary [data-status]")).to_have_attribute("data-status", "cancelled")
    assert wait_ended(server.url, run_id)["status"] == "cancelled"
    expect(page.locator("#cancel")).to_be_disabled()
    screenshot(page, tmp_path, "run-cancelled")


def _png() -> bytes:
    """A valid 2 by 2 red PNG, made here (no fixture file)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_the_run_detail_previews_text_json_and_image_artifacts_with_a_size_cap(
    server: Server, page: Page, tmp_path: Path
) -> None:
    def upload(name: str, mime: str, data: bytes) -> dict[str, Any]:
        query = {"name": name, "mime_type": mime, "conversation_id": "preview"}
        answer = httpx2.post(f"{server.url}/v1/artifacts", params=query, content=data, timeout=30)
        assert answer.status_code == 201, answer.text
        return answer.json()

    long_text = "".join(f"line {i:05d} of a long log\n" for i in range(4000))  # > 64 KiB
    refs = [
        upload("notes.txt", "text/plain", long_text.encode()),
        upload("data.json", "application/json", json.dumps({"answer": 42, "items": [1, 2]}).encode()),
        upload("red.png", "image/png", _png()),
    ]
    body = {
        "event_type": "message.received",
        "conversation": {"conversation_id": "preview", "bot_id": "memo"},
        "actor": {"actor_id": "u1"},
        "input": {"text": "see the attachments", "attachments": refs},
        "agent_id": "memo",
    }
    answer = httpx2.post(f"{server.url}/v1/events", json=body, timeout=30)
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]

    asked: list[dict[str, str]] = []
    page.on(
        "request",
        lambda r: asked.append(r.headers) if r.url.endswith(f"{refs[0]['artifact_id']}/content") else None,
    )
    page.goto(f"{server.url}/console/run.html?id={run_id}")
    text = page.locator(f"#artifacts li[data-artifact-id='{refs[0]['artifact_id']}'] [data-preview='text']")
    expect(text.locator("pre")).to_contain_text("line 00000 of a long log")
    expect(text.locator(".preview-note")).to_contain_text(f"The first 65536 of {len(long_text)} bytes.")
    assert "line 03999" not in (text.locator("pre").text_content() or "")  # only the range was read
    assert asked, "the preview reads the content"
    assert asked[0].get("range") == "bytes=0-65535", asked
    data = page.locator(
        f"#artifacts li[data-artifact-id='{refs[1]['artifact_id']}'] [data-preview='text'] pre"
    )
    expect(data).to_contain_text('"answer": 42')  # pretty-printed
    image = page.locator(f"#artifacts li[data-artifact-id='{refs[2]['artifact_id']}'] img")
    expect(image).to_have_attribute("src", re.compile(r"^blob:"))
    page.wait_for_function("img => img.complete && img.naturalWidth === 2", arg=image.element_handle())
    screenshot(page, tmp_path, "run-artifacts")


def test_an_inspection_grant_is_revoked_from_its_page(server: Server, page: Page, tmp_path: Path) -> None:
    made = mcphost("grant", "--config", str(server.stderr.parent / "mcphost.toml"), "--conversation", "granted",
                   "--json", cwd=server.stderr.parent)  # fmt: skip
    assert made.returncode == 0, made.stderr
    run_id = json.loads(made.stdout)["run_id"]
    page.goto(f"{server.url}/console/run.html?id={run_id}")
    expect(page.locator("#cancel")).to_have_count(0)
    revoke = page.locator("#revoke")
    expect(revoke).to_have_text("Revoke grant")
    expect(revoke).to_be_enabled()
    page.click("#revoke")
    expect(revoke).to_be_disabled()
    expect(page.locator("#grant")).to_contain_text("Revoked.")
    assert httpx2.get(f"{server.url}/v1/runs/{run_id}", timeout=30).json()["grant"]["revoked"] is True
    screenshot(page, tmp_path, "run-revoked")


def test_an_approval_is_decided_and_its_dead_delivery_redelivered_from_their_pages(
    server: Server, receiver: Receiver, page: Page, tmp_path: Path
) -> None:
    run_id = post_event(server.url, "action:deploy-1", agent="slow", conversation="approve")
    assert wait_ended(server.url, run_id)["status"] == "completed"
    (asked,) = httpx2.get(f"{server.url}/v1/approvals", params={"run_id": run_id}, timeout=30).json()["items"]

    page.goto(f"{server.url}/console/approvals.html")
    row = page.locator(f"#approvals tr[data-approval-id='{asked['approval_id']}']")
    expect(row).to_have_attribute("data-status", "pending")
    expect(row).to_have_attribute("data-kind", "action")
    row.locator("summary").click()
    expect(row.locator("pre")).to_contain_text('"idempotency_key": "deploy-1"')
    row.locator("input.note").fill("ship it")
    screenshot(page, tmp_path, "approvals")
    row.locator("button.approve").click()
    expect(row).to_have_count(0)  # the list shows pending ones: it left
    page.select_option("#filter-status", "approved")
    decided = page.locator(f"#approvals tr[data-approval-id='{asked['approval_id']}']")
    expect(decided).to_contain_text("ship it")
    answer = httpx2.get(f"{server.url}/v1/approvals/{asked['approval_id']}", timeout=30).json()
    assert (answer["status"], answer["note"]) == ("approved", "ship it")

    # its approval.requested delivery met a receiver answering 500 for longer than max_age_s: dead
    page.goto(f"{server.url}/console/deliveries.html")
    dead = page.locator("#deliveries tr[data-status='dead']", has=page.locator(f"a[href$='{run_id}']"))
    expect(dead).to_have_count(1)
    expect(dead).to_contain_text("approval.requested")
    screenshot(page, tmp_path, "deliveries")
    delivery_id = dead.get_attribute("data-delivery-id")
    receiver.accept = True
    dead.locator("button.redeliver").click()
    expect(dead).to_have_count(0)  # no longer dead
    page.select_option("#filter-status", "delivered")
    expect(page.locator(f"#deliveries tr[data-delivery-id='{delivery_id}']")).to_have_attribute(
        "data-status", "delivered"
    )
    assert delivery_id in receiver.received


def test_the_debug_chat_streams_memos_answer(server: Server, page: Page, tmp_path: Path) -> None:
    page.goto(f"{server.url}/console/chat.html")
    page.select_option("#chat-agent", "memo")
    page.fill("#chat-conversation", "chat-1")
    page.fill("#chat-text", "remember the blue door")
    page.click("#chat-send")
    bubble = page.locator("#chat-log li.assistant").last
    expect(bubble).to_have_attribute("data-state", "completed")
    expect(bubble).to_have_attribute("data-final", "true")
    assert int(bubble.get_attribute("data-deltas") or "0") >= 2, "memo streams its answer as deltas"
    expect(bubble.locator(".text")).to_contain_text("memo has no model")
    expect(bubble.locator(".status a")).to_have_attribute("href", re.compile(r"^/console/run\.html\?id=run_"))

    page.fill("#chat-text", "what about the blue door?")
    page.click("#chat-send")
    second = page.locator("#chat-log li.assistant").nth(1)
    expect(second).to_have_attribute("data-state", "completed")
    expect(second.locator(".text")).to_contain_text("blue door")
    screenshot(page, tmp_path, "chat")


def test_the_explain_and_agents_pages(server: Server, page: Page, tmp_path: Path) -> None:
    page.goto(f"{server.url}/console/explain.html")
    event = {
        "event_type": "message.received",
        "conversation": {"conversation_id": "c9", "bot_id": "memo"},
        "actor": {"actor_id": "u1"},
    }
    page.fill("#explain-event", json.dumps(event))
    page.fill("#explain-tools", "history_page, artifacts_create")
    page.click("#explain-go")
    expect(page.locator("#explain-agent")).to_contain_text("memo")
    expect(page.locator("#explain-checks tr[data-target='tool:history_page']")).to_have_attribute(
        "data-allowed", "true"
    )
    refused = page.locator("#explain-checks tr[data-target='tool:artifacts_create']")
    expect(refused).to_have_attribute("data-allowed", "false")
    expect(refused.locator("td[data-label='Layer']")).not_to_be_empty()
    screenshot(page, tmp_path, "explain")

    page.goto(f"{server.url}/console/agents.html")
    expect(page.locator("#agents tr[data-agent='memo']")).to_contain_text("plugin:mcphost/memo/default")
    expect(page.locator("#plugins tbody tr").first).to_contain_text("running")
    screenshot(page, tmp_path, "agents")

    page.goto(f"{server.url}/console/explain.html")
    page.fill("#explain-event", "{not json")
    page.click("#explain-go")
    expect(page.locator("#explain-error [role='alert']")).to_contain_text("Event:")


def test_the_agents_page_searches_a_knowledge_base_and_shows_upstream_tools_and_bindings(
    server: Server, page: Page, tmp_path: Path
) -> None:
    config = str(server.stderr.parent / "mcphost.toml")
    ingested = mcphost("kb", "ingest", "docs", "--config", config, cwd=server.stderr.parent)
    assert ingested.returncode == 0, ingested.stderr

    page.goto(f"{server.url}/console/agents.html")
    kb = page.locator("article[data-kb='docs']")
    expect(kb).to_contain_text("Product docs")
    expect(kb).to_contain_text("ready")
    expect(kb.locator("dd").nth(3)).to_have_text("librarian")
    kb.locator("input[name='q']").fill("snapshots by date")
    kb.locator("button[type='submit']").click()
    first = kb.locator("ol.hits li.hit").first
    expect(first.locator(".snippet")).to_contain_text("pick a snapshot by date")
    expect(first.locator(".source")).to_contain_text("guide.md")
    score = first.locator(".score").inner_text()
    assert float(score) > 0, score  # a relevance, shown to three significant digits

    fake = page.locator("article[data-server='fake']")
    expect(fake.locator("[data-status]")).to_have_attribute("data-status", "ready")
    echo = fake.locator("tr[data-tool='fake__echo']")
    expect(echo).to_contain_text("Repeat the text back.")
    expect(echo.locator("td[data-label='Parameters']")).to_have_text("text: string")
    expect(echo.locator("td[data-label='Agents']")).to_have_text("librarian")
    expect(fake.locator("tr[data-tool='fake__forecast'] td[data-label='Agents']")).to_have_text("none")

    binding = page.locator("#bindings tr[data-agent='librarian']")
    expect(binding.locator("td[data-label='Event types']")).to_have_text("message.received, ticket.opened")
    expect(binding.locator("td[data-label='Sources']")).to_have_text("helpdesk")
    expect(binding.locator("td[data-label='Conversations']")).to_have_text("support, billing")
    expect(binding.locator("td[data-label='Hooks']")).to_have_text("/v1/hooks/tickets")
    expect(binding.locator("td[data-label='Other match keys']")).to_have_text("bot_id = librarian")
    expect(page.locator("#bindings tr[data-agent='memo'] td[data-label='Other match keys']")).to_have_text(
        "bot_id = memo"
    )
    screenshot(page, tmp_path, "agents-resources")


def test_a_host_with_an_api_key_asks_for_it_once_and_keeps_it_for_the_tab(
    keyed_server: Server, page: Page, tmp_path: Path
) -> None:
    assert httpx2.get(f"{keyed_server.url}/v1/runs", timeout=30).status_code == 401
    run_id = post_event(keyed_server.url, "hi", agent="memo", Authorization=f"Bearer {API_KEY}")

    page.goto(f"{keyed_server.url}/console/")
    dialog = page.locator("dialog#login")
    expect(dialog).to_be_visible()
    screenshot(page, tmp_path, "login")
    page.fill("#login-key", "wrong-key")
    page.keyboard.press("Enter")
    expect(page.locator("#login-reason")).to_contain_text("refused")
    page.fill("#login-key", API_KEY)
    page.keyboard.press("Enter")
    expect(page.locator(f"#runs tr[data-run-id='{run_id}']")).to_be_visible()

    page.goto(f"{keyed_server.url}/console/run.html?id={run_id}")  # same tab: no prompt again
    expect(page.locator("#summary [data-status]")).to_have_attribute("data-status", "completed")
    expect(page.locator("dialog#login")).to_have_count(0)


def test_the_console_fits_a_phone(server: Server, browser: Browser, tmp_path: Path) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    context.set_default_timeout(UI_TIMEOUT_MS)
    phone = context.new_page()
    try:
        run_id = post_event(server.url, "hello from a phone", agent="memo", conversation="phone")
        assert wait_ended(server.url, run_id)["status"] == "completed"
        for name, path, ready in [
            ("phone-runs", "/console/", f"#runs tr[data-run-id='{run_id}']"),
            ("phone-run", f"/console/run.html?id={run_id}", "#audit tbody tr"),
            ("phone-chat", "/console/chat.html", "#chat-agent option[value='memo']"),
            ("phone-agents", "/console/agents.html", "article[data-server='fake'] [data-status='ready']"),
            ("phone-usage", "/console/usage.html", "#usage-model tbody tr"),
        ]:
            phone.goto(server.url + path)
            expect(phone.locator(ready).first).to_be_attached()
            overflow = phone.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{path} scrolls sideways by {overflow}px on a 390px screen"
            screenshot(phone, tmp_path, name)
        # table rows become labelled cards: the header row is hidden, each cell carries its label
        expect(phone.locator("#audit thead")).to_be_hidden()
    finally:
        context.close()


def test_console_files_carry_their_security_headers_and_foreign_hosts_are_refused(server: Server) -> None:
    answer = httpx2.get(f"{server.url}/console/runs.js", timeout=30)
    assert answer.status_code == 200
    assert "javascript" in answer.headers["content-type"]
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert httpx2.get(f"{server.url}/console/nope.js", timeout=30).status_code == 404
    rebinding = httpx2.get(f"{server.url}/console/", headers={"Host": "evil.example"}, timeout=30)
    assert rebinding.status_code == 421
    assert "DNS-rebinding" in rebinding.json()["error"]["message"]

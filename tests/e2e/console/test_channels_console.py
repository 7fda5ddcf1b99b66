"""The Channels page and a run's platform origin in a real browser: Playwright driving Debian's chromium
against an `mcphost serve` subprocess with a Telegram and a Slack channel, whose Web APIs are a fake on
127.0.0.1 (Telegram's sends succeed, Slack's always answer 503, so its reply ends dead). Requests are
signed as the platforms sign them and sent over HTTP like theirs; the page must show what
`GET /v1/channels` says, without a word broken mid-word at 1280 px."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.console.test_console import (  # the browser fixtures: pytest finds them by name here
    _serve,  # pyright: ignore[reportPrivateUsage]
    browser,  # noqa: F401  # pyright: ignore[reportUnusedImport]
    page,  # noqa: F401  # pyright: ignore[reportUnusedImport]
    screenshot,
    wait_ended,
    words_broken_in_tables,
)
from tests.mcphost.test_serve import Server

pytestmark = pytest.mark.slow

SLACK_SECRET = "console-slack-signing-secret-0123"
TG_SECRET = "console-telegram-secret-0123"
TG_TOKEN = "777000:console-telegram-token"
ENV = {
    "CH_SLACK_SECRET": SLACK_SECRET,
    "CH_SLACK_TOKEN": "xoxb-console-slack-token",
    "CH_TG_SECRET": TG_SECRET,
    "CH_TG_TOKEN": TG_TOKEN,
}


class PlatformAPI:
    """Telegram's Bot API (`/tg/bot<token>/<method>`: every call succeeds) and Slack's Web API
    (`/slack/<method>`: every call answers 503) on one 127.0.0.1 port."""

    def __init__(self) -> None:
        api = self
        self.calls: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                api.calls.append(self.path)
                ok = self.path.startswith("/tg/")
                body = json.dumps({"ok": True, "result": {"message_id": 900 + len(api.calls)}} if ok
                                  else {"ok": False, "error": "service_unavailable"}).encode()  # fmt: skip
                self.send_response(200 if ok else 503)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def platforms() -> Iterator[PlatformAPI]:
    opened = PlatformAPI()
    yield opened
    opened.server.shutdown()
    opened.server.server_close()


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory: pytest.TempPathFactory, platforms: PlatformAPI) -> Iterator[Server]:
    extra = (
        f'[channels.telegram-support]\nplatform = "telegram"\nsecret_env = "CH_TG_SECRET"\n'
        f'token_env = "CH_TG_TOKEN"\napi_base = "{platforms.url}/tg"\n'
        f'[channels.slack-ops]\nplatform = "slack"\nsecret_env = "CH_SLACK_SECRET"\n'
        f'token_env = "CH_SLACK_TOKEN"\napi_base = "{platforms.url}/slack"\nmax_age_s = 1\n'
        '[[agents]]\nid = "chat"\nrunner = "plugin:mcphost/memo/default"\nevent_types = ["message.received"]\n'
        'match = { bot_id = ["telegram-support", "slack-ops"] }\n'
    )
    yield from _serve(tmp_path_factory.mktemp("console-channels"), extra, **ENV)


def telegram(url: str, update_id: int, text: str, *, sender: int = 7) -> httpx2.Response:
    body = {"update_id": update_id, "message": {
        "message_id": 55, "date": 1700000000, "text": text, "message_thread_id": 12, "is_topic_message": True,
        "chat": {"id": -1001, "type": "supergroup"},
        "from": {"id": sender, "is_bot": sender == 777000, "first_name": "Ada", "username": "ada"}}}  # fmt: skip
    headers = {"x-telegram-bot-api-secret-token": TG_SECRET, "content-type": "application/json"}
    return httpx2.post(
        f"{url}/v1/channels/telegram-support", content=json.dumps(body), headers=headers, timeout=30
    )


def slack(url: str, text: str) -> httpx2.Response:
    body = json.dumps({"type": "event_callback", "team_id": "T1", "event_id": "Ev77", "event_time": 1700000000,
                       "event": {"type": "app_mention", "channel": "C77", "user": "U1", "text": text,
                                 "ts": "1700000077.000100", "channel_type": "channel"}}).encode()  # fmt: skip
    stamp = str(int(time.time()))
    signature = (
        "v0=" + hmac.new(SLACK_SECRET.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    )
    headers = {
        "x-slack-request-timestamp": stamp,
        "x-slack-signature": signature,
        "content-type": "application/json",
    }
    return httpx2.post(f"{url}/v1/channels/slack-ops", content=body, headers=headers, timeout=30)


def channels_when(url: str, ready: Callable[[dict[str, dict[str, Any]]], bool]) -> dict[str, dict[str, Any]]:
    """`GET /v1/channels` by id once `ready(channels)` holds (the sender settles replies on its own)."""
    deadline = time.monotonic() + 60
    while True:
        listed = {c["channel_id"]: c for c in httpx2.get(f"{url}/v1/channels", timeout=30).json()["channels"]}
        if ready(listed):
            return listed
        assert time.monotonic() < deadline, listed
        time.sleep(0.1)


def test_the_channels_page_shows_what_the_api_says_and_the_run_page_shows_the_platform_origin(
    chat_server: Server,
    page: Page,  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    url = chat_server.url
    admitted = telegram(url, 5001, "where is my order?")
    assert admitted.status_code == 200, admitted.text
    tg_run = admitted.headers["x-mcphost-run-id"]
    own = telegram(url, 5002, "the bot's own reply", sender=777000)
    assert own.headers["x-mcphost-ignored"] == "unsupported_event"
    mentioned = slack(url, "<@B1> deploy status?")
    assert mentioned.status_code == 200, mentioned.text
    slack_run = mentioned.headers["x-mcphost-run-id"]
    wait_ended(url, tg_run)
    wait_ended(url, slack_run)
    api = channels_when(
        url,
        lambda c: (
            c["slack-ops"]["dead"] == 1
            and c["telegram-support"]["pending"] == 0
            and c["telegram-support"]["last_delivery"] is not None
        ),
    )

    page.goto(f"{url}/console/channels.html")
    for channel_id, figures in api.items():
        row = page.locator(f"#channels tr[data-channel='{channel_id}']")
        expect(row.locator("td[data-label='Admitted / ignored']")).to_have_text(
            f"{figures['accepted']} / {figures['ignored']}"
        )
        expect(row.locator("td[data-label='Pending']")).to_have_text(str(figures["pending"]))
        expect(row.locator("td[data-label='Dead']")).to_have_text(str(figures["dead"]))
        expect(row.locator("td[data-label='Agents']")).to_have_text(", ".join(figures["agents"]))
        expect(row.locator("td[data-label='Last inbound'] a")).to_have_text(figures["last_run_id"])
        expect(row.locator("td[data-label='Last delivery'] [data-status]")).to_have_text(
            figures["last_delivery"]["status"]
        )
    tg, ops = api["telegram-support"], api["slack-ops"]
    assert (tg["accepted"], tg["ignored"], tg["last_run_id"], tg["last_delivery"]["status"]) == (
        1, 1, tg_run, "delivered",
    )  # fmt: skip
    assert (ops["accepted"], ops["dead"], ops["last_error"]["run_id"]) == (1, 1, slack_run)
    tg_row = page.locator("#channels tr[data-channel='telegram-support']")
    expect(tg_row.locator("td[data-label='Last ignored']")).to_contain_text("unsupported_event")
    expect(tg_row.locator("td[data-label='Last error']")).to_have_text("none")
    error = page.locator("#channels tr[data-channel='slack-ops'] td[data-label='Last error'] .last-error")
    text = ops["last_error"]["last_error"]
    expect(error).to_have_text(text if len(text) <= 300 else text[:299] + "…")  # api.js `short`
    expect(page.locator("nav a[aria-current='page']")).to_have_text("Channels")
    page.wait_for_load_state("networkidle")
    assert words_broken_in_tables(page) == []
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(page, tmp_path, "channels")

    page.goto(f"{url}/console/run.html?id={tg_run}")
    origin = page.locator("#origin")
    expect(origin).to_be_visible()
    expect(origin.locator("dd[data-origin='platform']")).to_have_text("telegram")
    expect(origin.locator("dd[data-origin='channel']")).to_have_text("telegram-support")
    expect(origin.locator("dd[data-origin='chat']")).to_have_text("-1001")
    expect(origin.locator("dd[data-origin='thread']")).to_have_text("12")
    records = httpx2.get(f"{url}/v1/runs/{tg_run}/records", timeout=30).json()
    (inbound,) = [e for e in records["events"] if e["kind"] == "inbound"]
    expect(origin.locator("dd[data-origin='platform-event']")).to_have_text(
        inbound["payload"]["source_event_type"]
    )
    expect(origin.locator("dd[data-origin='channel'] a")).to_have_attribute(
        "href", "/console/channels.html#channel-telegram-support"
    )
    screenshot(page, tmp_path, "run-origin")
    origin.locator("dd[data-origin='channel'] a").click()
    expect(page.locator("#channel-telegram-support")).to_be_in_viewport()

"""`mcphost channels` and `mcphost channels register`: a Telegram bot's webhook set through a fake Bot
API on 127.0.0.1, and the URL and settings printed for Slack and Discord."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes._serve import serve_loopback
from tests.fakes.chat_apis import FakeTelegram
from tests.mcphost.test_cli import in_process

TOKEN = "777:register-token"


def write_config(tmp_path: Path, telegram_url: str) -> Path:
    config = tmp_path / "mcphost.toml"
    config.write_text(
        f"""
[host]
data_dir = "{(tmp_path / "data").as_posix()}"
public_url = "https://bot.example.com"

[channels.tg]
platform = "telegram"
secret_env = "TG_SECRET"
token_env = "TG_TOKEN"
api_base = "{telegram_url}"

[channels.sl]
platform = "slack"
secret_env = "SLACK_SIGNING_SECRET"
token_env = "SLACK_BOT_TOKEN"
""",
        encoding="utf-8",
    )
    return config


async def test_register_sets_the_telegram_webhook_and_prints_slacks_settings(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TG_SECRET", "the-secret-token")
    monkeypatch.setenv("TG_TOKEN", TOKEN)
    telegram = FakeTelegram(TOKEN)
    async with serve_loopback(telegram.app) as url:
        cli = in_process(write_config(tmp_path, url), capfd)
        registered = await cli("channels", "register", "tg")
        assert registered.returncode == 0, registered.stderr
        assert "webhook set: Webhook was set" in registered.stdout
        assert telegram.webhooks == [
            {
                "url": "https://bot.example.com/v1/channels/tg",
                "secret_token": "the-secret-token",
                "allowed_updates": ["message", "edited_message", "callback_query", "message_reaction",
                                    "chat_member", "deleted_business_messages"],
            }
        ]  # fmt: skip
        slack = await cli("channels", "register", "sl", "--url", "https://x.example.com/v1/channels/sl")
        assert slack.returncode == 0, slack.stderr
        assert "Request URL https://x.example.com/v1/channels/sl" in slack.stdout
        assert "$SLACK_SIGNING_SECRET" in slack.stdout
        listed = await cli("channels", "--json")
        assert json.loads(listed.stdout)["channels"] == [
            {
                "channel": "tg",
                "platform": "telegram",
                "url": "https://bot.example.com/v1/channels/tg",
                "agent": None,
            },
            {
                "channel": "sl",
                "platform": "slack",
                "url": "https://bot.example.com/v1/channels/sl",
                "agent": None,
            },
        ]
        unknown = await cli("channels", "register", "nope")
        assert unknown.returncode == 1
        assert "configured: sl, tg" in unknown.stderr
        monkeypatch.setenv("TG_TOKEN", "777:another-token")
        refused = await cli("channels", "register", "tg")
        assert refused.returncode == 1
        assert "Telegram setWebhook for channel 'tg' failed: HTTP 401 Unauthorized" in refused.stderr
        assert "another-token" not in refused.stderr
    assert len(telegram.webhooks) == 1

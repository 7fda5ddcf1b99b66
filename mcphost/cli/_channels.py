"""`mcphost channels` and `mcphost channels register ID`: the chat bots of `[channels.<id>]`, and
pointing a platform at the host.

Owns what each platform is told: Telegram's webhook is set through its Bot API (`setWebhook` with the
channel's secret token, at the channel's `api_base`); Slack and Discord have no API for it, so the URL
and the exact settings to paste are printed. Reads the channel's credentials from the environment, as
the host does; never prints them.
"""

from __future__ import annotations

import argparse
import os

import httpx2

from mcphost.channels import ChannelSendError, TelegramAdapter, adapter
from mcphost.cli._common import EXIT_OK, dump, fail
from mcphost.config import ChannelConfig, Settings

SLACK_EVENTS = ("message.channels", "message.groups", "message.im", "app_mention", "reaction_added",
                "reaction_removed", "member_joined_channel", "member_left_channel")  # fmt: skip
SLACK_SCOPES = ("chat:write", "app_mentions:read", "channels:history", "groups:history", "im:history",
                "reactions:read", "reactions:write", "commands")  # fmt: skip


def _url(settings: Settings, channel_id: str, override: str | None) -> str:
    return override or f"{settings.public_url.rstrip('/')}/v1/channels/{channel_id}"


def _steps(channel_id: str, config: ChannelConfig, url: str) -> list[str]:
    match config.platform:
        case "slack":
            return [
                f"Basic Information: put the Signing Secret in ${config.secret_env}.",
                f"OAuth & Permissions: bot token scopes {', '.join(SLACK_SCOPES)}; install the app and put "
                f"the Bot User OAuth Token (xoxb-...) in ${config.token_env}.",
                f"Event Subscriptions: enable, Request URL {url} (the host answers Slack's challenge), "
                f"subscribe to bot events {', '.join(SLACK_EVENTS)}.",
                f"Interactivity & Shortcuts and each Slash Command: Request URL {url}.",
            ]
        case "discord":
            return [
                f"General Information: put the Public Key in ${config.secret_env}; Bot: put the token in "
                f"${config.token_env}.",
                f"General Information: Interactions Endpoint URL {url} (the host answers Discord's PING).",
                "Register slash commands (PUT /applications/<app id>/commands) and install the app with the "
                "applications.commands and bot scopes.",
            ]
        case "telegram":
            return [
                f"mcphost channels register {channel_id} sets the webhook to {url} with ${config.secret_env}."
            ]


async def cmd_channels(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "list":
        rows = [
            {"channel": cid, "platform": c.platform, "url": _url(settings, cid, None), "agent": c.agent}
            for cid, c in settings.channels.items()
        ]
        if args.json:
            dump({"channels": rows})
        for row in rows if not args.json else []:
            print(
                f"{row['channel']}  {row['platform']:<8}  {row['url']}  agent={row['agent'] or '(bindings)'}"
            )
        if not rows and not args.json:
            print("no channels: add a [channels.<id>] table to mcphost.toml")
        return EXIT_OK
    channel_id = args.channel_id
    config = settings.channels.get(channel_id or "")
    if config is None:
        known = ", ".join(sorted(settings.channels)) or "none"
        return fail(f"mcphost channels register needs a configured channel id; configured: {known}.")
    url = _url(settings, channel_id, args.url)
    if not url.startswith("https://") and config.platform != "telegram":
        print(f"note: {config.platform} calls only https:// URLs; {url} is not one", flush=True)
    answer: dict[str, object] = {"channel": channel_id, "platform": config.platform, "url": url,
                                 "steps": _steps(channel_id, config, url)}  # fmt: skip
    if config.platform == "telegram":
        bot = adapter(channel_id, config, os.environ)
        assert isinstance(bot, TelegramAdapter)
        try:
            async with httpx2.AsyncClient(timeout=config.timeout_s, follow_redirects=False) as http:
                result = await bot.set_webhook(http, url)
        except ChannelSendError as exc:
            return fail(f"Telegram setWebhook for channel {channel_id!r} failed: {exc}")
        answer["registered"] = True
        answer["telegram"] = result.get("description")
    if args.json:
        dump(answer)
        return EXIT_OK
    print(f"{channel_id} ({config.platform}): {url}")
    if answer.get("registered"):
        print(f"webhook set: {answer.get('telegram') or 'ok'}")
    else:
        for number, step in enumerate(_steps(channel_id, config, url), 1):
            print(f"{number}. {step}")
    return EXIT_OK

"""Chat channels: Slack, Telegram and Discord bots on one adapter interface.

Owns which adapter serves which `[channels.<id>]` table (`adapters`, reading each channel's credentials
from the environment), and the one place a normalized `ChannelEvent` becomes an `AgentEventEnvelope`
(`envelope`): its namespaced event id, conversation, actor and reply target. Does not own the HTTP
route (`api/_channels.py`), the outbox and retries (`delivery.py`), nor any one platform (`slack.py`,
`telegram.py`, `discord.py`, each following `_adapter.ChannelAdapter`).

Invariants:
- An event's id is `channel:<channel id>:<adapter key>` (`ingress.channel_event_id`), so a platform's
  retry is the same event and no other ingress can name it.
- Ids are stable: `conversation_id` is `<channel id>:<platform chat>` (a Slack channel, a Telegram
  chat, a Discord channel; a thread's parent), `thread_id` the platform's thread (Slack `thread_ts`, a
  Telegram forum topic, a Discord thread), `actor_id` `<platform>:<user id>`, `bot_id` the channel id
  and `workspace_id` the Slack team or Discord guild.
- A channel whose credential variables are unset makes the host refuse to start (`ConfigError`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import ValidationError

from mcphost.channels._adapter import (
    MAX_ATTACHMENTS,
    Attachment,
    ChannelAdapter,
    ChannelEvent,
    ChannelSendError,
    Target,
    Verdict,
)
from mcphost.channels._files import channel_files
from mcphost.channels._text import split_text
from mcphost.channels.discord import DiscordAdapter
from mcphost.channels.slack import SlackAdapter
from mcphost.channels.telegram import TelegramAdapter
from mcphost.common.validation import problems
from mcphost.config import ChannelConfig
from mcphost.errors import ConfigError, InvalidArgumentError
from mcphost.ingress import channel_event_id
from mcphost.models import ID_PATTERN, AgentEventEnvelope
from mcphost.protocol import JSONObject

__all__ = [
    "MAX_ATTACHMENTS",
    "Attachment",
    "ChannelAdapter",
    "ChannelEvent",
    "ChannelSendError",
    "DiscordAdapter",
    "SlackAdapter",
    "Target",
    "TelegramAdapter",
    "Verdict",
    "adapter",
    "adapters",
    "channel_files",
    "envelope",
    "split_text",
]


def adapter(channel_id: str, config: ChannelConfig, environ: Mapping[str, str]) -> ChannelAdapter:
    """The adapter of one channel, its credentials read from `environ`.

    Raises:
        ConfigError: a credential variable is unset or empty, or holds no usable value.
    """
    missing = [name for name in (config.secret_env, config.token_env) if not environ.get(name, "").strip()]
    if missing:
        raise ConfigError(
            f"channels.{channel_id}: the environment variable(s) {', '.join(missing)} are not set; they hold "
            f"the {config.platform} channel's credentials. Set them, or remove [channels.{channel_id}].",
            details={"channel": channel_id, "missing": missing},
        )
    secret, token = environ[config.secret_env].strip(), environ[config.token_env].strip()
    match config.platform:
        case "slack":
            return SlackAdapter(channel_id, config, secret=secret, token=token)
        case "telegram":
            return TelegramAdapter(channel_id, config, secret=secret, token=token)
        case "discord":
            return DiscordAdapter(channel_id, config, secret=secret, token=token)


def adapters(channels: Mapping[str, ChannelConfig], environ: Mapping[str, str]) -> dict[str, ChannelAdapter]:
    """Every configured channel's adapter (see `adapter`)."""
    return {channel_id: adapter(channel_id, config, environ) for channel_id, config in channels.items()}


def _id(value: str | None) -> str | None:
    return value if value is not None and re.fullmatch(ID_PATTERN, value) else None


def envelope(source: ChannelAdapter, event: ChannelEvent) -> AgentEventEnvelope:
    """The event a normalized platform event becomes (without `raw_ref`: the caller stores the raw
    payload).

    Raises:
        InvalidArgumentError: platform ids or text the envelope cannot hold (too long, unusable).
    """
    channel_id = source.channel_id
    data: JSONObject = {"channel": channel_id, "platform": source.platform, "chat": event.chat, **event.data}
    if event.attachments:
        data["attachments"] = [dict(a.meta) for a in event.attachments]
    conversation: JSONObject = {"conversation_id": f"{channel_id}:{event.chat}", "bot_id": channel_id}
    if (thread := _id(event.thread)) is not None:
        conversation["thread_id"] = thread
    if (workspace := _id(event.workspace)) is not None:
        conversation["workspace_id"] = workspace
    fields: JSONObject = {
        "event_id": channel_event_id(channel_id, event.key),
        "event_type": event.event_type,
        "source": "platform",
        "source_event_type": event.source_event_type,
        "conversation": conversation,
        "input": {"text": event.text},
        "data": data,
        "agent_id": source.config.agent,
        "delivery": {
            "surface": source.platform,
            "reply_target": event.target.dumps(),
            "supports_streaming": source.config.stream_interval_s > 0,
            "supports_edit": True,
            "max_message_size": source.max_chars,
        },
    }
    if event.actor is not None:
        actor: JSONObject = {"actor_id": f"{source.platform}:{event.actor}"}
        if event.actor_name is not None:
            actor["actor_name"] = event.actor_name[:200]
        fields["actor"] = actor
    try:
        return AgentEventEnvelope.model_validate(fields)
    except ValidationError as exc:
        first = problems(exc, root="(event)")[0]
        raise InvalidArgumentError(
            f"Request to channel {channel_id!r}: the {event.source_event_type!r} event is not a valid event: "
            f"{first}.",
            details={"reason": "unmappable", "field": first.where},
        ) from None

"""`GET /v1/channels`: each configured chat channel with what it last received and how its replies go.

Owns the answer's models (`ChannelsView`) and which agents a channel's events can reach (`bound_agents`,
read from the config as `bindings` would match them). Does not own the figures (`stores/channels.py`
reads the status rows and the outbox) nor the inbound route (`_channels.py`).

Invariants:
- The answer names no credential: a channel's environment variable names and API base are config, its
  secrets never leave the adapter.
- The figures come from the database, so every replica answers the same; a channel that has had no
  traffic is listed with zero counts and no newest event.
"""

from __future__ import annotations

from pydantic import ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import parse_query
from mcphost.api._models import QueryModel
from mcphost.api._state import api_state
from mcphost.common.fielddocs import DocumentedModel
from mcphost.common.timestamps import json_with_iso
from mcphost.config import ChannelConfig, ChannelPlatform
from mcphost.models import AgentConfig
from mcphost.stores import ChannelActivity

CHAT_EVENT_FAMILIES = ("message.", "reaction.", "group.", "command.", "interaction.")
"""The normalized event types a channel produces start so (`mcphost.channels`)."""


class ChannelView(ChannelActivity):
    """One `[channels.<id>]`: its platform and agents, and its activity from the database."""

    channel_id: str
    platform: ChannelPlatform
    events: list[str] | None
    """The event types it admits (`events` in its table); None: every type it maps."""
    agents: list[str]
    """The agents its events can reach: the one its table names, else those whose `event_types` take a
    chat event and whose `match.bot_id`, if any, names this channel."""


class ChannelsView(DocumentedModel):
    """Every configured chat channel."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    channels: list[ChannelView]
    """By channel id."""


def _takes(agent: AgentConfig, channel_id: str, config: ChannelConfig) -> bool:
    bot = agent.match.get("bot_id")
    if bot is not None and channel_id not in ([bot] if isinstance(bot, str) else bot):
        return False
    types = set(agent.event_types)
    if "*" in types:
        return True
    if config.events is not None:
        return bool(types & set(config.events))
    return any(t.startswith(CHAT_EVENT_FAMILIES) for t in types)


def bound_agents(channel_id: str, config: ChannelConfig, agents: list[AgentConfig]) -> list[str]:
    """The agents `channel_id`'s events can reach (see `ChannelView.agents`)."""
    if config.agent is not None:
        return [config.agent]
    return [a.id for a in agents if _takes(a, channel_id, config)]


async def list_channels(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    ids = sorted(state.channels)
    activity = await state.stores.channels.activity(ids)
    agents = state.bindings.agents
    answer = ChannelsView(
        channels=[
            ChannelView(
                channel_id=channel_id,
                platform=state.channels[channel_id].config.platform,
                events=state.channels[channel_id].config.events,
                agents=bound_agents(channel_id, state.channels[channel_id].config, agents),
                **activity[channel_id].model_dump(),
            )
            for channel_id in ids
        ]
    )
    return JSONResponse(json_with_iso(answer))

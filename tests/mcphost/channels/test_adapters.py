"""The adapters without a host: splitting and escaping for each platform's limit and markup, and the
mapping of each platform's payloads to events (and of the ones no event is made of to None)."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from mcphost.channels import (
    ChannelSendError,
    DiscordAdapter,
    SlackAdapter,
    TelegramAdapter,
    Verdict,
    split_text,
)
from mcphost.channels._adapter import Target
from mcphost.channels.discord_gateway import dispatch_event
from mcphost.config import ChannelConfig
from mcphost.errors import InvalidArgumentError, UnauthorizedError
from tests.fakes.chat_apis import telegram_visible

SECRET = "slack-signing-secret-0123456789abcdef"


def config(platform: str) -> ChannelConfig:
    return ChannelConfig.model_validate({"platform": platform, "secret_env": "S", "token_env": "T"})


SLACK = SlackAdapter("sl", config("slack"), secret=SECRET, token="xoxb-1")
TELEGRAM = TelegramAdapter("tg", config("telegram"), secret="tg-secret", token="42:abc")
KEY = Ed25519PrivateKey.generate()
DISCORD = DiscordAdapter(
    "dc",
    config("discord"),
    secret=KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex(),
    token="t",
)


def fences_balanced(part: str) -> bool:
    return sum(1 for line in part.split("\n") if line.lstrip().startswith("```")) % 2 == 0


@pytest.mark.parametrize("limit", [60, 200, 2000])
def test_split_parts_fit_the_limit_keep_code_blocks_whole_and_lose_no_line(limit: int) -> None:
    code = "\n".join(f"    value_{i} = compute({i}) + {'y' * (i % 50)}" for i in range(120))
    text = f"Intro line.\n\n```python\n{code}\n```\n\nAnd a tail {'z ' * 300}"
    parts = split_text(text, limit)
    assert len(parts) > 1
    assert all(len(p) <= limit for p in parts)
    assert all(fences_balanced(p) for p in parts)
    reopened = [p for p in parts[1:] if p.startswith("```python")]
    assert reopened, "a cut code block is reopened with its language"
    kept = [line for p in parts for line in p.split("\n") if line.strip() and not line.startswith("```")]
    original = [line for line in text.split("\n") if line.strip() and not line.startswith("```")]
    assert "".join(kept).replace(" ", "") == "".join(original).replace(" ", "")


def test_split_gives_nothing_for_blank_text_and_one_part_for_short_text() -> None:
    assert split_text("  \n \n", 100) == []
    assert split_text("short", 100) == ["short"]


def test_slack_parts_fit_its_limit_after_escaping() -> None:
    text = "a & b < c > d " * 1000
    parts = SLACK.split(text)
    assert len(parts) > 3
    assert all(len(SLACK.escape(p)) <= SLACK.max_chars for p in parts)
    assert SLACK.escape("<!channel> & <@U1>") == "&lt;!channel&gt; &amp; &lt;@U1&gt;"


@pytest.mark.parametrize(
    "text",
    [
        "<b>unclosed",
        "a && b </i>",
        "```js\nif (a < b && c > d) {}\n```",
        "`<tag>` and <pre>",
        "&amp; literal",
        "``` ``` ```",
    ],
)
def test_telegram_html_parses_and_shows_the_text_as_written(text: str) -> None:
    html = TELEGRAM.escape(text)
    visible, error = telegram_visible(html)
    assert error is None, html
    assert visible.replace("`", "") == text.replace("`", "").replace("js\n", "", 1)


def test_telegram_code_fences_become_pre_with_their_language() -> None:
    assert TELEGRAM.escape("see:\n```py\nx = 1 < 2\n```") == (
        'see:\n<pre><code class="language-py">x = 1 &lt; 2\n</code></pre>'
    )


def slack_verdict(payload: dict[str, object] | str, content_type: str = "application/json") -> Verdict:
    body = (json.dumps(payload) if isinstance(payload, dict) else payload).encode()
    stamp = str(int(time.time()))
    signature = "v0=" + hmac.new(SECRET.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    headers = {
        "x-slack-request-timestamp": stamp,
        "x-slack-signature": signature,
        "content-type": content_type,
    }
    return SLACK.verify(headers, body, now=time.time())


def slack_event(event: dict[str, object], event_id: str = "Ev1") -> Verdict:
    return slack_verdict({"type": "event_callback", "team_id": "T1", "event_id": event_id, "event": event})


def test_slack_edits_deletions_reactions_and_members_map_to_their_events() -> None:
    edited = SLACK.normalize(slack_event({"type": "message", "subtype": "message_changed", "channel": "C1",
                                          "message": {"ts": "1.2", "user": "U1", "text": "new"}}))  # fmt: skip
    assert edited is not None
    assert (edited.event_type, edited.text, edited.data["message_id"]) == ("message.edited", "new", "1.2")
    deleted = SLACK.normalize(slack_event({"type": "message", "subtype": "message_deleted", "channel": "C1",
                                           "deleted_ts": "1.2", "previous_message": {"user": "U1"}}))  # fmt: skip
    assert deleted is not None
    assert deleted.event_type == "message.recalled"
    reaction = SLACK.normalize(slack_event({"type": "reaction_added", "user": "U2", "reaction": "thumbsup",
                                            "item": {"type": "message", "channel": "C1", "ts": "1.2"}}))  # fmt: skip
    assert reaction is not None
    assert (reaction.event_type, reaction.data["reaction"], reaction.target) == (
        "reaction.added", "thumbsup", Target("C1", message="1.2"))  # fmt: skip
    joined = SLACK.normalize(slack_event({"type": "member_joined_channel", "user": "U3", "channel": "C1"}))
    left = SLACK.normalize(slack_event({"type": "member_left_channel", "user": "U3", "channel": "C1"}))
    assert joined is not None
    assert left is not None
    assert (joined.event_type, left.event_type) == ("group.member_joined", "group.member_left")
    assert SLACK.normalize(slack_event({"type": "emoji_changed", "subtype": "add"})) is None
    assert (
        SLACK.normalize(
            slack_event({"type": "message", "subtype": "channel_topic", "channel": "C1", "ts": "1"})
        )
        is None
    )


def test_a_slack_slash_command_and_a_button_press_are_verified_form_bodies() -> None:
    form = urlencode({"command": "/ask", "text": "why?", "user_id": "U1", "channel_id": "C1", "team_id": "T1",
                      "trigger_id": "13345224609.738474920.8088930838d88f008e0"})  # fmt: skip
    command = SLACK.normalize(slack_verdict(form, "application/x-www-form-urlencoded"))
    assert command is not None
    assert (command.event_type, command.text, command.data["command"]) == ("command.invoked", "why?", "/ask")
    action = {"type": "block_actions", "trigger_id": "tr1", "user": {"id": "U1"}, "team": {"id": "T1"},
              "channel": {"id": "C1"}, "message": {"ts": "9.9"},
              "actions": [{"action_id": "approve", "value": "yes", "block_id": "b"}]}  # fmt: skip
    pressed = SLACK.normalize(
        slack_verdict(urlencode({"payload": json.dumps(action)}), "application/x-www-form-urlencoded")
    )
    assert pressed is not None
    assert (pressed.event_type, pressed.data["action_id"], pressed.key) == (
        "interaction.submitted",
        "approve",
        "act:tr1",
    )


def test_a_slack_body_that_is_not_json_is_refused_after_its_signature() -> None:
    with pytest.raises(InvalidArgumentError):
        slack_verdict('{"type": NaN}')


def tg(update: dict[str, object]) -> Verdict:
    return TELEGRAM.verify(
        {"x-telegram-bot-api-secret-token": "tg-secret"}, json.dumps(update).encode(), now=0
    )


def test_telegram_updates_map_to_their_events() -> None:
    chat = {"id": 5, "type": "group"}
    user = {"id": 9, "is_bot": False, "first_name": "A"}
    edited = TELEGRAM.normalize(
        tg({"update_id": 1, "edited_message": {"message_id": 3, "chat": chat, "from": user, "text": "fixed"}})
    )
    assert edited is not None
    assert (edited.event_type, edited.source_event_type, edited.key) == (
        "message.edited",
        "edited_message",
        "update:1",
    )
    joined = TELEGRAM.normalize(tg({"update_id": 2, "message": {"message_id": 4, "chat": chat, "from": user,
                                                                "new_chat_members": [{"id": 11, "is_bot": False}]}}))  # fmt: skip
    assert joined is not None
    assert (joined.event_type, joined.data["members"]) == ("group.member_joined", ["11"])
    query = TELEGRAM.normalize(tg({"update_id": 3, "callback_query": {"id": "cq1", "from": user, "data": "yes",
                                                                      "message": {"message_id": 8, "chat": chat}}}))  # fmt: skip
    assert query is not None
    assert query.event_type == "interaction.submitted"
    assert TELEGRAM.acknowledge(query) == {"method": "answerCallbackQuery", "callback_query_id": "cq1"}
    reaction = TELEGRAM.normalize(tg({"update_id": 4, "message_reaction": {"chat": chat, "message_id": 8, "user": user,
        "date": 1, "old_reaction": [], "new_reaction": [{"type": "emoji", "emoji": "👍"}]}}))  # fmt: skip
    assert reaction is not None
    assert (reaction.event_type, reaction.data["reaction"]) == ("reaction.added", "👍")
    command = TELEGRAM.normalize(tg({"update_id": 5, "message": {"message_id": 9, "chat": chat, "from": user,
                                                                 "text": "/start@my_bot now"}}))  # fmt: skip
    assert command is not None
    assert (command.event_type, command.data["command"], command.data["args"]) == (
        "command.invoked",
        "/start",
        "now",
    )
    photo = TELEGRAM.normalize(tg({"update_id": 6, "message": {"message_id": 10, "chat": chat, "from": user,
        "photo": [{"file_id": "small", "file_unique_id": "s", "file_size": 10},
                  {"file_id": "big", "file_unique_id": "b", "file_size": 999}]}}))  # fmt: skip
    assert photo is not None
    (file,) = photo.attachments
    assert (file.locator, file.size, file.mime_type) == ({"file_id": "big"}, 999, "image/jpeg")
    assert file.meta == {"kind": "photo", "file_id": "big", "file_unique_id": "b", "file_size": 999}
    assert TELEGRAM.normalize(tg({"update_id": 7, "poll": {"id": "p"}})) is None
    assert TELEGRAM.normalize(tg({"update_id": "7"})) is None


def test_a_telegram_request_with_another_secret_is_refused() -> None:
    with pytest.raises(UnauthorizedError):
        TELEGRAM.verify({"x-telegram-bot-api-secret-token": "tg-secreT"}, b"{}", now=0)


def test_a_discord_button_maps_to_an_interaction_in_its_thread() -> None:
    payload = {"id": "i9", "application_id": "a1", "type": 3, "token": "tk", "guild_id": "G",
               "channel_id": "TH", "channel": {"id": "TH", "type": 11, "parent_id": "CH"},
               "user": {"id": "U", "username": "u"}, "message": {"id": "M1"},
               "data": {"custom_id": "approve", "component_type": 2}}  # fmt: skip
    body = json.dumps(payload).encode()
    stamp = str(int(time.time()))
    headers = {"x-signature-ed25519": KEY.sign(stamp.encode() + body).hex(), "x-signature-timestamp": stamp}
    event = DISCORD.normalize(DISCORD.verify(headers, body, now=time.time()))
    assert event is not None
    assert (event.event_type, event.chat, event.thread, event.data["custom_id"]) == (
        "interaction.submitted", "CH", "TH", "approve")  # fmt: skip
    assert event.target == Target("TH", interaction="a1/tk")
    autocomplete = json.dumps(payload | {"type": 4}).encode()
    headers = {
        "x-signature-ed25519": KEY.sign(stamp.encode() + autocomplete).hex(),
        "x-signature-timestamp": stamp,
    }
    assert DISCORD.normalize(DISCORD.verify(headers, autocomplete, now=time.time())) is None


async def test_a_discord_attachment_is_fetched_from_its_cdn_without_the_token_and_nothing_else_is() -> None:
    data = {"id": "M1", "channel_id": "C1", "guild_id": "G1", "content": "", "author": {"id": "7"},
            "attachments": [{"id": "A1", "filename": "a.png", "content_type": "image/png", "size": 5,
                             "url": "https://cdn.discordapp.com/attachments/1/2/a.png"},
                            {"id": "A2", "filename": "nourl.bin"}]}  # fmt: skip
    event = dispatch_event("MESSAGE_CREATE", data, bot_user="9", session="s", seq=3)
    assert event is not None
    (file,) = event.attachments
    assert (file.name, file.mime_type, file.size) == ("a.png", "image/png", 5)
    async with httpx2.AsyncClient() as http:
        assert await DISCORD.file_request(http, file.locator) == (str(file.locator["url"]), {})
        for url in ("https://evil.example/a.png", "http://cdn.discordapp.com/a.png", "file:///etc/passwd"):
            with pytest.raises(ChannelSendError, match="is not on Discord's CDN; it is not fetched"):
                await DISCORD.file_request(http, {"url": url})
    assert (
        dispatch_event("MESSAGE_CREATE", data | {"author": {"id": "9"}}, bot_user="9", session="s", seq=4)
        is None
    )
    assert dispatch_event("MESSAGE_UPDATE", data, bot_user="9", session="s", seq=5) is None, (
        "no edited_timestamp"
    )
    assert dispatch_event("TYPING_START", data, bot_user="9", session="s", seq=6) is None

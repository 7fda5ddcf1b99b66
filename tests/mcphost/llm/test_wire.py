"""`StreamUsage`: the usage, the error and the end of a stream read from its events as they are relayed,
content events (nearly all of a stream) passed over unparsed."""

from __future__ import annotations

import json

from mcphost.llm.wire import Api, StreamUsage, Usage


def _fed(api: Api, events: list[tuple[str | None, object]]) -> StreamUsage:
    usage = StreamUsage(api)
    for event, data in events:
        usage.feed(event, data if isinstance(data, str) else json.dumps(data))
    return usage


def test_an_anthropic_stream_gives_its_usage_and_end_through_its_content_events() -> None:
    start = {"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 7}}}
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}
    found = _fed(
        "anthropic",
        [
            ("message_start", start),
            ("content_block_start", {"type": "content_block_start", "index": 0}),
            ("content_block_delta", delta),
            ("content_block_delta", "not json: a content event is never parsed"),
            ("ping", {"type": "ping"}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "usage": {"output_tokens": 12}}),
            ("message_stop", {"type": "message_stop"}),
        ],
    )
    assert (found.usage, found.finished, found.error) == (Usage(7, 12, 0, "claude-x"), True, None)


def test_an_error_event_in_a_stream_is_caught_in_every_api() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert _fed("anthropic", [("error", error)]).error == "Overloaded"
    chat_error = {"error": {"message": "upstream went away"}}
    assert _fed("chat", [(None, chat_error)]).error == "upstream went away"
    assert _fed("responses", [("error", {"type": "error", "message": "bad"})]).error == "bad"


def test_a_chat_stream_gives_the_usage_of_its_last_chunk_and_ends_at_done() -> None:
    chunk = {"choices": [{"delta": {"content": 'say "usage"'}}], "model": "m1"}
    last: dict[str, object] = {
        "choices": [],
        "model": "m1",
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
    }
    found = _fed("chat", [(None, chunk), (None, chunk), (None, last), (None, "[DONE]")])
    assert (found.usage, found.finished) == (Usage(5, 3, 0, "m1"), True)


def test_a_responses_stream_gives_the_usage_of_its_completed_event() -> None:
    completed = {
        "type": "response.completed",
        "response": {"model": "gpt-x", "usage": {"input_tokens": 4, "output_tokens": 2}},
    }
    found = _fed(
        "responses",
        [
            ("response.created", {"type": "response.created", "response": {}}),
            ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "hi"}),
            ("response.completed", completed),
        ],
    )
    assert (found.usage, found.finished) == (Usage(4, 2, 0, "gpt-x"), True)

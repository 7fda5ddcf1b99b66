"""`llm.translate`: which API a model is called at, the usage written back, and LiteLLM kept in its box
(imported only for a translated call, never reaching the network, never on the start-up path)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from mcphost.config import settings_from_mapping
from mcphost.errors import ConfigError
from mcphost.llm import ModelConfig
from mcphost.llm.translate import (
    Translation,
    TranslationError,
    load,
    translating,
    upstream_api,
    usage_body,
)
from mcphost.llm.wire import Usage, usage_of


def entry(provider: str, **kw: Any) -> ModelConfig:
    return ModelConfig.model_validate(
        {"provider": provider, "model": "x", "base_url": "http://127.0.0.1:1/v1", **kw}
    )


def test_a_model_is_called_in_its_provider_s_format_and_responses_only_where_served() -> None:
    anthropic, openai, local = entry("anthropic"), entry("openai"), entry("openai-compatible")
    served = entry("openai-compatible", responses=True)
    assert [upstream_api(api, anthropic) for api in ("anthropic", "chat", "responses")] == ["anthropic"] * 3
    assert [upstream_api(api, openai) for api in ("anthropic", "chat", "responses")] == [
        "chat",
        "chat",
        "responses",
    ]
    assert [upstream_api(api, local) for api in ("anthropic", "chat", "responses")] == [
        "chat",
        "chat",
        "chat",
    ]
    assert upstream_api("responses", served) == "responses"
    assert upstream_api("responses", entry("openai", responses=False)) == "chat"


def test_the_responses_flag_is_checked_in_the_config() -> None:
    def load_models(models: dict[str, Any]) -> Any:
        return settings_from_mapping({"models": models}, source="m.toml", environ={})

    with pytest.raises(
        ConfigError, match=r"models.c.responses: only for providers 'openai' and 'openai-compatible'"
    ):
        load_models({"c": {"provider": "anthropic", "model": "claude-sonnet-4-5", "responses": True}})
    with pytest.raises(
        ConfigError, match=r"models.a.fallback: model 'l' and 'a' disagree on serving the Responses"
    ):
        load_models(
            {
                "a": {"provider": "openai", "model": "x", "fallback": ["l"]},
                "l": {"provider": "openai-compatible", "model": "y", "base_url": "http://127.0.0.1:1/v1"},
            }
        )


@pytest.mark.parametrize("api", ["anthropic", "chat", "responses"])
def test_the_usage_written_back_reads_as_the_upstream_s(api: Any) -> None:
    usage = Usage(input_tokens=120, output_tokens=7, cached_tokens=30)
    found = usage_of(api, {"usage": usage_body(api, usage)})
    assert found == usage


async def test_a_body_litellm_cannot_map_is_a_precise_translation_error() -> None:
    with pytest.raises(
        TranslationError, match=r"the responses request cannot be translated .* has no 'input'"
    ):
        await translating("responses", entry("anthropic"), "sonnet", {"model": "sonnet"})
    with pytest.raises(TranslationError, match=r"the chat request cannot be translated .*no messages"):
        await translating("chat", entry("anthropic"), "sonnet", {"model": "sonnet", "messages": []})


async def test_a_call_in_the_model_s_own_format_is_passed_through_untouched() -> None:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert await translating("chat", entry("openai-compatible"), "m", body) == ("chat", body, None)


def test_the_upstream_s_error_comes_back_in_the_client_s_error_shape() -> None:
    translation = Translation(load(), "chat", "anthropic", {"model": "s", "messages": []}, "s")
    status, body = translation.whole(
        400, {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}}
    )
    assert status == 400
    assert body == {
        "error": {
            "message": "model 's': prompt is too long",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request",
        }
    }
    status, body = translation.whole(200, {"unexpected": True})
    assert status == 502
    assert "could not translate" in str(body)


def test_an_image_reaches_a_chat_model_as_an_image_url() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    body: dict[str, Any] = {
        "model": "local",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": [image, {"type": "text", "text": "what is it?"}]}],
    }
    sent = Translation(load(), "anthropic", "chat", body, "local").request()
    [message] = sent["messages"]  # type: ignore[misc]
    parts = message["content"]  # type: ignore[index]
    assert {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}} in [
        {"type": p["type"], "image_url": {"url": p["image_url"]["url"]}}  # type: ignore[index]
        for p in parts  # type: ignore[union-attr]
        if p["type"] == "image_url"  # type: ignore[index]
    ]


NO_NETWORK = r"""
import json, socket, sys
seen = []
def hook(event, args):
    if event == "socket.connect":
        seen.append(repr(args[1]))
    if event == "socket.getaddrinfo":
        seen.append(repr(args[0]))
sys.addaudithook(hook)
import mcphost.app
assert "litellm" not in sys.modules, "the start-up path imported litellm"
from mcphost.llm.translate import Translation, load
lib = load()
chat = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
Translation(lib, "anthropic", "chat", {**chat, "system": "s"}, "m").request()
Translation(lib, "chat", "anthropic", chat, "m").request()
Translation(lib, "responses", "chat", {"model": "m", "input": "hi"}, "m").request()
answer = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "yo"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
Translation(lib, "anthropic", "chat", chat, "m").whole(200, answer)
Translation(lib, "responses", "chat", {"model": "m", "input": "hi"}, "m").whole(200, answer)
chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
upstream = [
    {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "yo"}}]},
    {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {**chunk, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}},
]
async def events():
    for c in upstream:
        yield ("data: " + json.dumps(c) + "\n\n").encode()
    yield b"data: [DONE]\n\n"
async def streams():
    for client in ("anthropic", "responses"):
        body = {"model": "m", "input": "hi", "stream": True} if client == "responses" else {**chat, "stream": True}
        got = [e async for e in Translation(lib, client, "chat", body, "m").stream(events()).events()]
        assert len(got) > 3 and b"yo" in b"".join(got), (client, got)
import anyio
anyio.run(streams)
import time
time.sleep(0.5)  # LiteLLM's end-of-stream logging runs in its own threads
print(json.dumps(seen))
"""


def test_litellm_is_off_the_start_up_path_and_never_reaches_the_network() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_NETWORK], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # stdout is one line: LiteLLM printed nothing of its own
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize(
    ("client", "upstream", "body"),
    [
        ("anthropic", "chat", {"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "s"}],
                               "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
        ("chat", "anthropic", {"model": "m", "messages": [{"role": "developer", "content": "d"},
                                                         {"role": "user", "content": "hi"}]}),
        ("responses", "chat", {"model": "m", "instructions": "i",
                               "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}),
    ],
)  # fmt: skip
def test_translating_leaves_the_client_s_body_as_it_was(
    client: Any, upstream: Any, body: dict[str, Any]
) -> None:
    before = json.dumps(body, sort_keys=True)
    Translation(load(), client, upstream, body, "m").request()  # the tape hashes the body the client sent
    assert json.dumps(body, sort_keys=True) == before


def test_loading_the_library_leaves_the_host_s_loggers_as_they_were() -> None:
    """LiteLLM's import adds its redaction filters to uvicorn's, httpx's and asyncio's loggers (the host's
    access log then read `?REDACTED` for `?token=***`): the host puts them back. In a fresh interpreter,
    so the import really happens."""
    import subprocess
    import sys

    code = (
        "import logging\n"
        "names = ('uvicorn.access', 'uvicorn.error', 'httpx', 'asyncio')\n"
        "def state(): return [(len(logging.getLogger(n).filters), logging.getLogger(n).level) for n in names]\n"
        "before = state()\n"
        "import mcphost.llm.translate as t\n"
        "t.load()\n"
        "import litellm\n"
        "print(before == state(), before, state())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.startswith("True"), done.stdout + done.stderr

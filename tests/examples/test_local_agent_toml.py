"""`examples/local-agent.toml` as written, pointed at a fake OpenAI-compatible server on 127.0.0.1, run
through the real host by `mcphost run`: its plugin entry, API key hand-over, model and tool loop."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

from tests.examples.clikit import EXAMPLES, NO_BUNDLED, mcphost
from tests.fakes.openai_chat import FakeToolCall, Reply, serve_fake_chat

EXAMPLE = EXAMPLES / "local-agent.toml"


async def test_the_local_agent_example_answers_through_the_run_tools(tmp_path: Path) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    example = tomllib.loads(text)
    config = example["agents"][0]["config"]
    model = config["model"]
    async with serve_fake_chat() as fake:
        # Only the endpoint (and the interpreter) change; everything else runs as the example says.
        text = text.replace(config["base_url"], fake.base_url).replace('"python"', json.dumps(sys.executable))
        (tmp_path / "mcphost.toml").write_text(text, encoding="utf-8")
        fake.script(
            model,
            Reply(tool_calls=(FakeToolCall("history_search", {"query": "hello", "roles": ["user"]}),)),
            Reply(content="You said hello there."),
        )
        code, out, err = await mcphost("run", "hello there, what did I say?", cwd=tmp_path, env=NO_BUNDLED)
    assert code == 0, err
    assert out == "You said hello there.\n"
    ask, answer = fake.requests
    assert ask.headers["authorization"] == "Bearer " + example["plugins"][0]["env"][config["api_key_env"]]
    assert ask.messages == [
        {"role": "system", "content": example["agents"][0]["prompt"]},
        {"role": "user", "content": "hello there, what did I say?"},
    ]
    assert "history_search" in ask.tool_names
    hits = json.loads(answer.messages[-1]["content"])["hits"]
    assert [hit["item"]["content"] for hit in hits] == ["hello there, what did I say?"]

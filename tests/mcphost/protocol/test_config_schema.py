"""`config_schema_of`: a runner's config form derived from the pydantic model that validates it."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field, SecretStr

from mcphost.protocol import ConfigField, config_schema_of
from mcphost_runners.claude_code import ClaudeCodeConfig, ClaudeCodeRunner
from mcphost_runners.codex import CodexConfig, CodexRunner
from mcphost_runners.local_agent import LocalAgentConfig, LocalAgentRunner


class _Every(BaseModel):
    url: str = Field(title="Where")
    rounds: int = 3
    ratio: float | None = None
    on: bool = True
    mode: Literal["a", "b"] = "b"
    key: SecretStr | None = None
    names: list[str] = Field(default_factory=lambda: ["x"])
    extra: dict[str, int] = Field(default_factory=dict[str, int])
    prompt: str | None = None


def test_every_kind_of_field_maps_to_its_form_type() -> None:
    fields = {f.name: f for f in config_schema_of(_Every, exclude=("prompt",))}
    assert list(fields) == ["url", "rounds", "ratio", "on", "mode", "key", "names", "extra"]
    assert fields["url"] == ConfigField(name="url", type="string", label="Where", required=True)
    assert (fields["rounds"].type, fields["rounds"].default, fields["rounds"].label) == (
        "integer",
        3,
        "rounds",
    )
    assert (fields["ratio"].type, fields["ratio"].default, fields["ratio"].required) == (
        "number",
        None,
        False,
    )
    assert (fields["on"].type, fields["on"].default) == ("boolean", True)
    assert (fields["mode"].type, fields["mode"].options, fields["mode"].default) == (
        "select",
        ["a", "b"],
        "b",
    )
    assert fields["key"].type == "secret"
    assert (fields["names"].type, fields["names"].default) == ("json", ["x"])
    assert (fields["extra"].type, fields["extra"].default) == ("json", {})


@pytest.mark.parametrize(
    ("runner", "model"),
    [(ClaudeCodeRunner, ClaudeCodeConfig), (CodexRunner, CodexConfig), (LocalAgentRunner, LocalAgentConfig)],
)
def test_each_bundled_runner_declares_exactly_the_keys_its_model_accepts(
    runner: type[ClaudeCodeRunner | CodexRunner | LocalAgentRunner], model: type[BaseModel]
) -> None:
    schema: list[ConfigField] = runner.config_schema
    assert [f.name for f in schema] == [name for name in model.model_fields if name != "prompt"]
    assert all(f.label != f.name for f in schema), "every field has a human label (Field(title=...))"
    required = {
        f.name: "http://127.0.0.1:1/v1" if f.name == "base_url" else "m" for f in schema if f.required
    }
    # Conditionally required: the local agent's base_url (unless every model is a host model), and the
    # model `model_source = "host"` names.
    required.setdefault("model", "m")
    if "base_url" in model.model_fields:
        required.setdefault("base_url", "http://127.0.0.1:1/v1")
    defaults = {f.name: f.default for f in schema if not f.required and f.default is not None}
    model.model_validate({**required, **defaults})  # every advertised default is one the model accepts
    for field in schema:
        if field.type == "select":
            assert field.options
            for option in field.options:
                model.model_validate({**required, field.name: option})

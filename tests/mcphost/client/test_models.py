"""The client's answer models match the server's OpenAPI document: every field the client reads is in
the component schema of the same name, and a field the client requires is one the server always sends."""

from __future__ import annotations

import inspect

import pytest
from pydantic import BaseModel

from mcphost.api._routes import openapi
from mcphost.client import models

MODELS = [
    m
    for _, m in inspect.getmembers(models, inspect.isclass)
    if issubclass(m, models.Answer) and m is not models.Answer
]


def test_every_answer_model_is_checked() -> None:
    assert {m.__name__ for m in MODELS} >= {
        "Admitted",
        "RunView",
        "RunsPage",
        "CancelAnswer",
        "SchedulesPage",
    }


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_a_client_model_reads_only_what_the_server_sends(model: type[BaseModel]) -> None:
    schema = openapi()["components"]["schemas"][model.__name__]
    properties, required = schema["properties"], set(schema.get("required", []))
    for name, field in model.model_fields.items():
        assert name in properties, f"{model.__name__}.{name} is not in the server's {model.__name__}"
        if field.is_required():
            assert name in required, f"{model.__name__}.{name}: required here, optional in the document"

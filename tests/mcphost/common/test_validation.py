"""`mcphost.common.validation`: a ValidationError as "where: what", the same wherever it is shown."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from mcphost.common.validation import Problem, describe, problems


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["text"]
    text: str

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text must not be blank")
        return value


class Body(BaseModel):
    items: list[Item]


def error_of(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        Body.model_validate(data)
    return caught.value


def test_every_error_is_a_dotted_path_and_a_message_without_pydantics_value_error_prefix() -> None:
    exc = error_of({"items": [{"kind": "text", "text": " "}, {"kind": "text", "text": "ok", "extra": 1}]})
    assert problems(exc, root="(body)") == [
        Problem("items.0.text", "text must not be blank", "value_error"),
        Problem("items.1.extra", "Extra inputs are not permitted", "extra_forbidden"),
    ]
    assert describe(exc, root="(body)") == "items.0.text: text must not be blank"


def test_the_root_names_the_value_itself_and_skipped_parts_leave_the_path() -> None:
    assert describe(error_of("not an object"), root="(body)").startswith("(body): ")
    exc = error_of({"items": [{"kind": "text"}]})
    assert describe(exc, root="(body)", skip={"items", 0}) == "text: Field required"

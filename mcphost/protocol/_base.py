"""Shared base classes and aliases of the protocol models.

Inbound models (anything a runner sends to the host) forbid unknown fields; outbound models (what the
host sends to runners) allow them to be ignored by the receiving side, so runners stay forward
compatible (PROTOCOL §1: "runners must ignore unknown context fields").
"""

from __future__ import annotations

from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict

JSONValue: TypeAlias = Any
"""A JSON value passing through unchanged (STYLE 7: the one allowed use of Any)."""

JSONObject: TypeAlias = dict[str, Any]

PROTOCOL_VERSION = "1"


class InboundModel(BaseModel):
    """A model for data crossing a trust boundary into the host: unknown fields and NaN/Infinity are refused."""

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, populate_by_name=True, allow_inf_nan=False
    )


class ProtocolModel(BaseModel):
    """A model the host sends out: parsers on the runner side ignore unknown fields."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True, populate_by_name=True)

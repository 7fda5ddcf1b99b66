"""What a facts call answers: successful results, tool errors, and the audit facts about both.

Owns `ToolCallError` (a failure an agent can fix, carried as a PROTOCOL §5 code), the two result shapes
and the argument digest. Does not decide when a call fails (the handlers and the call pipeline do).

Invariants:
- A successful result carries the handler's answer model (`mcphost.protocol.facts`), dumped here and
  only here (`model_dump(mode="json")`), as `structured_content` and the same JSON as its one text block,
  so clients that show only text see everything.
- A failed result is `is_error=True` with structured content `{code, message, retryable, details}` and
  the text `code: message`. It never carries a traceback or an exception's repr.
- The argument digest is the SHA-256 of the canonical JSON (sorted keys, compact, UTF-8): the same
  arguments always give the same digest, whatever order the client sent them in.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import mcp_types as types
from pydantic import BaseModel

from mcphost.errors import HostError
from mcphost.protocol import JSONObject, is_error_code

REFUSAL_CODES: frozenset[str] = frozenset(
    {"unauthorized", "rate_limited", "deadline_exceeded", "approval_denied"}
)
"""Codes recorded as outcome `refused` in the audit: the grant, a limit or a person stopped the call."""

RETRYABLE_CODES: frozenset[str] = frozenset(
    {"rate_limited", "runtime_error", "storage_unavailable", "storage_full"}
)


class ToolCallError(Exception):
    """A failure the agent can act on, answered as an `is_error` result (or a JSON-RPC error for
    resources and prompts, which have no error results)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool | None = None,
        details: JSONObject | None = None,
    ) -> None:
        assert is_error_code(code), f"unknown error code {code!r}"
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = code in RETRYABLE_CODES if retryable is None else retryable
        self.details: JSONObject = details or {}

    @classmethod
    def of(cls, error: HostError) -> ToolCallError:
        """The failure an operational error means to the agent."""
        code = error.code if is_error_code(error.code) else "runtime_error"
        return cls(code, error.message, details=_jsonable(error.details))

    @property
    def refused(self) -> bool:
        return self.code in REFUSAL_CODES

    def to_dict(self) -> JSONObject:
        return {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "details": self.details,
        }


def _jsonable(details: dict[str, Any]) -> JSONObject:
    try:
        json.dumps(details)
    except (TypeError, ValueError):
        return {}
    return details


def dumps(value: Any) -> str:
    """The JSON text of a result: UTF-8 as is, no NaN."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def ok_result(answer: BaseModel) -> tuple[types.CallToolResult, int]:
    """A successful tool result carrying `answer`, and the bytes it returns."""
    structured: JSONObject = answer.model_dump(mode="json")
    text = dumps(structured)
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )
    return result, len(text.encode())


def error_result(failure: ToolCallError) -> tuple[types.CallToolResult, int]:
    """An `is_error` tool result and the bytes it returns."""
    text = f"{failure.code}: {failure.message}"
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=failure.to_dict(),
        is_error=True,
    )
    return result, len(text.encode())


def digest_arguments(arguments: Any) -> tuple[str, int]:
    """(SHA-256 hex of the canonical JSON of `arguments`, its length in bytes)."""
    try:
        canonical = json.dumps(
            arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError):
        canonical = repr(arguments)  # unreachable for arguments parsed from JSON, kept total anyway
    except RecursionError:  # refused as nested too deep right after; the digest only has to exist
        canonical = "<nested too deep>"
    data = canonical.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest(), len(data)

"""The client's exceptions, drawn in one place.

```
ClientError                 anything this client raises on purpose
├── APIError                the API answered with its error body {error: {code, message, details}} and an
│                           HTTP status (or, inside a result stream, `event: error`: status is that of the
│                           stream, 200)
└── APIConnectionError      no answer: the server could not be reached, or a result stream kept
                            dropping past the reconnects allowed
```

Owns the exceptions and turning an error answer into an `APIError`. Imports the standard library only.
"""

from __future__ import annotations

import json

from mcphost.client._json import JSONObject, as_object


class ClientError(Exception):
    """Base of what the mcphost client raises."""


class APIError(ClientError):
    """The API refused the request: its HTTP `status` and its error body (`code`, `message`, `details`)."""

    def __init__(self, status: int, code: str, message: str, details: JSONObject | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details: JSONObject = details if details is not None else {}

    def __repr__(self) -> str:
        return f"APIError(status={self.status}, code={self.code!r}, message={self.message!r})"

    @classmethod
    def of(cls, status: int, error: object) -> APIError:
        """From the API's `error` object ({code, message, details}); odd shapes keep what they carry."""
        found = as_object(error)
        details = as_object(found.get("details"))
        return cls(
            status, str(found.get("code") or f"http_{status}"), str(found.get("message") or ""), details
        )

    @classmethod
    def from_answer(cls, status: int, body: bytes) -> APIError:
        """From an error answer's body; one that is not the API's error body (a proxy's page) is quoted."""
        try:
            error = as_object(as_object(json.loads(body)).get("error"))
        except ValueError:
            error = {}
        if error:
            return cls.of(status, error)
        text = body[:200].decode(errors="replace")
        return cls(status, f"http_{status}", text or f"HTTP {status} without a body")


class APIConnectionError(ClientError):
    """The server could not be reached, or a stream could not be resumed; `__cause__` says why."""

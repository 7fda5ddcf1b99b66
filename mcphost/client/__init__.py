"""A client of mcphost's HTTP API, async (`AsyncClient`) and blocking (`Client`), on httpx2.

```python
from mcphost.client import AsyncClient

async with AsyncClient("http://127.0.0.1:8787", api_key="...") as client:
    async with client.events.stream({"input": {"text": "hello"}}) as stream:
        async for item in stream:          # ResultEvent: seq, type, raw, .result (typed)
            print(item.type)
    print(stream.end)                      # RunEnd(run_id, status, error)
```

Resources: `events` (send, stream), `runs` (list, get, runtime, cancel, stream, wait), `approvals`
(list, get, decide), `schedules` (list, get, create, delete, pause, resume), `conversations`
(transcript, events), `channels` (list), `runtimes` (list, drain, disable, enable).
Answers are the pydantic models of `mcphost.client.models`; errors are `APIError` (the API's error body
and status) and `APIConnectionError`, both `ClientError`s.

Imports no server module (no Starlette, SQLAlchemy, Alembic, the `mcp` server or the host's own modules;
an import-linter contract and a test in a fresh interpreter check it): of mcphost it uses
`mcphost.common` and, for `ResultEvent.result` only, `mcphost.protocol`. Importing it costs httpx2 and
the standard library; pydantic comes with the first answer model.
"""

from mcphost.client._async import AsyncClient, AsyncRunStream
from mcphost.client._errors import APIConnectionError, APIError, ClientError
from mcphost.client._stream import ResultEvent, RunEnd, RunFailure
from mcphost.client._sync import Client, RunStream

__all__ = [
    "APIConnectionError",
    "APIError",
    "AsyncClient",
    "AsyncRunStream",
    "Client",
    "ClientError",
    "ResultEvent",
    "RunEnd",
    "RunFailure",
    "RunStream",
]

"""A stdio "MCP server" that handshakes correctly and then answers tool calls with garbage.

`python tests/fakes/upstream_garbage.py`: `initialize` and `tools/list` get valid answers (tools `noise`,
`wrong_shape`, `silence`, `deep` and `abyss`); `tools/call` of `noise` prints a line that is not JSON, of
`wrong_shape` a JSON-RPC response whose result is not a `CallToolResult`, of `silence` nothing at all, of
`deep` a valid result whose structured content nests 100 arrays deep, and of `abyss` one nested 5000
deep (past any JSON parser's recursion limit).
"""

from __future__ import annotations

import json
import sys

TOOLS: list[dict[str, object]] = [
    {"name": name, "description": f"{name} tool", "inputSchema": {"type": "object", "properties": {}}}
    for name in ("noise", "wrong_shape", "silence", "deep", "abyss")
]


def reply(message_id: object, result: object) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message_id, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, message_id = message.get("method"), message.get("id")
        if method == "initialize":
            reply(
                message_id,
                {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "garbage", "version": "0"},
                },
            )
        elif method == "tools/list":
            reply(message_id, {"tools": TOOLS})
        elif method == "tools/call":
            name = message["params"]["name"]
            if name == "noise":
                sys.stdout.write("this is not JSON at all {{{\n")
                sys.stdout.flush()
            elif name == "wrong_shape":
                reply(message_id, {"content": "should be a list", "isError": "maybe"})
            elif name in ("deep", "abyss"):
                depth = 100 if name == "deep" else 5000
                head = json.dumps({"jsonrpc": "2.0", "id": message_id})[:-1]
                body = (
                    '"result": {"content": [], "structuredContent": {"v": '
                    + "[" * depth
                    + "]" * depth
                    + "}}}"
                )
                sys.stdout.write(f"{head}, {body}\n")
                sys.stdout.flush()
        elif method == "ping":
            reply(message_id, {})


if __name__ == "__main__":
    main()

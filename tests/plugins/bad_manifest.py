"""A raw-protocol plugin (`test/badmanifest`) offering one good manifest among bad ones.

Manifests, in order: 0 good (`plugin:test/badmanifest/good`); 1 `protocol_version` "2"; 2 a malformed id;
3 an id of another plugin; 4 a permission outside the vocabulary; 5 a select config field without options.
Runs of `good` complete with the message "good".
"""

from __future__ import annotations

import json
import sys
from typing import Any

MANIFESTS: list[dict[str, Any]] = [
    {"id": "plugin:test/badmanifest/good", "name": "good"},
    {"id": "plugin:test/badmanifest/future", "name": "future", "protocol_version": "2", "new_field": 1},
    {"id": "Not A Runner Id", "name": "malformed"},
    {"id": "plugin:acme/other/thief", "name": "thief"},
    {"id": "plugin:test/badmanifest/greedy", "name": "greedy", "permissions": {"state": ["read", "delete"]}},
    {
        "id": "plugin:test/badmanifest/formless",
        "name": "formless",
        "config_schema": [{"name": "model", "type": "select"}],
    },
]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        method, request_id = msg.get("method"), msg.get("id")
        params: dict[str, Any] = msg.get("params") or {}
        if method == "initialize":
            plugin = {"author": "test", "name": "badmanifest", "version": "1.0"}
            send({"jsonrpc": "2.0", "id": request_id, "result": {"plugin": plugin, "runners": MANIFESTS}})
        elif method == "runner/run":
            run_id = params["context"]["run_id"]
            results: list[dict[str, Any]] = [
                {"type": "message.completed", "data": {"message": {"content": "good"}}},
                {"type": "run.completed", "data": {}},
            ]
            for result in results:
                notification = {"run_id": run_id, "result": {"run_id": run_id, **result}}
                send({"jsonrpc": "2.0", "method": "runner/result", "params": notification})
            send({"jsonrpc": "2.0", "id": request_id, "result": {"status": "completed"}})
        elif method == "shutdown":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
            return


if __name__ == "__main__":
    main()

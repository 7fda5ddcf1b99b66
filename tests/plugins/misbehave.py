"""A deliberately misbehaving stdio plugin, `plugin:test/misbehave/default`, speaking the raw protocol.

Standard library only (no SDK), so it can break every rule the SDK keeps. Each run's behaviour is chosen
by `ctx.input.text`:

    ok               message.completed "ok" + run.completed
    usage            message.completed "ok" + run.completed with token counts, a cost and an extra counter
    oversized        a message.completed over 1 MiB (under the 4 MiB line limit), then run.completed
    line-too-long    a runner/result line over 4 MiB for the run, then answers completed
    garbage-too-long a 5 MiB line naming no run, then ok
    invalid-data     message.delta whose chunk.content is a number (known type, bad field)
    unknown-type     a result of type "telemetry.custom", then ok
    unstorable:WHAT  a result a store cannot keep: WHAT is nul (a NUL in message content), surrogate (a lone
                     surrogate there), nan (a NaN usage count), bigint (a sequence of 2**64) or unknown-nul
                     (an unknown result type whose name holds a NUL); then ok
    dup-seq          deltas with sequences 1, 2, 2, then a message (3) and run.completed (4)
    gap-seq          deltas with sequences 1, 2, 5, then a message (6) and run.completed (7)
    wrong-run-id     one result routed to an unknown run, one whose result.run_id is another run's, then ok
    no-output        answers completed without any result
    after-complete   run.completed, then a message.delta after it
    fail             run.failed runner.error, answers failed
    crash            three deltas, then the process exits with code 7
    hang             never answers, ignores runner/cancel
    freeze           the whole process stops answering anything (a deadlock): it reads its next line, then
                     blocks for good
    flood:N          N deltas (sequence 1..N), then run.completed with a message
    stream:N:PAUSE:WIDTH  N deltas of one line each ("<i> " and WIDTH x's), PAUSE seconds apart, then the
                     message.completed of their text and run.completed
    stream-fail:N:PAUSE:WIDTH  the same deltas, then run.failed runner.error
    stream-file:N:PAUSE:WIDTH  the same deltas, an inline artifact.created (`streamed.bin`, 300 bytes
                     with NULs), then the message.completed of their text naming it, and run.completed
    slow:SECONDS     sleeps (honouring runner/cancel → run.failed cancelled), then ok
    state:SCOPE      state.updated on SCOPE, then ok
    action:KEY       action.requested `deploy` (target {"env": "staging"}, idempotency key KEY; the manifest
                     lists `deploy` in permissions.platform_api), then ok
    artifact-inline  artifact.created with content_base64 and its correct sha256, then ok
    artifact-bad-sha the same with a wrong sha256
    artifact-inline-msg  artifact-inline, then a message.completed naming it by the runner's id (in
                     artifacts and as a file content), then run.completed
    msg-artifact:ID  a message.completed whose artifacts name ID, then run.completed
    bad-line         prints a non-JSON line to stdout, then ok
    env:NAME         replies with the value of the environment variable NAME, or "<unset>"
    stderr:TEXT      writes TEXT to stderr, then ok
    rpc-error        answers runner/run with a JSON-RPC error instead of a status
    show-state       replies with the run context's `state` as JSON
    deep-metadata:N  run.completed with a message and `metadata` nested N arrays deep
    deep-tool-call:N tool.call.started whose `parameters` nest N arrays deep, then ok
    deep-state:N     state.updated (conversation scope) whose value nests N arrays deep, then ok
    deep-line:N      a runner/result line nested N arrays deep (past the JSON parser's recursion limit
                     when N is in the thousands), then ok

A Discord slash command's text is its options (`q=<value>`): a leading `q=` is dropped.

Process-level flags: `--exit-immediately` (exits with code 3 before reading anything), `--silent` (reads
but never answers anything, so `initialize` times out), `--stubborn` (ignores SIGTERM, `shutdown` and stdin
EOF, and spawns a grandchild that ignores SIGTERM too; its pid goes to stderr as `grandchild <pid>`),
`--grandchild` (behaves, but leaves a sleeping grandchild behind when it exits).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

AUTHOR, PLUGIN = "test", "misbehave"
RUNNER_ID = f"plugin:{AUTHOR}/{PLUGIN}/default"

_write_lock = threading.Lock()
_cancelled: dict[str, threading.Event] = {}
_frozen = threading.Event()
_states: dict[str, Any] = {}


def write_line(data: bytes) -> None:
    with _write_lock:
        sys.stdout.buffer.write(data + b"\n")
        sys.stdout.buffer.flush()


def send(message: dict[str, Any]) -> None:
    write_line(json.dumps(message, separators=(",", ":")).encode())


def answer(request_id: Any, result: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def result(
    run_id: str, rtype: str, data: dict[str, Any], sequence: int | None = None, route: str | None = None
) -> None:
    obj: dict[str, Any] = {"type": rtype, "run_id": run_id, "data": data}
    if sequence is not None:
        obj["sequence"] = sequence
    send({"jsonrpc": "2.0", "method": "runner/result", "params": {"run_id": route or run_id, "result": obj}})


def message(run_id: str, text: str, sequence: int | None = None) -> None:
    result(run_id, "message.completed", {"message": {"role": "assistant", "content": text}}, sequence)


def delta(run_id: str, text: str, sequence: int | None = None, route: str | None = None) -> None:
    result(run_id, "message.delta", {"chunk": {"role": "assistant", "content": text}}, sequence, route)


def completed(run_id: str, sequence: int | None = None) -> None:
    result(run_id, "run.completed", {"finish_reason": "stop"}, sequence)


def ok(run_id: str) -> str:
    message(run_id, "ok")
    completed(run_id)
    return "completed"


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


STREAMED_FILE = bytes(range(256)) + b"\x00streamed\x00" * 4
"""The bytes of `stream-file`'s artifact (every byte value, and NULs)."""


def stream(run_id: str, name: str, arg: str, cancelled: threading.Event) -> str:
    count, pause, width = (arg.split(":") + ["3", "0.1", "10"][len(arg.split(":")) :])[:3]
    pieces = [f"{i:03d} {'x' * int(width)}\n" for i in range(int(count))]
    for piece in pieces:
        delta(run_id, piece)
        if cancelled.wait(float(pause)):
            result(run_id, "run.failed", {"code": "cancelled", "message": "cancelled while streaming"})
            return "failed"
    if name == "stream-fail":
        result(run_id, "run.failed", {"code": "runner.error", "message": "failed while streaming"})
        return "failed"
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(pieces)}
    if name == "stream-file":
        ref = {"artifact_id": "art_streamed", "name": "streamed.bin", "mime_type": "application/octet-stream",
               "size": len(STREAMED_FILE), "sha256": hashlib.sha256(STREAMED_FILE).hexdigest()}  # fmt: skip
        encoded = base64.b64encode(STREAMED_FILE).decode()
        result(run_id, "artifact.created", {"artifact": ref, "content_base64": encoded})
        msg["artifacts"] = [{"artifact_id": "art_streamed"}]
    result(run_id, "message.completed", {"message": msg})
    completed(run_id)
    return "completed"


def behave(run_id: str, text: str, cancelled: threading.Event) -> str | None:
    """Do what `text` asks; the status to answer with, or None to never answer."""
    name, _, arg = text.removeprefix("q=").partition(":")
    if name in ("stream", "stream-fail", "stream-file"):
        return stream(run_id, name, arg, cancelled)
    if name == "ok":
        return ok(run_id)
    if name == "usage":
        message(run_id, "ok")
        usage = {"input_tokens": 12345, "output_tokens": 678, "cost_usd": 0.25, "extra": {"cache_read": 9000}}
        result(run_id, "run.completed", {"finish_reason": "stop", "usage": usage})
        return "completed"
    if name == "oversized":
        message(run_id, "x" * (1536 * 1024))
        completed(run_id)
        return "completed"
    if name == "line-too-long":
        params = {"run_id": run_id, "result": {"run_id": run_id, "type": "message.completed"}}
        head = json.dumps({"jsonrpc": "2.0", "method": "runner/result", "params": params})
        write_line(head[:-2].encode() + b',"padding":"' + b"y" * (5 * 1024 * 1024) + b'"}}')
        return "completed"
    if name == "garbage-too-long":
        write_line(b"z" * (5 * 1024 * 1024))
        return ok(run_id)
    if name == "invalid-data":
        result(run_id, "message.delta", {"chunk": {"role": "assistant", "content": 42}})
        completed(run_id)
        return "completed"
    if name == "unknown-type":
        result(run_id, "telemetry.custom", {"anything": True})
        return ok(run_id)
    if name == "unstorable":
        if arg == "nul":
            message(run_id, "a\x00b")
        elif arg == "surrogate":
            message(run_id, "half \ud83d pair")
        elif arg == "nan":
            result(
                run_id, "run.completed", {"finish_reason": "stop", "usage": {"input_tokens": float("nan")}}
            )
        elif arg == "bigint":
            message(run_id, "big", sequence=2**64)
        else:
            result(run_id, "telemetry.\x00custom", {"anything": True})
        return ok(run_id)
    if name == "dup-seq":
        for sequence in (1, 2, 2):
            delta(run_id, f"d{sequence}", sequence)
        message(run_id, "deduplicated", 3)
        completed(run_id, 4)
        return "completed"
    if name == "gap-seq":
        for sequence in (1, 2, 5):
            delta(run_id, f"d{sequence}", sequence)
        message(run_id, "gapped", 6)
        completed(run_id, 7)
        return "completed"
    if name == "wrong-run-id":
        delta(run_id, "lost", route="run_nobody")
        delta("run_someone_else", "misaddressed", route=run_id)
        return ok(run_id)
    if name == "no-output":
        return "completed"
    if name == "after-complete":
        message(run_id, "done")
        completed(run_id)
        delta(run_id, "too late")
        return "completed"
    if name == "fail":
        result(run_id, "run.failed", {"code": "runner.error", "message": "asked to fail"})
        return "failed"
    if name == "crash":
        for i in range(3):
            delta(run_id, f"d{i}")
        sys.stderr.write("misbehave: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(7)
    if name == "hang":
        return None
    if name == "freeze":
        _frozen.set()
        return None
    if name == "flood":
        count = int(arg)
        for sequence in range(1, count + 1):
            delta(run_id, f"chunk {sequence}", sequence)
        result(run_id, "run.completed", {"message": {"content": f"flooded {count}"}}, count + 1)
        return "completed"
    if name == "slow":
        if cancelled.wait(float(arg)):
            result(run_id, "run.failed", {"code": "cancelled", "message": "cancelled while sleeping"})
            return "failed"
        message(run_id, f"slept {arg}")
        completed(run_id)
        return "completed"
    if name == "action":  # an action that needs a human's approval, keyed by `arg`
        result(
            run_id,
            "action.requested",
            {"action": "deploy", "target": {"env": "staging"}, "idempotency_key": arg},
        )
        return ok(run_id)
    if name == "react":  # an authorized platform action with no idempotency key: executed at once
        result(run_id, "action.requested", {"action": "reaction.add", "payload": {"emoji": arg or "eyes"}})
        return ok(run_id)
    if name == "state":
        result(run_id, "state.updated", {"scope": arg, "key": "misbehave", "value": 1})
        return ok(run_id)
    if name == "msg-artifact":
        msg = {"role": "assistant", "content": "see attached", "artifacts": [{"artifact_id": arg}]}
        result(run_id, "message.completed", {"message": msg})
        completed(run_id)
        return "completed"
    if name in ("artifact-inline", "artifact-bad-sha", "artifact-inline-msg"):
        content = b"hello artifact"
        digest = "0" * 64 if name == "artifact-bad-sha" else hashlib.sha256(content).hexdigest()
        ref = {
            "artifact_id": "art_inline",
            "name": "a.txt",
            "mime_type": "text/plain",
            "size": len(content),
            "sha256": digest,
        }
        result(
            run_id,
            "artifact.created",
            {"artifact": ref, "content_base64": base64.b64encode(content).decode()},
        )
        if name == "artifact-inline-msg":
            file = {"type": "file", "artifact_id": "art_inline", "mime_type": "text/plain"}
            msg = {"role": "assistant", "contents": [file], "artifacts": [{"artifact_id": "art_inline"}]}
            result(run_id, "message.completed", {"message": msg})
            completed(run_id)
            return "completed"
        return ok(run_id)
    if name == "bad-line":
        write_line(b"this is not json")
        return ok(run_id)
    if name == "show-state":
        message(run_id, json.dumps(_states.get(run_id)))
        completed(run_id)
        return "completed"
    if name == "deep-metadata":
        obj = {
            "type": "run.completed",
            "run_id": run_id,
            "metadata": {"deep": nested(int(arg))},
            "data": {"message": {"role": "assistant", "content": "deep"}},
        }
        send({"jsonrpc": "2.0", "method": "runner/result", "params": {"run_id": run_id, "result": obj}})
        return "completed"
    if name == "deep-tool-call":
        result(
            run_id,
            "tool.call.started",
            {"tool_call_id": "t1", "tool_name": "x", "parameters": {"p": nested(int(arg))}},
        )
        return ok(run_id)
    if name == "deep-state":
        result(run_id, "state.updated", {"scope": "conversation", "key": "deep", "value": nested(int(arg))})
        return ok(run_id)
    if name == "deep-line":
        depth = int(arg)
        head = json.dumps({"jsonrpc": "2.0", "method": "runner/result", "params": {"run_id": run_id}})
        write_line(head[:-2].encode() + b', "result": ' + b"[" * depth + b"]" * depth + b"}}")
        return ok(run_id)
    if name == "env":
        message(run_id, os.environ.get(arg, "<unset>"))
        completed(run_id)
        return "completed"
    if name == "stderr":
        sys.stderr.write(arg + "\n")
        sys.stderr.flush()
        return ok(run_id)
    result(run_id, "run.failed", {"code": "invalid_argument", "message": f"unknown behaviour {text!r}"})
    return "failed"


def run(request_id: Any, run_id: str, text: str) -> None:
    cancelled = _cancelled.setdefault(run_id, threading.Event())
    if text == "rpc-error":
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": "no runs today"}})
        return
    status = behave(run_id, text, cancelled)
    if status is not None:
        answer(request_id, {"status": status})


def spawn_grandchild(ignore_sigterm: bool) -> None:
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_sigterm else ""
    code = f"import signal, time; {ignore}time.sleep(600)"
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    sys.stderr.write(f"grandchild {child.pid}\n")
    sys.stderr.flush()


def main(argv: list[str]) -> None:
    if "--exit-immediately" in argv:
        sys.stderr.write("misbehave: exiting at once as asked\n")
        sys.exit(3)
    silent, stubborn = "--silent" in argv, "--stubborn" in argv
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if stubborn or "--grandchild" in argv:
        spawn_grandchild(ignore_sigterm=stubborn)
    for line in sys.stdin.buffer:
        if silent:
            continue
        while _frozen.is_set():
            time.sleep(3600)
        msg = json.loads(line)
        method, request_id = msg.get("method"), msg.get("id")
        params: dict[str, Any] = msg.get("params") or {}
        if method == "initialize":
            manifest = {
                "id": RUNNER_ID,
                "name": "default",
                "label": {"en": "Misbehave"},
                "protocol_version": "1",
                "permissions": {
                    "state": ["read", "write"],
                    "artifacts": ["metadata", "read", "create"],
                    "platform_api": ["deploy", "reaction.add"],
                },
            }
            answer(
                request_id,
                {"plugin": {"author": AUTHOR, "name": PLUGIN, "version": "0.0.1"}, "runners": [manifest]},
            )
        elif method == "runner/run":
            if params.get("runner") != "default":
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "error": {"code": -32602, "message": "unknown runner"},
                    }
                )
                continue
            ctx: dict[str, Any] = params["context"]
            run_input: dict[str, Any] = ctx.get("input") or {}
            text: str = run_input.get("text") or ""
            _states[ctx["run_id"]] = ctx.get("state")
            threading.Thread(target=run, args=(request_id, ctx["run_id"], text), daemon=True).start()
        elif method == "runner/cancel":
            run_id = params.get("run_id", "")
            _cancelled.setdefault(run_id, threading.Event()).set()
        elif method == "shutdown":
            if stubborn:
                continue
            answer(request_id, {})
            return
        elif request_id is not None:
            send(
                {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}}
            )
    while stubborn:
        time.sleep(60)


if __name__ == "__main__":
    main(sys.argv[1:])

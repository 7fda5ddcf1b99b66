"""Embedding calls in the OpenAI Embeddings wire format (`POST …/embeddings`), which OpenAI and the
OpenAI-compatible servers (Ollama, vLLM, LM Studio, gateways) speak.

Owns the upstream body of a `models_embed` call (`embed_body`), reading the vectors of an answer
(`read_vectors`), and the check of a body sent to the per-run embeddings endpoint (`body_problem`)
before it is passed upstream as it is. Does not own who may call (the proxy) nor the usage (`wire`).

Invariants:
- A request is bounded before any reservation or upstream: at most `MAX_EMBED_INPUTS` inputs, each
  at most `MAX_EMBED_INPUT_CHARS` characters (or as many token ids), `dimensions` a positive integer
  up to `MAX_EMBED_DIMENSIONS`, never streamed.
- An answer is read only when it holds exactly one vector of finite numbers per input, each index once;
  anything else is an `AnswerError`.
"""

from __future__ import annotations

import math

from mcphost.llm.neutral import AnswerError
from mcphost.protocol import JSONObject, JSONValue, is_json_array, is_json_object
from mcphost.protocol.inference import (
    MAX_EMBED_DIMENSIONS,
    MAX_EMBED_INPUT_CHARS,
    MAX_EMBED_INPUTS,
    ModelsEmbedArgs,
)


def embed_body(args: ModelsEmbedArgs) -> JSONObject:
    """The upstream body of a `models_embed` call (its `model` set by the upstream client)."""
    body: JSONObject = {"input": list[JSONValue](args.inputs), "encoding_format": "float"}
    if args.dimensions is not None:
        body["dimensions"] = args.dimensions
    return body


def _token_ids(value: JSONValue) -> bool:
    return (
        is_json_array(value)
        and 0 < len(value) <= MAX_EMBED_INPUT_CHARS
        and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**32 for t in value)
    )


def body_problem(body: JSONObject) -> str | None:
    """What is wrong with a body sent to the embeddings endpoint, or None when it may be passed on."""
    if body.get("stream") is True:
        return "an embeddings request cannot be streamed; leave 'stream' out"
    value = body.get("input")
    items: list[JSONValue]
    if isinstance(value, str) or _token_ids(value):
        items = [value]
    elif is_json_array(value) and value:
        items = value
    else:
        return (
            "'input' must be a string, a list of strings, or token ids (a list of integers, or of such lists)"
        )
    if len(items) > MAX_EMBED_INPUTS:
        return f"'input' has {len(items)} items; at most {MAX_EMBED_INPUTS} are embedded in one request"
    for index, item in enumerate(items):
        if isinstance(item, str):
            if not item or len(item) > MAX_EMBED_INPUT_CHARS:
                return f"input {index} must be 1 to {MAX_EMBED_INPUT_CHARS} characters long"
        elif not _token_ids(item):
            return f"input {index} is neither a string nor a list of token ids"
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        not isinstance(dimensions, int)
        or isinstance(dimensions, bool)
        or not 1 <= dimensions <= MAX_EMBED_DIMENSIONS
    ):
        return f"'dimensions' must be an integer from 1 to {MAX_EMBED_DIMENSIONS}"
    return None


def read_vectors(payload: JSONValue, count: int) -> list[list[float]]:
    """The vectors of an embeddings answer, in the order of the request's `count` inputs.

    Raises:
        AnswerError: the body is not an embeddings answer for `count` inputs.
    """
    data = payload.get("data") if is_json_object(payload) else None
    if not is_json_array(data):
        raise AnswerError("the answer has no 'data' list")
    found: dict[int, list[float]] = {}
    for position, item in enumerate(data):
        index = item.get("index", position) if is_json_object(item) else None
        vector = item.get("embedding") if is_json_object(item) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in found:
            raise AnswerError(f"an item's 'index' {str(index)[:20]} is not one of the {count} inputs, once")
        if not is_json_array(vector) or not vector:
            raise AnswerError(f"item {index} has no 'embedding' list (the host asks for floats)")
        numbers: list[float] = []
        for number in vector:
            if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
                raise AnswerError(f"item {index}'s embedding holds something that is not a finite number")
            numbers.append(float(number))
        found[index] = numbers
    if len(found) != count:
        raise AnswerError(f"the answer has {len(found)} vectors for {count} inputs")
    return [found[i] for i in range(count)]

"""The peer's side of the echo work: a one-node LangGraph graph that answers with its input text.

Runs inside LangGraph's own environment (`bench/peers/langgraph/`), never in mcphost's: the product does
not depend on LangGraph. The mcphost side runs the bundled echo runner (`python -m mcphost_runners.echo`), which
answers a message with its text; this node does the same to the graph's state.
"""

from __future__ import annotations

import importlib
from typing import Any, TypedDict

# LangGraph is installed in this folder's own environment only, so its API is untyped here: reached as `Any`.
_langgraph: Any = importlib.import_module("langgraph.graph")


class EchoState(TypedDict, total=False):
    text: str
    reply: str


def echo(state: EchoState) -> EchoState:
    return {"reply": state.get("text", "")}


graph = (
    _langgraph.StateGraph(EchoState)
    .add_node("echo", echo)
    .add_edge(_langgraph.START, "echo")
    .add_edge("echo", _langgraph.END)
    .compile()
)

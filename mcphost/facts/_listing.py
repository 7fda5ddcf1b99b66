"""`tools.json` read: the facts tools as `tools/list` shows them, without the tool table.

Owns reading the generated listing (`_tools.write_listing` writes it) and `granted_tools`, the part of it
a run's context names. Does not own the tools themselves (`_tools.py`).

Invariants:
- Nothing here imports the MCP SDK or the facts server: a host builds every run's context from this
  module while its MCP server is not loaded yet (`lazy.py`), and a test checks that a run on such a host
  never loads it (tests/mcphost/cli/test_startup.py).
- The listing holds the tools in `protocol.facts.FACTS_TOOL_NAMES` order, as the table does (the
  staleness test in tests/mcphost/facts/test_tools.py compares it with a fresh build).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import cast

from mcphost.models import RunGrant
from mcphost.protocol import JSONObject
from mcphost.protocol.facts import FACTS_TOOL_NAMES

LISTING = Path(__file__).with_name("tools.json")
"""Every facts tool as `tools/list` shows it (JSON, by alias, no nulls), by name, in the table's order."""


@cache
def _listing_text() -> str:
    return LISTING.read_text(encoding="utf-8")


def listing() -> dict[str, JSONObject]:
    """A fresh parse of `tools.json` (callers may keep or change what they get)."""
    return cast("dict[str, JSONObject]", json.loads(_listing_text()))


def granted_tools(grant: RunGrant) -> list[JSONObject]:
    """The facts tools `grant` allows, each as `tools/list` shows it (JSON, by alias, no nulls)."""
    tools = listing()
    return [tools[name] for name in FACTS_TOOL_NAMES if name in grant.tools]

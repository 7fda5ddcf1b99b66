"""Issue 10, item 2: a state value nested 300 deep was stored, and from then on failed every run whose
context held its scope."""

from __future__ import annotations

import json

import pytest

from mcphost.errors import InvalidArgumentError
from mcphost.protocol import MAX_JSON_DEPTH
from mcphost.stores import Stores
from tests.mcphost.stores.factories import nested_json


async def test_a_value_nested_past_the_limit_is_refused_and_nothing_is_written(stores: Stores) -> None:
    """Issue 10, item 2: a state value nested 300 deep was stored, and from then on failed every run whose
    context held its scope."""
    await stores.state.set("runner", ("r",), "k", "kept")
    with pytest.raises(InvalidArgumentError, match="nest more than 64 levels deep") as refused:
        await stores.state.set("runner", ("r",), "k", json.loads(nested_json(MAX_JSON_DEPTH + 1)))
    assert refused.value.details == {"field": "value", "max_depth": MAX_JSON_DEPTH}
    with pytest.raises(InvalidArgumentError, match="nest more than 64 levels deep"):
        await stores.state.set("runner", ("r",), "k", {"a": json.loads(nested_json(MAX_JSON_DEPTH))})
    entry = await stores.state.get("runner", ("r",), "k")
    assert entry is not None
    assert entry.value == "kept"
    await stores.state.set("runner", ("r",), "k", json.loads(nested_json(MAX_JSON_DEPTH)))

"""Fixtures of the bridge tests; the server they serve and the bridge driver are in `_helpers.py`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.bridge._helpers import Endpoint, serving_endpoint


@pytest.fixture
def endpoint(request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    """A fresh server per test (sessions, recorded requests and tool events start empty).

    Parametrize it indirectly with `True` for a server that answers with JSON bodies instead of SSE.
    """
    with serving_endpoint(json_response=bool(getattr(request, "param", False))) as found:
        yield found

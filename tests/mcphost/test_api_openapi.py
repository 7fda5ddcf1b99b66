"""`/openapi.json` and `/docs` through the real app over a real host (SQLite file or PostgreSQL): the
document is valid OpenAPI 3.1 (`openapi-spec-validator`), names every operation for client generators,
documents the streaming answers as served, and `/docs` renders it without loading anything.
"""

from __future__ import annotations

import html.parser
import keyword
import re
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from mcphost.api import openapi
from mcphost.api._docs import render_docs
from mcphost.api._routes import TAGS
from mcphost.app import Host, open_host
from tests.e2e.httpkit import api_settings, asgi_client, event_body, parse_sse


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data", api_key="docs-key")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:
        yield opened


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, ops in doc["paths"].items() for method, op in ops.items()]


async def test_the_served_document_is_valid_openapi_3_1(client: httpx2.AsyncClient) -> None:
    response = await client.get("/openapi.json")  # public: no API key
    assert response.status_code == 200
    doc = response.json()
    validate(doc)  # raises with the path of the first problem
    assert doc == openapi()


def test_the_validator_catches_a_broken_document() -> None:
    """The check above can fail: a response without a description is not OpenAPI."""
    doc = openapi()
    del doc["paths"]["/v1/runs"]["get"]["responses"]["200"]["description"]
    with pytest.raises(OpenAPIValidationError):
        validate(doc)


def test_every_operation_has_a_unique_identifier_and_a_declared_tag() -> None:
    doc = openapi()
    ids = [op["operationId"] for _, _, op in operations(doc)]
    assert len(ids) == len(set(ids))
    for op_id in ids:  # usable as a method name by generators in any language
        assert re.fullmatch(r"[a-z][a-z0-9_]*", op_id), op_id
        assert not keyword.iskeyword(op_id)
    declared = [tag["name"] for tag in doc["tags"]]
    assert declared == list(TAGS)
    used = {tag for _, _, op in operations(doc) for tag in op["tags"]}
    assert used == set(declared)  # every tag is used, none undeclared
    assert all(len(op["tags"]) == 1 for _, _, op in operations(doc))
    by_id = {op["operationId"]: (method, path) for path, method, op in operations(doc)}
    assert by_id["ingest_event"] == ("post", "/v1/events")
    assert by_id["upload_artifact"] == ("post", "/v1/artifacts")
    tag_of = {op["operationId"]: op["tags"][0] for _, _, op in operations(doc)}
    assert (tag_of["run_results"], tag_of["healthz"], tag_of["upload_artifact"]) == (
        "runs",
        "meta",
        "artifacts",
    )


async def test_the_streaming_ingest_is_documented_as_it_answers(
    host: Host, client: httpx2.AsyncClient
) -> None:
    doc = (await client.get("/openapi.json")).json()
    ingest = doc["paths"]["/v1/events"]["post"]["responses"]
    assert set(ingest["202"]["content"]) == {"application/json"}  # admitted, or a wait that timed out
    assert set(ingest["200"]["content"]) == {"text/event-stream", "application/json"}  # stream, wait
    results = doc["paths"]["/v1/runs/{run_id}/results"]["get"]["responses"]
    assert set(results["200"]["content"]) == {"text/event-stream", "application/json"}

    key = {"authorization": "Bearer docs-key"}
    plain = await client.post("/v1/events", json=event_body("plain"), headers=key)
    assert plain.status_code == 202
    assert plain.headers["content-type"] == "application/json"
    streamed = await client.post("/v1/events?stream=true", json=event_body("streamed"), headers=key)
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(streamed.text)
    assert events[0].event == "run"
    assert events[-1].event == "end"
    await host.orchestrator.wait(plain.json()["run_id"])


class _Page(html.parser.HTMLParser):
    """What the page asks a browser to load, and where its links point."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.loads: list[str] = []
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "a" and values.get("href"):
            self.links.append(str(values["href"]))
        elif values.get("src") or (tag == "link" and values.get("href")):
            self.loads.append(str(values.get("src") or values.get("href")))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


async def test_docs_is_a_self_contained_page_of_every_operation_and_schema(
    client: httpx2.AsyncClient,
) -> None:
    response = await client.get("/docs")  # public: no API key
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src" not in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    page = _Page()
    page.feed(response.text)
    assert "script" not in page.tags
    assert page.loads == []  # nothing from a CDN, nothing at all
    text = "".join(page.text)
    doc = openapi()
    for path, method, op in operations(doc):
        assert f"op-{op['operationId']}" in page.ids, (method, path)
        assert path in text
    for name in doc["components"]["schemas"]:
        assert f"schema-{name}" in page.ids
    local = [link for link in page.links if link.startswith("#")]
    assert local
    assert all(link[1:] in page.ids for link in local)  # every in-page link lands
    assert set(page.links) - set(local) == {"openapi.json"}


def test_the_page_escapes_what_the_document_says() -> None:
    doc = openapi()
    doc["info"]["description"] = "<script>alert(1)</script>"
    doc["paths"]["/v1/runs"]["get"]["summary"] = '"><img src=x onerror=alert(1)>'
    page = render_docs(doc)
    assert "<script>" not in page
    assert "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page

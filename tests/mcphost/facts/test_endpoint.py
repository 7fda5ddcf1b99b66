"""`FactsEndpoint`: the host's MCP routes load their server on first need, once, and behave like it.

Real stores, a real `FactsServer` built by the endpoint, real SDK clients over HTTP under uvicorn.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import anyio
import httpx2
import pytest

from mcphost.facts import endpoint as endpoint_module
from mcphost.facts.endpoint import import_detached
from mcphost.models import RunStatus
from mcphost.stores import Stores
from tests.mcphost.facts._helpers import MODERN, connect, ok, raises_mcp_error, serve_endpoint


async def test_nothing_is_built_until_a_request_needs_the_server_then_it_serves_it(stores: Stores) -> None:
    async with serve_endpoint(stores) as served:
        endpoint = served.endpoint
        run = await served.start_run()
        assert endpoint.server is None
        assert served.built == []
        assert endpoint.in_flight(run.run_id) == 0
        assert endpoint.open_sessions(run.run_id) == 0
        await endpoint.end_run("run-never-served")  # nothing of a run is held before the load
        async with connect(served, run) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert "history_page" in tools
            assert "items" in await ok(client, "history_page", {"limit": 5})
            assert endpoint.open_sessions(run.run_id) == 1  # the handshake-era session, by the server
        assert len(served.built) == 1
        assert endpoint.server is served.built[0]


async def test_first_requests_arriving_together_share_one_load(stores: Stores) -> None:
    async with serve_endpoint(stores) as served:
        runs = [await served.start_run(conversation_id=f"conv-{i}") for i in range(6)]
        listed: list[int] = []

        async def list_tools(index: int) -> None:
            async with connect(served, runs[index], mode=MODERN) as client:
                listed.append(len((await client.list_tools()).tools))

        async with anyio.create_task_group() as tg:
            for index in range(len(runs)):
                tg.start_soon(list_tools, index)
        assert len(listed) == len(runs)
        assert min(listed) > 0
        assert len(served.built) == 1


async def test_preload_builds_the_server_in_the_background_once(stores: Stores) -> None:
    async with serve_endpoint(stores) as served:
        served.endpoint.preload()
        served.endpoint.preload()  # a second call while loading starts nothing more
        with anyio.fail_after(60):
            while served.endpoint.server is None:  # noqa: ASYNC110  (the load has no event to wait on)
                await anyio.sleep(0.02)
        run = await served.start_run()
        async with connect(served, run, mode=MODERN) as client:
            assert (await client.list_tools()).tools
        served.endpoint.preload()  # loaded: nothing to do
        assert len(served.built) == 1


async def _post(url: str) -> httpx2.Response:
    body: dict[str, object] = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(url, json=body, headers={"Authorization": "Bearer anything"})


async def test_a_request_outside_running_is_503_and_builds_nothing(stores: Stores) -> None:
    async with serve_endpoint(stores, running=False) as served:
        run = await served.start_run()
        answer = await _post(served.url(run.run_id))
        assert answer.status_code == 503
        assert answer.json()["error"]["message"] == "the MCP server is not running"
        served.endpoint.preload()  # outside running(): nothing to load into
        assert served.built == []
        assert served.endpoint.server is None


async def test_a_load_that_fails_is_a_503_and_the_next_request_loads_again(
    stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_server_probe.py").write_text("raise ImportError('half an install')\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    async with serve_endpoint(stores) as served:
        run = await served.start_run()
        with monkeypatch.context() as broken:
            broken.setattr(endpoint_module, "SERVER_MODULE", "broken_server_probe")
            answer = await _post(served.url(run.run_id))
        assert answer.status_code == 503
        assert answer.json()["error"] == {
            "code": -32603,
            "message": "the MCP server could not be loaded; the host's log says why",
        }
        assert served.built == []
        async with connect(served, run, mode=MODERN) as client:  # the install mended: loaded now
            assert "history_page" in {t.name for t in (await client.list_tools()).tools}
        assert len(served.built) == 1


async def test_after_close_with_nothing_loaded_requests_are_503_and_build_nothing(stores: Stores) -> None:
    async with serve_endpoint(stores) as served:
        run = await served.start_run()
        await served.endpoint.close()
        answer = await _post(served.url(run.run_id))
        assert answer.status_code == 503
        assert answer.json()["error"] == {"code": -32603, "message": "the MCP server is shutting down"}
        assert served.built == []


async def test_a_run_that_ended_before_the_load_is_refused_by_the_server_loaded_after(stores: Stores) -> None:
    async with serve_endpoint(stores) as served:
        run = await served.start_run()
        await stores.runs.transition(run.run_id, RunStatus.COMPLETED)
        await served.endpoint.end_run(run.run_id)  # before the load: nothing held, the database decides
        answer = await _post(served.url(run.run_id))
        assert answer.status_code == 401
        with raises_mcp_error("is not active"):
            async with connect(served, run, mode=MODERN) as client:
                await client.list_tools()
        assert len(served.built) == 1


async def test_leaving_running_stores_the_loaded_servers_audit_rows(stores: Stores) -> None:
    async with serve_endpoint(stores) as served:
        run = await served.start_run()
        async with connect(served, run, mode=MODERN) as client:
            await ok(client, "history_page", {"limit": 1})
            await ok(client, "state_list", {"scope": "conversation"})
    audited = [row.tool for row in await stores.audit.list(run.run_id, limit=100)]
    assert audited.count("history_page") == 1
    assert audited.count("state_list") == 1


_BLOCKING_MODULE = """
import pathlib, time
while not pathlib.Path({release!r}).exists():  # an import that takes as long as the test wants
    time.sleep(0.01)
"""


async def test_an_import_given_up_on_runs_on_a_daemon_thread_the_process_need_not_wait_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = tmp_path / "release"
    (tmp_path / "slow_import_probe.py").write_text(_BLOCKING_MODULE.format(release=str(release)))
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    with anyio.move_on_after(0.2) as waited:
        await import_detached("slow_import_probe")
    assert waited.cancelled_caught  # the import still runs; the wait was abandoned
    [thread] = [t for t in threading.enumerate() if t.name == "import slow_import_probe"]
    assert thread.daemon  # an interpreter exiting now would not join it
    release.touch()
    thread.join(timeout=10)
    assert "slow_import_probe" in sys.modules
    monkeypatch.delitem(sys.modules, "slow_import_probe")


async def test_an_import_that_fails_raises_its_error_to_the_waiting_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_import_probe.py").write_text("raise ImportError('the probe cannot load')\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    with pytest.raises(ImportError, match="the probe cannot load"):
        await import_detached("broken_import_probe")

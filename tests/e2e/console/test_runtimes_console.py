"""The Runtimes page and a run's "Where it ran" in a real browser: Playwright driving Debian's chromium
against an `mcphost serve` subprocess with two registered runtimes (tokens from `mcphost runtimes add`),
driven over HTTP as a runtime drives the host (register, claim, heartbeat, results, output, end). The page
must show what `GET /v1/runtimes` says, change a runtime's state with its buttons through the client, and
break no word mid-word at 1280 px."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.console.test_console import (  # the browser fixtures: pytest finds them by name here
    _serve,  # pyright: ignore[reportPrivateUsage]
    browser,  # noqa: F401  # pyright: ignore[reportUnusedImport]
    page,  # noqa: F401  # pyright: ignore[reportUnusedImport]
    post_event,
    screenshot,
    wait_ended,
    words_broken_in_tables,
)
from tests.mcphost.test_serve import Server, mcphost

pytestmark = pytest.mark.slow

RUNNER = "plugin:mcphost/memo/default"
CAPABILITIES: dict[str, Any] = {
    "runners": [RUNNER],
    "harnesses": {"claude": {"version": "2.0.14 (Claude Code)"}, "codex": {"version": None}},
    "os": "Linux-6.1.0-x86_64-with-glibc2.36",
    "python": "3.11.2",
    "version": "0.1.0",
}


@pytest.fixture(scope="module")
def runtime_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    folder = tmp_path_factory.mktemp("console-runtimes")
    extra = (
        f'[[agents]]\nid = "remote"\nrunner = "{RUNNER}"\nmatch = {{ bot_id = "remote" }}\n'
        '[agents.runtime]\nlabels = { pool = "gpu" }\n'
    )
    for server in _serve(folder, extra, MCPHOST_RUNTIME_LEASE_S="600"):
        yield server, folder / "mcphost.toml"


class Runtime:
    """A runtime as the protocol sees one, driven from the test (`docs/protocol.md` §12)."""

    def __init__(self, url: str, config: Path, name: str, labels: str) -> None:
        added = mcphost(
            "runtimes", "add", name, "--labels", labels, "--config", str(config), cwd=config.parent
        )
        assert added.returncode == 0, added.stderr
        self.url = url
        self.headers = {"authorization": f"Bearer {added.stdout.strip()}"}
        self.post("register", {"capabilities": CAPABILITIES, "slots": 2, "labels": {"zone": "eu-west"}})

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = httpx2.post(f"{self.url}/v1/runtime/{path}", json=body, headers=self.headers, timeout=60)
        assert answer.status_code == 200, (path, answer.text)
        return answer.json()

    def claim(self, run_id: str) -> int:
        claimed = self.post("claim", {"wait_s": 20})["run"]
        assert claimed["run_id"] == run_id, claimed
        return claimed["fence"]

    def heartbeat(self, *held: tuple[str, int]) -> None:
        self.post("heartbeat", {"runs": [{"run_id": r, "fence": f} for r, f in held]})

    def finish(self, run_id: str, fence: int, text: str, stderr: str) -> None:
        results: list[dict[str, Any]] = [
            {"result": {"type": "message.completed", "run_id": run_id, "sequence": 1,
                        "data": {"message": {"content": text}}}},
            {"result": {"type": "run.completed", "run_id": run_id, "sequence": 2, "data": {}}},
        ]  # fmt: skip
        self.post(f"runs/{run_id}/results", {"fence": fence, "first_seq": 1, "results": results})
        self.post(f"runs/{run_id}/output", {"fence": fence, "text": stderr})
        self.post(f"runs/{run_id}/end", {"fence": fence, "status": "completed", "last_seq": 2})


def listed(url: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in httpx2.get(f"{url}/v1/runtimes", timeout=30).json()["runtimes"]}


def state_becomes(url: str, name: str, state: str) -> None:
    deadline = time.monotonic() + 60
    while listed(url)[name]["state"] != state:
        assert time.monotonic() < deadline, listed(url)[name]
        time.sleep(0.1)


def test_the_runtimes_page_shows_each_runtime_and_its_buttons_drain_disable_and_enable(
    runtime_server: tuple[Server, Path],
    page: Page,  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    server, config = runtime_server
    url = server.url
    east = Runtime(url, config, "gpu-east-1", "pool=gpu")
    west = Runtime(url, config, "gpu-west-2", "pool=gpu,region=us-west")

    done = post_event(url, "summarize the build log", agent="remote", conversation="rt-done")
    fence = east.claim(done)
    east.heartbeat((done, fence))
    east.finish(done, fence, "the build passed", "loading the model\nwarning: retrying a tool call\n")
    assert wait_ended(url, done)["status"] == "completed"
    held = post_event(url, "keep running", agent="remote", conversation="rt-held")
    held_fence = west.claim(held)
    west.heartbeat((held, held_fence))
    api = listed(url)
    assert [c["run_id"] for c in api["gpu-west-2"]["runs"]] == [held]
    assert api["gpu-east-1"]["runs"] == []

    page.goto(f"{url}/console/runtimes.html")
    for name, figures in api.items():
        row = page.locator(f"#runtimes tr[data-runtime='{name}']")
        expect(row).to_have_attribute("data-state", "online")
        expect(row.locator("td[data-label='Slots in use']")).to_have_text(f"{figures['running']} / 2")
        expect(row.locator("td[data-label='State'] [data-alive]")).to_have_attribute("data-alive", "true")
        expect(row.locator("td[data-label='Capabilities']")).to_contain_text(RUNNER)
        expect(row.locator("td[data-label='Capabilities']")).to_contain_text("claude 2.0.14 (Claude Code)")
        for key, value in figures["labels"].items():
            expect(row.locator("td[data-label='Labels']")).to_contain_text(f"{key}={value}")
        expect(row.locator("td[data-label='Last heartbeat']")).not_to_have_text("never")
    west_row = page.locator("#runtimes tr[data-runtime='gpu-west-2']")
    expect(west_row.locator(f"td[data-label='Current runs'] li[data-run-id='{held}']")).to_contain_text(
        f"fence {held_fence}, attempt 1"
    )
    expect(
        page.locator("#runtimes tr[data-runtime='gpu-east-1'] td[data-label='Current runs']")
    ).to_have_text("none")
    expect(page.locator("nav a[aria-current='page']")).to_have_text("Runtimes")
    page.wait_for_load_state("networkidle")
    assert words_broken_in_tables(page) == []
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(page, tmp_path, "runtimes")

    east_row = page.locator("#runtimes tr[data-runtime='gpu-east-1']")
    east_row.locator("button[data-action='drain']").click()
    expect(east_row).to_have_attribute("data-state", "draining")
    state_becomes(url, "gpu-east-1", "draining")
    east_row.locator("button[data-action='disable']").click()
    expect(east_row).to_have_attribute("data-state", "disabled")
    state_becomes(url, "gpu-east-1", "disabled")
    refused = httpx2.post(f"{url}/v1/runtime/claim", json={"wait_s": 0}, headers=east.headers, timeout=30)
    assert refused.status_code == 403, "a disabled runtime's token is refused"
    east_row.locator("button[data-action='enable']").click()
    expect(east_row).to_have_attribute("data-state", "online")
    state_becomes(url, "gpu-east-1", "online")

    page.goto(f"{url}/console/run.html?id={done}")
    placement = page.locator("#placement")
    expect(placement).to_be_visible()
    audit = httpx2.get(f"{url}/v1/runs/{done}/runtime", timeout=30).json()["runtime"]
    expect(placement.locator("dd[data-placement='runtime']")).to_have_text("gpu-east-1")
    expect(placement.locator("dd[data-placement='runtime-id']")).to_have_text(audit["runtime_id"])
    expect(placement.locator("dd[data-placement='attempt']")).to_have_text("1")
    expect(placement.locator("dd[data-placement='fence']")).to_have_text(str(fence))
    expect(placement.locator("dd[data-placement='lease-renewals']")).to_contain_text("1")
    expect(placement.locator("dd[data-placement='output']")).to_have_text(audit["output_artifact_id"])
    expect(placement.locator("#placement-events tbody tr")).to_have_count(4)
    expect(placement.locator("#placement-events tr[data-event='ended']")).to_contain_text("completed")
    expect(page.locator(f"#artifacts li[data-artifact-id='{audit['output_artifact_id']}']")).to_contain_text(
        "warning: retrying a tool call"
    )
    page.wait_for_load_state("networkidle")
    assert words_broken_in_tables(page) == []
    screenshot(page, tmp_path, "run-runtime")
    placement.locator("dd[data-placement='runtime'] a").click()
    expect(page.locator("#runtime-gpu-east-1")).to_be_in_viewport()

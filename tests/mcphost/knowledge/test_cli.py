"""`mcphost kb ingest | list | search` against a config file, a real SQLite database and real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mcphost.hostkit import REPO


def mcphost(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it: a subprocess with the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPHOST_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "mcphost.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tea.md").write_text(
        "---\nteam: kitchen\n---\n# Tea\n\n## Brewing\n\nGreen tea steeps at 80 degrees.\n"
    )
    (docs / "coffee.txt").write_text("Espresso needs finely ground coffee.\n")
    (docs / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0")
    cfg = tmp_path / "mcphost.toml"
    cfg.write_text(
        f'[host]\ndata_dir = "{(tmp_path / "data").as_posix()}"\n\n'
        '[knowledge.kitchen]\nname = "Kitchen"\ndescription = "Drinks"\npaths = ["docs"]\n'
    )
    return cfg


def _run(config: Path, *argv: str) -> tuple[int, str, str]:
    done = mcphost(*argv, "--config", str(config), cwd=config.parent)
    return done.returncode, done.stdout, done.stderr


def test_ingest_reports_progress_and_a_summary_then_is_incremental(config: Path) -> None:
    code, _, err = _run(config, "kb", "ingest", "kitchen")
    assert code == 0
    assert "1/3 added     docs/coffee.txt (1 chunks)" in err
    assert "2/3 skipped   docs/logo.png (unsupported file type '.png')" in err
    assert "kitchen: 2 added, 0 updated, 0 unchanged, 0 deleted, 1 skipped" in err
    assert "skipped docs/logo.png: unsupported file type '.png'" in err
    code, _, err = _run(config, "kb", "ingest", "kitchen")
    assert "0 added, 0 updated, 2 unchanged" in err
    code, out, _ = _run(config, "kb", "ingest", "kitchen", "--json")
    assert json.loads(out)["unchanged"] == ["docs/coffee.txt", "docs/tea.md"]
    # PATHs given on the command line are relative to the working folder, keys to the config's folder.
    elsewhere = config.parent / "cwd"
    elsewhere.mkdir()
    done = mcphost(
        "kb", "ingest", "kitchen", "../docs/tea.md", "--json", "--config", str(config), cwd=elsewhere
    )
    assert json.loads(done.stdout)["unchanged"] == ["docs/tea.md"]


def test_list_and_search(config: Path) -> None:
    _run(config, "kb", "ingest", "kitchen")
    code, out, _ = _run(config, "kb", "list")
    assert code == 0
    assert out.startswith("kitchen")
    assert "2 docs" in out
    code, out, _ = _run(config, "kb", "search", "kitchen", "green tea temperature")
    assert code == 0
    assert out.splitlines()[0].startswith("1. docs/tea.md  Tea > Brewing  lines 8-8")
    code, out, _ = _run(config, "kb", "search", "kitchen", "tea coffee", "--meta", "team=kitchen", "--json")
    assert [c["document"] for c in json.loads(out)["chunks"]] == ["docs/tea.md"]
    code, out, _ = _run(config, "kb", "search", "kitchen", "coffee", "--path", "*.txt", "--json")
    assert [c["document"] for c in json.loads(out)["chunks"]] == ["docs/coffee.txt"]


def test_errors_are_one_line(config: Path) -> None:
    code, _, err = _run(config, "kb", "search", "kitchen", "tea")
    assert code == 1
    assert "has not been ingested yet; run `mcphost kb ingest kitchen`" in err
    code, _, err = _run(config, "kb", "ingest", "pantry")
    assert code == 1
    assert "Knowledge base 'pantry' is not configured; configured: kitchen." in err
    code, _, err = _run(config, "kb", "search", "kitchen", "tea", "--meta", "oops")
    assert code == 2
    assert "--meta takes KEY=VALUE" in err


def test_the_example_config_ingests_searches_and_answers_through_memo(tmp_path: Path) -> None:
    example = str(REPO / "examples" / "knowledge-and-tools.toml")
    ingest = mcphost("kb", "ingest", "docs", "--config", example, cwd=tmp_path)
    assert ingest.returncode == 0, ingest.stderr
    assert "110 added" in ingest.stderr
    search = mcphost(
        "kb", "search", "docs", "DNS rebinding protection", "--json", "--config", example, cwd=tmp_path
    )
    documents = [c["document"] for c in json.loads(search.stdout)["chunks"]]
    assert "knowledge/mcphost/code/mcphost.facts.server.md" in documents
    tools = mcphost("tools", "--config", example, cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr
    assert "weather__forecast" in tools.stdout
    run = mcphost("run", "how are run tokens stored?", "--config", example, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "From mcphost documentation:" in run.stdout
    assert "knowledge_retrieve" in run.stdout

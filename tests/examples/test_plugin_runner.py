"""`examples/plugin_runner.py` registered as a plugin and run through the real host by `mcphost run`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.examples.clikit import EXAMPLES, NO_BUNDLED, mcphost


async def test_the_dozen_line_runner_reads_history_over_mcp(tmp_path: Path) -> None:
    command = [sys.executable, str(EXAMPLES / "plugin_runner.py")]
    (tmp_path / "mcphost.toml").write_text(
        f"[[plugins]]\ncommand = {json.dumps(command)}\n\n"
        '[[agents]]\nid = "recall"\nrunner = "plugin:example/recall/default"\n',
        encoding="utf-8",
    )
    code, out, err = await mcphost("run", "hello", cwd=tmp_path, env=NO_BUNDLED)
    assert code == 0, err
    assert out == "You said 'hello'; that is the first thing you said.\n"
    code, out, err = await mcphost("run", "and now?", cwd=tmp_path, env=NO_BUNDLED)
    assert code == 0, err
    assert out == "You said 'and now?'; before that you said 'hello'.\n"
    assert "completed" in err

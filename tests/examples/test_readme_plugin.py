"""The README's `shout.py` plugin, copied out of the README as a user would, registered as its text
says and run through the real host by `mcphost run`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.examples.clikit import NO_BUNDLED, REPO, mcphost


def readme_block(first_line: str) -> str:
    """The fenced Python block of README.md that starts with `first_line`."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index(f"```python\n{first_line}\n") + len("```python\n")
    return readme[start : readme.index("```", start)]


async def test_the_readme_plugin_runs_as_its_text_says(tmp_path: Path) -> None:
    (tmp_path / "shout.py").write_text(readme_block("# shout.py"), encoding="utf-8")
    command = [sys.executable, "shout.py"]  # "python shout.py", with this environment's interpreter
    (tmp_path / "mcphost.toml").write_text(
        f"[[plugins]]\ncommand = {json.dumps(command)}\n\n"
        '[[agents]]\nid = "shout"\nrunner = "plugin:acme/shout/default"\n',
        encoding="utf-8",
    )
    code, out, err = await mcphost("run", "hello there", cwd=tmp_path, env=NO_BUNDLED)
    assert code == 0, err
    assert out == "HELLO THERE\n"
    assert "completed" in err

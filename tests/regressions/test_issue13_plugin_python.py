"""Issue 13: the README plugin (`command = ["python", "shout.py"]`) failed when mcphost was started from its
venv without `uv run`: `python` was the system interpreter."""

from __future__ import annotations

import os
from pathlib import Path

from tests.examples.clikit import NO_BUNDLED, mcphost
from tests.examples.test_readme_plugin import readme_block


async def test_python_in_a_plugin_command_is_the_hosts_interpreter(tmp_path: Path) -> None:
    """Issue 13: the README plugin (`command = ["python", "shout.py"]`) failed when mcphost was started from
    its venv without `uv run`: `python` was the system interpreter."""
    # A PATH without the venv whose first `python` fails: the README plugin must still run.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for name in ("python", "python3"):
        fake = fake_bin / name
        fake.write_text("#!/bin/sh\necho 'not the host interpreter' >&2\nexit 3\n", encoding="utf-8")
        fake.chmod(0o755)
    (tmp_path / "shout.py").write_text(readme_block("# shout.py"), encoding="utf-8")
    (tmp_path / "mcphost.toml").write_text(
        '[[plugins]]\ncommand = ["python", "shout.py"]\n\n'
        '[[agents]]\nid = "shout"\nrunner = "plugin:acme/shout/default"\n',
        encoding="utf-8",
    )
    path = os.pathsep.join([str(fake_bin), "/usr/bin", "/bin"])
    code, out, err = await mcphost("run", "hello there", cwd=tmp_path, env={**NO_BUNDLED, "PATH": path})
    assert code == 0, err
    assert out == "HELLO THERE\n"

"""Issue 10, item 9: starting on storage that could not be opened (data_dir under a regular file) printed a
traceback instead of one line that names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mcphost.test_storage_faults import assert_refused_to_start, config_file, start


@pytest.mark.parametrize("command", ["serve", "run"])
def test_a_data_dir_under_a_regular_file_exits_2_with_one_line(tmp_path: Path, command: str) -> None:
    """Issue 10, item 9: starting on storage that could not be opened (data_dir under a regular file)
    printed a traceback instead of one line that names it."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file", encoding="utf-8")
    config = config_file(tmp_path, data_dir=blocker / "data")
    done = start(command, config, tmp_path)
    assert_refused_to_start(done, str(blocker / "data"), "regular file", "data_dir")

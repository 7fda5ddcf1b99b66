"""`bench.scaleout` runs end to end at its smallest size, and says plainly what limits it.

Proves the benchmark drives every process, reads the CPU of the serve processes, the database's backends
and the client from `/proc`, and names a limit; it never judges speed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import cast

import pytest

from bench import scaleout
from bench.peers._servers import Server

pytestmark = pytest.mark.timeout(300)
TINY = scaleout.PRESETS["tiny"]


@pytest.mark.postgres
async def test_every_configuration_is_measured_with_the_cores_it_used(shared_postgres: str) -> None:
    del shared_postgres  # only for its skip without PostgreSQL: the benchmark makes its own database
    rows = await scaleout.run(TINY)
    assert [row.case for row in rows] == [
        f"postgres, c={TINY.concurrency}: 1 process",
        f"postgres, c={TINY.concurrency}: 2 processes",
    ]
    one, two = rows
    assert one.baseline is None
    assert two.baseline == one.subject  # the ratio is against one process, measured in the same run
    for row, n in ((one, 1), (two, 2)):
        assert row.subject.p50 > 0
        assert row.extra["failed_runs"] == 0
        assert row.extra["runs_per_s_per_process"] == pytest.approx(row.subject.p50 / n)
        used = cast(float, row.extra["cores_used"])
        parts = sum(
            cast(float, row.extra[k]) for k in ("serve_cores", "postgres_backend_cores", "client_cores")
        )
        assert used == pytest.approx(parts)
        assert math.isfinite(cast(float, row.extra["runs_per_s_per_core_used"]))
        assert str(row.extra["limit"]).startswith(("the cores", "the database", "the client", "neither"))
    assert cast(float, one.extra["serve_cores"]) > 0  # the serve tree's CPU is read, not assumed
    json.dumps([row.to_json() for row in rows])


def _config(**cores: float) -> scaleout.Config:
    config = scaleout.Config([cast(Server, None)])
    config.cores = {key: [value] for key, value in cores.items()}
    return config


@pytest.mark.parametrize(
    ("machine", "postgres", "client", "expected"),
    [
        (1.95, 0.3, 0.2, "the cores: machine busy 1.95 of 2 cores"),
        (1.20, 0.9, 0.1, "the database:"),
        (1.20, 0.2, 0.9, "the client:"),
        (0.60, 0.1, 0.1, "neither cores nor database nor client is saturated"),
    ],
)
def test_the_limit_is_named_from_the_cores_each_part_used(
    machine: float, postgres: float, client: float, expected: str
) -> None:
    serve = 0.3
    config = _config(
        machine=machine,
        postgres=postgres,
        client=client,
        serve=serve,
        ours=serve + postgres + client,
        others=max(machine - serve - postgres - client, 0.0),
    )
    assert scaleout.limit(config, 2).startswith(expected)


def test_the_command_line_refuses_bad_counts_and_needs_postgres(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("MCPHOST_BENCH_POSTGRES_URL", "postgresql+asyncpg://nobody@127.0.0.1:1/none")
    for bad in (["--processes", "0,2"], ["--processes", "two"], ["--concurrency", "0"]):
        with pytest.raises(SystemExit) as exited:
            scaleout.main([*bad, "--output", str(tmp_path / "out.json")])
        assert exited.value.code == 2
    assert "--processes takes positive counts" in capsys.readouterr().err
    for name in ("MCPHOST_BENCH_POSTGRES_URL", "MCPHOST_TEST_POSTGRES_URL"):
        monkeypatch.delenv(name, raising=False)
    assert scaleout.main(["--tiny", "--output", str(tmp_path / "out.json")]) == 2
    assert "needs MCPHOST_BENCH_POSTGRES_URL" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()

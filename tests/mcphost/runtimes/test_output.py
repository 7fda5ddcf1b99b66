"""A run's output on its runtime (`runtimes/output.py`): the newest lines within the bound, what was cut
counted, nothing the host would refuse; and the body the host accepts for it."""

from __future__ import annotations

from mcphost.runtimes.output import RunOutput
from mcphost.runtimes.wire import MAX_OUTPUT_BYTES, OutputBody


def test_the_newest_lines_are_kept_and_the_cut_ones_counted() -> None:
    output = RunOutput(limit=20)
    for line in ("one", "two", "three", "four", "five"):
        output.add(line)
    assert output.text() == "two\nthree\nfour\nfive\n"
    assert (output.size, output.cut_bytes, output.cut_lines) == (20, 4, 1)
    assert output.cut_bytes + output.size == sum(len(w) + 1 for w in ("one", "two", "three", "four", "five"))


def test_a_line_longer_than_the_bound_keeps_its_end_and_nul_is_replaced() -> None:
    output = RunOutput(limit=10)
    output.add("a" * 30 + "\x00end")
    assert output.text().endswith("\ufffdend\n")
    assert len(output.text().encode()) <= 10
    assert output.cut_bytes > 0
    assert output.cut_lines == 0, "the line is kept, cut at its start"


def test_an_empty_output_is_empty_and_a_full_one_is_a_valid_body() -> None:
    assert RunOutput().empty
    output = RunOutput()
    for _ in range(40_000):
        output.add("é" * 40)
    assert not output.empty
    body = OutputBody.model_validate(output.body(3))
    assert len(body.text.encode()) <= MAX_OUTPUT_BYTES
    assert body.cut_lines > 0
    assert body.cut_bytes + len(body.text.encode()) == 40_000 * (len("é" * 40) * 2 + 1)

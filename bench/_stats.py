"""Samples, percentiles and the result rows every benchmark returns.

Owns the numbers: how a list of samples becomes p50/p99, what a comparison row holds (baseline and
subject measured in the same run, their ratio, the target it is judged against) and its JSON form.
Does not own timing or alternation (`_alternate.py`) or printing (`_report.py`).

Conventions:
- Latencies are in milliseconds, rates in operations per second, memory in KiB.
- The tail column is the worst 1 %: p99 for latencies (`higher_is_better=False`), p1 for rates.
- `ratio` is subject over baseline at the median, so for latencies > 1 means the subject is slower and
  for rates < 1 means the subject is slower.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["met", "missed", "n/a"]


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100; got {q}")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Stat:
    """A summary of one side's samples."""

    p50: float
    tail: float
    """p99 for latencies, p1 for rates: the worst 1 %."""
    n: int
    unit: str

    @classmethod
    def of(cls, samples: Sequence[float], unit: str, *, higher_is_better: bool = False) -> Stat:
        return cls(
            p50=percentile(samples, 50),
            tail=percentile(samples, 1 if higher_is_better else 99),
            n=len(samples),
            unit=unit,
        )

    def show(self) -> str:
        return f"{_num(self.p50)} / {_num(self.tail)} {self.unit}"

    def to_json(self) -> dict[str, float | int | str]:
        return {"p50": self.p50, "tail": self.tail, "n": self.n, "unit": self.unit}


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


@dataclass(frozen=True)
class Row:
    """One comparison: baseline and subject measured alternately in the same process run."""

    benchmark: str
    case: str
    """What varies within a benchmark: database, concurrency, data size, protocol era …"""
    baseline_label: str
    subject_label: str
    baseline: Stat | None
    """None when the benchmark has no meaningful baseline for this row (then there is no ratio)."""
    subject: Stat
    higher_is_better: bool = False
    target: str | None = None
    """The target in words, e.g. "overhead p50 ≤ 5 ms"."""
    verdict: Verdict = "n/a"
    extra: dict[str, float | str] = field(default_factory=dict[str, float | str])
    """Derived numbers worth printing (e.g. overhead_p50_ms) and notes."""

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline.p50 == 0:
            return None
        return self.subject.p50 / self.baseline.p50

    def to_json(self) -> dict[str, object]:
        return {
            "benchmark": self.benchmark,
            "case": self.case,
            "baseline_label": self.baseline_label,
            "subject_label": self.subject_label,
            "baseline": None if self.baseline is None else self.baseline.to_json(),
            "subject": self.subject.to_json(),
            "ratio": self.ratio,
            "higher_is_better": self.higher_is_better,
            "target": self.target,
            "verdict": self.verdict,
            "extra": self.extra,
        }


def judge(ok: bool) -> Verdict:
    return "met" if ok else "missed"


def fmt(value: float) -> str:
    """A number at a readable precision (for notes)."""
    return _num(value)

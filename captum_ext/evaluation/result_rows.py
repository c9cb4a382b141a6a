#!/usr/bin/env python3
r"""The rows of a benchmark result: one :class:`MethodResult` per (task,
method), and :class:`TaskRows`, one task's rows with its metric columns. The
tables, the faithfulness-cost front and the figures are computed from these;
:class:`~captum_ext.evaluation.results.BenchmarkResult` holds them."""

import statistics
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Tuple

from captum_ext.evaluation.timing import SPREAD_BOUND

__all__ = ["KENDALL", "MethodResult", "SUSPECT_RATIO", "TaskRows"]

# The one metric that does not apply to every method: a class-agnostic
# method's Kendall-τ is 1 by construction, not a measurement.
KENDALL = "Kendall-tau"

# A method that runs a forward pass cannot cost less than one; a measured ratio
# below this says the timing was disturbed, not that the method is cheap.
SUSPECT_RATIO = 0.9


@dataclass
class MethodResult:
    r"""One (task, method) row: mean metric values, mean curves and timings.

    ``ratios`` holds one ``t_method / t_forward`` per batch and ``spreads``
    how far that batch's repetitions were apart
    (:class:`~captum_ext.evaluation.timing.PairedTiming`);
    ``per_example[column]`` is aligned with ``rows`` (positions in the data);
    ``constant`` lists the rows whose explanation had no signal (constant over
    the ranked tokens), which every metric leaves out."""

    task: str
    method: str
    family: str
    n: int
    metrics: Dict[str, float]
    curves: Dict[str, Tuple[List[float], List[float]]]
    seconds: float
    forward_seconds: float
    ratios: List[float] = field(default_factory=list)
    spreads: List[float] = field(default_factory=list)
    rows: List[int] = field(default_factory=list)
    per_example: Dict[str, List[float]] = field(default_factory=dict)
    class_agnostic: bool = False  # scores ignore the target: Kendall-tau n/a
    # Data rows whose explanation was constant (no signal): every metric n/a.
    constant: List[int] = field(default_factory=list)

    @property
    def time_ratio(self) -> float:
        r"""Median over batches of method time / paired forward time (total
        over total when no per-batch ratio was recorded)."""
        if self.ratios:
            return float(statistics.median(self.ratios))
        return self.seconds / max(self.forward_seconds, 1e-9)

    @property
    def timing_suspect(self) -> bool:
        r"""True when a method that runs a forward pass (every family but
        ``"control"``) measured below :data:`SUSPECT_RATIO` forward passes: the
        report flags the number instead of printing it as a cost. A ratio that
        is not a number is suspect too, and so is one whose repetitions were
        more than :data:`~captum_ext.evaluation.timing.SPREAD_BOUND` apart on
        some batch (a disturbed machine)."""
        if any(spread > SPREAD_BOUND for spread in self.spreads):
            return True
        return self.family != "control" and not self.time_ratio >= SUSPECT_RATIO

    def applies(self, metric: str) -> bool:
        r"""False for the :data:`KENDALL` column of a class-agnostic method
        (its scores ignore the target); True otherwise."""
        return not (metric == KENDALL and self.class_agnostic)


class TaskRows(NamedTuple):
    r"""One task's rows, in the result's order, and its metric columns in
    order, each mapped to whether higher is better."""

    task: str
    rows: List[MethodResult]
    columns: Dict[str, bool]

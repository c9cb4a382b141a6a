#!/usr/bin/env python3
r"""The faithfulness-cost front of a task: each method as a point (time ratio,
metric value), and the methods a reader can trust as the best at their
budget.

Two rules keep the front from following noise. Costs are told apart only
beyond the timing protocol's own spread
(:class:`~captum_ext.evaluation.timing.PairedTiming`: how far the repetitions
of the same work were apart): methods whose costs lie within it share one
budget, and the best of them stands for it, whichever measured a little
cheaper this time. And a method that does not beat the random control on a
metric is never on its front: a ranking no better than chance is no choice."""

import math
import statistics
from typing import List, NamedTuple, Sequence

from captum_ext.evaluation.result_rows import MethodResult, TaskRows

__all__ = [
    "FrontPoint",
    "budget_front",
    "control_value",
    "flagged_points",
    "frontier_metrics",
    "frontier_points",
]


class FrontPoint(NamedTuple):
    r"""A method as a point of the faithfulness-cost plane: ``cost`` in
    forward passes, ``value`` of one metric, and ``spread`` (>= 1) the factor
    within which its cost is known (the median over batches of ``max / min``
    of its timing's repetitions, as the cost is the median ratio)."""

    method: str
    cost: float
    value: float
    spread: float = 1.0


def _point(row: MethodResult, metric: str) -> FrontPoint:
    # The cost is the median over batches, so its spread is the batches'
    # median spread (one disturbed batch moves neither).
    spreads = [s for s in row.spreads if math.isfinite(s)]
    spread = max(1.0, statistics.median(spreads)) if spreads else 1.0
    return FrontPoint(row.method, row.time_ratio, row.metrics[metric], spread)


def _plotted(row: MethodResult, metric: str) -> bool:
    r"""A method (not the random control) with a finite ``metric`` value."""
    return (
        row.family != "control"
        and row.applies(metric)
        and math.isfinite(row.metrics.get(metric, math.nan))
        and math.isfinite(row.time_ratio)
    )


def frontier_points(rows: Sequence[MethodResult], metric: str) -> List[FrontPoint]:
    r"""The methods among ``rows`` with a trusted cost and a value of
    ``metric``: the random control (a floor, not a choice), flagged timings and
    rows where the metric does not apply are left out."""
    return [
        _point(row, metric)
        for row in rows
        if _plotted(row, metric) and not row.timing_suspect
    ]


def flagged_points(rows: Sequence[MethodResult], metric: str) -> List[FrontPoint]:
    r"""The methods with a value of ``metric`` whose timing is flagged
    (:attr:`MethodResult.timing_suspect`): drawn, but never on the front."""
    return [
        _point(row, metric)
        for row in rows
        if _plotted(row, metric) and row.timing_suspect
    ]


def control_value(rows: Sequence[MethodResult], metric: str) -> float:
    r"""The random control's value of ``metric`` (NaN where there is none)."""
    values = [
        row.metrics.get(metric, math.nan) for row in rows if row.family == "control"
    ]
    return values[0] if values else math.nan


def _same_budget(cheaper: FrontPoint, point: FrontPoint) -> bool:
    return point.cost <= cheaper.cost * max(cheaper.spread, point.spread)


def budget_front(
    points: Sequence[FrontPoint], higher_is_better: bool, floor: float = math.nan
) -> List[FrontPoint]:
    r"""One method per distinguishable budget, cheapest first. The points
    (finite, and strictly better than ``floor`` where it is finite) are taken
    by increasing cost; one that beats the last method on the front joins it,
    and replaces the methods before it whose costs lie within the larger of
    the two spreads (the same budget: the better method stands for it, not the
    one that measured a little cheaper). So every two methods on the front
    have costs the timings tell apart, and values that improve with cost.

    Args:
        points (Sequence[FrontPoint]): the candidates.
        higher_is_better (bool): the metric's direction.
        floor (float, optional): the random control's value: a point must be
            strictly better. Default: no floor.

    Returns:
        list[FrontPoint]: the front, by increasing cost and improving value.
    """
    sign = 1.0 if higher_is_better else -1.0
    candidates = [
        p
        for p in points
        if math.isfinite(p.cost)
        and math.isfinite(p.value)
        and not sign * p.value <= sign * floor
    ]
    front: List[FrontPoint] = []
    for point in sorted(candidates, key=lambda p: (p.cost, -sign * p.value)):
        if front and sign * point.value <= sign * front[-1].value:
            continue  # no better than a method as cheap or cheaper
        while front and _same_budget(front[-1], point):
            front.pop()
        front.append(point)
    return front


def frontier_metrics(table: TaskRows) -> List[str]:
    r"""The task's metrics with at least one method drawn on the plane (none:
    no figure)."""
    return [m for m in table.columns if any(_plotted(row, m) for row in table.rows)]

#!/usr/bin/env python3
r"""The faithfulness-cost front of a task: each method as a point (time ratio,
metric value), and the points no other method beats at the same or lower
cost."""

import math
from typing import List, NamedTuple, Sequence

from captum_ext.evaluation.result_rows import MethodResult, TaskRows

__all__ = ["FrontPoint", "frontier_metrics", "frontier_points", "pareto_front"]


class FrontPoint(NamedTuple):
    r"""A method as a point of the faithfulness-cost plane: ``cost`` in
    forward passes, ``value`` of one metric."""

    method: str
    cost: float
    value: float


def pareto_front(
    points: Sequence[FrontPoint], higher_is_better: bool
) -> List[FrontPoint]:
    r"""The points no other point beats: no other costs at most as much and
    scores at least as well, strictly better in one of the two. Ties (same
    cost, same value) are all on the front. Sorted by cost, cheapest first;
    a point with a non-finite cost or value is never on it.

    Args:
        points (Sequence[FrontPoint]): the candidates.
        higher_is_better (bool): the metric's direction.

    Returns:
        list[FrontPoint]: the front, by increasing cost (and so by improving
        value).
    """
    sign = 1.0 if higher_is_better else -1.0
    finite = [p for p in points if math.isfinite(p.cost) and math.isfinite(p.value)]

    def beats(q: FrontPoint, p: FrontPoint) -> bool:
        no_worse = q.cost <= p.cost and sign * q.value >= sign * p.value
        return no_worse and (q.cost < p.cost or sign * q.value > sign * p.value)

    front = [p for p in finite if not any(beats(q, p) for q in finite)]
    return sorted(front, key=lambda p: (p.cost, -sign * p.value))


def frontier_points(rows: Sequence[MethodResult], metric: str) -> List[FrontPoint]:
    r"""The methods among ``rows`` with a measured cost and a value of
    ``metric``: the random control (a floor, not a choice), flagged timings and
    rows where the metric does not apply are left out."""
    return [
        FrontPoint(row.method, row.time_ratio, row.metrics.get(metric, math.nan))
        for row in rows
        if row.family != "control"
        and not row.timing_suspect
        and row.applies(metric)
        and math.isfinite(row.metrics.get(metric, math.nan))
    ]


def frontier_metrics(table: TaskRows) -> List[str]:
    r"""The task's metrics with at least one point on the plane (none: no
    figure)."""
    return [m for m in table.columns if frontier_points(table.rows, m)]

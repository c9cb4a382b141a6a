#!/usr/bin/env python3
r"""What a benchmark run returns: one row per (task, method) with mean metric
values, mean curves and timings, plus the examples and per-layer maps the report
draws."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

from torch import Tensor

from captum_ext.visualization import Explanation

__all__ = ["BenchmarkResult", "MethodResult"]


@dataclass
class MethodResult:
    r"""One (task, method) row: mean metric values, mean curves and timings."""

    task: str
    method: str
    family: str
    n: int
    metrics: Dict[str, float]
    curves: Dict[str, Tuple[List[float], List[float]]]
    seconds: float
    forward_seconds: float

    @property
    def time_ratio(self) -> float:
        r"""Attribution time / one forward pass over the same examples."""
        return self.seconds / max(self.forward_seconds, 1e-9)


@dataclass
class BenchmarkResult:
    r"""Everything the report needs."""

    rows: List[MethodResult]
    metrics: Dict[str, bool]  # column -> higher is better
    examples: Dict[str, List[Explanation]]
    config: Dict[str, Any]
    wall_seconds: float = 0.0
    layer_maps: Dict[str, Dict[str, Tuple[List[str], Tensor]]] = field(
        default_factory=dict
    )

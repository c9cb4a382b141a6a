#!/usr/bin/env python3
r"""What Captum's metrics add to the benchmark's run time.

Runs the classifier benchmark (:func:`captum_ext.evaluation.engine.benchmark`,
every method, every metric) on the first ``--n`` (64, the command line's
default) held-out snippets of the default sentiment model, with every metric's
``compute`` timed, and prints, from that one run, the seconds spent in each
metric and the share that :func:`captum.metrics.infidelity` and
:func:`captum.metrics.sensitivity_max` add to the run without them:
``(t_infidelity + t_sensitivity) / (t_total - t_infidelity - t_sensitivity)``
(target: well under 10 %).

Usage::

    python -m benchmarks.bench_captum_metrics
    python -m benchmarks.bench_captum_metrics --n 32 --methods NormXLogit AttCAT
"""

import argparse
import dataclasses
import time
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional

from captum_ext.defaults.data import load_split
from captum_ext.defaults.models import load_default_model
from captum_ext.evaluation.engine import benchmark
from captum_ext.evaluation.names import CAPTUM_METRIC_NAMES
from captum_ext.evaluation.registry import METRICS
from captum_ext.evaluation.user_data import LoadedExamples


def _timed(compute: Callable[..., Any], seconds: List[float]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return compute(*args)
        finally:
            seconds.append(time.perf_counter() - start)

    return run


def main(n: int, methods: Optional[List[str]]) -> None:
    model, tokenizer = load_default_model("sentiment")
    split = load_split("sentiment", "test")
    data = LoadedExamples("sentiment", list(split.texts[:n]))
    seconds: Dict[str, List[float]] = defaultdict(list)
    original = dict(METRICS)
    for name, spec in original.items():
        METRICS[name] = dataclasses.replace(
            spec, compute=_timed(spec.compute, seconds[name])
        )
    try:
        start = time.perf_counter()
        benchmark(model, tokenizer, data, methods, progress=False)
        total = time.perf_counter() - start
    finally:
        METRICS.update(original)
    for name in original:
        print(f"{name:>16}: {sum(seconds[name]):8.1f} s")
    added = sum(sum(seconds[name]) for name in CAPTUM_METRIC_NAMES)
    print(f"{'benchmark':>16}: {total:8.1f} s ({n} examples)")
    print(f"Captum's metrics add {added / (total - added):.1%} to the run without them")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--methods", nargs="+", default=None)
    args = parser.parse_args()
    main(args.n, args.methods)

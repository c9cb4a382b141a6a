#!/usr/bin/env python3
r"""The benchmark's paired timing: what a method costs on one batch, in forward
passes on the same batch, measured so that a busy machine changes it little.

Other work on the machine only ever slows a run down, by a different amount on
every call. The protocol therefore interleaves repetitions of the forward pass
and the method on the same batch, ``forward, method, forward, method, ...,
forward``, and divides the method's fastest run by the fastest forward pass:

.. math::

    r = \frac{\min_i t_\text{method}^{(i)}}{\min_j t_\text{forward}^{(j)}}

The forward pass is the one the method would be compared with by a user: the
same batch in one pass, or, for a method that can only take one prompt at a
time (Captum's ``LLMAttribution``/``LLMGradientAttribution``), each prompt of
the batch in a pass of its own, so that the ratio is always the method's time
per prompt over one forward per prompt at the method's batch size.

The forward pass runs at least twice (before and after the method), so one
disturbed forward no longer makes the method look cheap or dear. The method
repeats while its runs so far took at most :data:`REPEAT_BUDGET_SECONDS` on
the batch (at most :data:`MAX_ROUNDS` runs): cheap methods, whose short runs a
burst of load distorts most, get several; a method that costs tens of forward
passes runs once.

On a CPU the seconds are the process's CPU time (all its threads): the time it
waited for a core that other work held is not counted, which keeps a long
single run comparable to the fastest short forward pass
(``benchmarks/bench_timing.py`` measures both clocks); on an accelerator,
wall-clock time. The spread of the repetitions, ``max / min`` of either, says
how disturbed the machine was; above :data:`SPREAD_BOUND` the report flags the
number.
"""

import time
from dataclasses import dataclass, field
from typing import Any, Callable, List, Tuple

__all__ = [
    "MAX_ROUNDS",
    "PairedTiming",
    "REPEAT_BUDGET_SECONDS",
    "SPREAD_BOUND",
    "TIMING_PROTOCOL",
    "clock_for",
    "time_paired",
]

# Most runs of the method per batch, and the seconds its repetitions may take.
MAX_ROUNDS = 3
REPEAT_BUDGET_SECONDS = 2.0
# Repetitions of the same work more than this factor apart: a disturbed timing.
SPREAD_BOUND = 2.0

TIMING_PROTOCOL = (
    "CPU time of the process on a CPU, wall-clock time on an accelerator; "
    "each method was timed on every batch between forward passes on the same "
    f"batch, repeated while its runs took under {REPEAT_BUDGET_SECONDS:g} s (at most "
    f"{MAX_ROUNDS} runs), and the fastest run divided by the fastest forward "
    "pass, at the method's own batch size (a method that takes one prompt at a "
    "time, Captum's LLM API, against forward passes of one prompt each)"
)


def clock_for(device: Any) -> Callable[[], float]:
    r"""The clock that times work on ``device``: CPU seconds of this process on
    a CPU, wall-clock seconds elsewhere."""
    cpu = str(device).split(":")[0] == "cpu"
    return time.process_time if cpu else time.perf_counter


@dataclass
class PairedTiming:
    r"""The seconds of every forward pass and method run on one batch."""

    forward: List[float] = field(default_factory=list)
    method: List[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        r"""Fastest method run over fastest forward pass."""
        return min(self.method) / max(min(self.forward), 1e-9)

    @property
    def spread(self) -> float:
        r"""The larger ``max / min`` of the forward and the method runs (1.0:
        the repetitions agree)."""
        return max(max(t) / max(min(t), 1e-9) for t in (self.forward, self.method))


def time_paired(
    forward: Callable[[], Any],
    method: Callable[[], Any],
    clock: Callable[[], float] = time.perf_counter,
    budget: float = REPEAT_BUDGET_SECONDS,
) -> Tuple[Any, PairedTiming]:
    r"""Runs ``forward, method, forward`` and, while the method's runs and the
    forward passes after them took at most ``budget`` seconds and fewer than
    :data:`MAX_ROUNDS` method runs were made, ``method, forward`` again (the
    last round may end past the budget by one round).

    Args:
        forward (Callable): the batch's forward pass, no arguments.
        method (Callable): the method on the same batch, no arguments.
        clock (Callable, optional): seconds. Default: ``time.perf_counter``.
        budget (float, optional): seconds the repetitions may take. Default:
            :data:`REPEAT_BUDGET_SECONDS`.

    Returns:
        (the method's first output, the :class:`PairedTiming`).
    """
    timing = PairedTiming()

    def run(fn: Callable[[], Any], into: List[float]) -> Any:
        start = clock()
        out = fn()
        into.append(clock() - start)
        return out

    run(forward, timing.forward)
    output = run(method, timing.method)
    run(forward, timing.forward)
    spent = timing.method[-1] + timing.forward[-1]
    while len(timing.method) < MAX_ROUNDS and spent <= budget:
        run(method, timing.method)
        run(forward, timing.forward)
        spent += timing.method[-1] + timing.forward[-1]
    return output, timing

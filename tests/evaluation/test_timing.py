#!/usr/bin/env python3
r"""The paired timing protocol on a fake clock: load injected as slowed calls."""

import statistics
from typing import Callable, Dict, List, Sequence

import pytest
from captum_ext.evaluation.timing import (
    MAX_ROUNDS,
    PairedTiming,
    REPEAT_BUDGET_SECONDS,
    time_paired,
)

# Seconds of a batch's forward pass when the machine is quiet (batches differ in
# length), and of each method as a multiple of it.
FORWARDS = [0.05, 0.08, 0.12, 0.2, 0.3]
COSTS = {"cheap": 1.5, "moderate": 4.0, "dear": 40.0}
STEP = 1e-3  # seconds of work the fake machine runs at one load level


class FakeMachine:
    r"""A clock that only moves when work runs. ``load(now)`` is how many times
    slower work progresses at that moment: a call's duration is the time its
    work needs at that rate, so a long call shares its time with a burst of
    load and a short one may fall into it entirely. The calls numbered in
    ``slowed`` take 8x longer. ``calls`` counts them."""

    def __init__(
        self, load: Callable[[float], float], slowed: Sequence[int] = ()
    ) -> None:
        self.now, self.calls, self.load, self.slowed = 0.0, 0, load, slowed

    def __call__(self) -> float:
        return self.now

    def work(self, seconds: float) -> Callable[[], str]:
        def run() -> str:
            left = seconds * (8.0 if self.calls in self.slowed else 1.0)
            while left > 1e-12:
                step = min(left, STEP)
                self.now += step * self.load(self.now)
                left -= step
            self.calls += 1
            return "scores"

        return run


def job_ratios(machine: FakeMachine, protocol: Callable) -> Dict[str, List[float]]:
    r"""Every method's ratio on every batch, batch after batch."""
    return {
        name: [
            protocol(machine.work(f), machine.work(cost * f), machine) for f in FORWARDS
        ]
        for name, cost in COSTS.items()
    }


def disagreement(protocol: Callable) -> Dict[str, List[float]]:
    r"""``|loaded / quiet - 1|`` of every method's median ratio (the reported
    number, first) and of every batch's ratio."""
    idle = job_ratios(FakeMachine(quiet), protocol)
    loaded = job_ratios(FakeMachine(bursts), protocol)
    for name, cost in COSTS.items():
        assert idle[name] == pytest.approx([cost] * len(FORWARDS))
    return {
        name: [
            abs(loaded / quiet - 1)
            for quiet, loaded in zip(
                [statistics.median(idle[name])] + idle[name],
                [statistics.median(loaded[name])] + loaded[name],
            )
        ]
        for name in COSTS
    }


def protocol_ratio(forward, method, clock) -> float:
    output, timing = time_paired(forward, method, clock)
    assert output == "scores"
    return timing.ratio


def single_pair_ratio(forward, method, clock) -> float:
    r"""The protocol it replaced: one forward right before one method run."""
    start = clock()
    forward()
    middle = clock()
    method()
    return (clock() - middle) / (middle - start)


def quiet(now: float) -> float:
    return 1.0


def bursts(now: float) -> float:
    r"""Load as the issue saw it: bursts in which work runs 8x slower (a forward
    pass that took 4.1 s instead of 0.5 s), 0.5 s out of every 4 s."""
    return 8.0 if now % 4.0 < 0.5 else 1.0


def test_ratios_agree_within_15_percent_between_quiet_and_loaded():
    off = disagreement(protocol_ratio)
    assert max(off["dear"][0], off["moderate"][0], off["cheap"][0]) < 0.15
    # Repeated methods: every batch, whatever burst hit one of its runs.
    assert max(off["cheap"] + off["moderate"]) < 1e-9
    # A method that runs once shares its long run with the bursts (+10 %).
    assert max(off["dear"]) < 0.25


def test_the_single_pair_it_replaced_fails_the_same_check():
    off = disagreement(single_pair_ratio)
    assert max(off["cheap"] + off["moderate"]) > 0.5  # the check above can fail


def runs(machine: FakeMachine, forward: float, method: float) -> PairedTiming:
    r"""The protocol on one batch: ``forward`` and ``method`` seconds."""
    return time_paired(machine.work(forward), machine.work(method), machine)[1]


def test_repetitions_interleave_and_stop_at_the_round_cap():
    machine = FakeMachine(quiet)
    timing = runs(machine, 0.01, 0.02)
    assert len(timing.method) == MAX_ROUNDS
    assert len(timing.forward) == MAX_ROUNDS + 1  # forward first and last
    assert timing.ratio == pytest.approx(2.0) and timing.spread == pytest.approx(1.0)


def test_a_method_dearer_than_the_budget_runs_once_between_two_forwards():
    machine = FakeMachine(quiet)
    timing = runs(machine, 0.1, REPEAT_BUDGET_SECONDS)
    assert len(timing.method) == 1 and len(timing.forward) == 2
    assert machine.calls == 3


def test_the_budget_caps_repetitions_of_a_moderate_method():
    machine = FakeMachine(quiet)
    seconds = 0.6 * REPEAT_BUDGET_SECONDS  # a second run starts, a third not
    timing = runs(machine, 0.01, seconds)
    assert len(timing.method) == 2
    assert machine.now == pytest.approx(2 * seconds + 3 * 0.01)


@pytest.mark.parametrize(
    "slowed, spread",
    [
        ((), 1.0),
        ((0,), 8.0),  # the first forward pass
        ((1,), 8.0),  # the first method run
        ((0, 1, 2, 3), 8.0),  # the first two rounds
    ],
)
def test_the_minimum_ignores_slowed_repetitions_the_spread_shows_them(slowed, spread):
    timing = runs(FakeMachine(quiet, slowed), 0.01, 0.02)
    assert timing.ratio == pytest.approx(2.0)
    assert timing.spread == pytest.approx(spread)


def test_a_steady_load_changes_no_ratio():
    timing = runs(FakeMachine(lambda now: 3.0), 0.01, 0.02)
    assert timing.ratio == pytest.approx(2.0) and timing.spread == pytest.approx(1.0)

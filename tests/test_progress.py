#!/usr/bin/env python3
r"""The one progress reporter: plain lines in a log (never a carriage return),
each with the elapsed time and an ETA from the measured steps, at a steady
rhythm (every 30 s or every 5 %, whichever first; first and last always)."""

import io
import re
from typing import List

import pytest
from captum_ext._utils.progress import duration, EVERY_FRACTION, EVERY_SECONDS, Progress

STATUS = re.compile(
    r"^job: (\d+)/(\d+) steps, [\d.]+ steps/s, ETA (.+), (.+) elapsed(, .*)?$"
)


class Clock:
    r"""Advances only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(total: int, seconds_per_step: float, **kwargs) -> List[str]:
    stream, clock = io.StringIO(), Clock()
    with Progress(total, "job", stream=stream, clock=clock, **kwargs) as progress:
        for _ in range(total):
            clock.now += seconds_per_step
            progress.update(postfix="loss 0.50")
    text = stream.getvalue()
    assert "\r" not in text and "\x1b[" not in text
    return text.splitlines()


def _steps(lines: List[str]) -> List[int]:
    return [int(m.group(1)) for m in map(STATUS.match, lines) if m]


def test_lines_carry_elapsed_time_and_the_measured_eta():
    lines = _run(40, 2.0)
    assert lines[0] == "job: 40 steps"
    first = STATUS.match(lines[1])
    assert first is not None and first.group(1) == "1"
    # one step of 2 s measured, 39 left
    assert first.group(3) == duration(78) == "1 min 18 s"
    assert first.group(4) == "2 s" and lines[1].endswith(", loss 0.50")
    last = STATUS.match(lines[-2])
    assert last is not None and last.group(1) == "40"
    assert last.group(3) == "0 s" and last.group(4) == "1 min 20 s"
    assert lines[-1] == "job: 40 steps in 80.0 s"


def test_every_five_percent_when_steps_are_fast():
    steps = _steps(_run(200, 0.01))
    every = round(200 * EVERY_FRACTION)
    assert steps == [1] + list(range(every, 201, every))


def test_every_thirty_seconds_when_steps_are_slow():
    seconds = 1.0
    steps = _steps(_run(1000, seconds))
    assert steps[0] == 1 and steps[-1] == 1000
    gaps = [b - a for a, b in zip(steps, steps[1:])]
    # never quieter than 30 s nor than 5 % of the total
    assert max(gaps) * seconds <= EVERY_SECONDS
    assert max(gaps) <= 1000 * EVERY_FRACTION
    assert steps[1] == 1 + EVERY_SECONDS  # the 30 s rule, before 5 % (50 steps)


def test_disabled_and_summary_off():
    assert _run(10, 1.0, enabled=False) == []
    lines = _run(10, 1.0, summary=False)
    assert _steps(lines)[-1] == 10 and lines[-1].startswith("job: 10/10 steps")


def test_note_is_a_line_of_its_own():
    stream = io.StringIO()
    with Progress(3, "job", stream=stream, summary=False) as progress:
        progress.note("about 1 min left")
    assert stream.getvalue().splitlines() == ["job: 3 steps", "about 1 min left"]


@pytest.mark.parametrize(
    "seconds, text",
    [(0.4, "0 s"), (59, "59 s"), (61, "1 min 01 s"), (3725, "1 h 02 min")],
)
def test_duration(seconds, text):
    assert duration(seconds) == text

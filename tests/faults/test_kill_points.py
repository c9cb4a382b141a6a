#!/usr/bin/env python3
r"""``kill -9`` at every write of an attribution job, then the same command
again: the output equals an uninterrupted run's, exactly, and nothing is left
behind (``tests/faults/faults.py`` names the kill points)."""

import signal
from pathlib import Path

import pytest

from tests.faults.faults import (
    assert_same_output,
    attribute,
    in_child,
    KILL_POINTS,
    reference,
)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_killed_at_a_write_then_resumed(tmp_path, tmp_path_factory, point) -> None:
    expected = reference(tmp_path_factory)
    out = tmp_path / "out"
    child = in_child(lambda: attribute(out), point)
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    attribute(out)
    assert_same_output(out, expected)


def test_killed_twice_then_resumed(tmp_path: Path, tmp_path_factory) -> None:
    expected = reference(tmp_path_factory)
    out = tmp_path / "out"
    for point in ("torn-before-rename:3", "torn-before-rename:2"):
        child = in_child(lambda: attribute(out), point)
        child.join(timeout=120)
        assert child.exitcode == -signal.SIGKILL
    attribute(out)
    assert_same_output(out, expected)

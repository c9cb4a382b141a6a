#!/usr/bin/env python3
r"""One writer per output directory: a second run into a directory another run
is writing is refused at once, naming the holder, and touches nothing; the
first run then finishes normally. The lock of a run killed with ``kill -9`` is
taken over."""

import json
import multiprocessing
import os
import signal
import socket
from pathlib import Path

import pytest
from captum_ext.evaluation.attribute import OutputLockedError
from captum_ext.evaluation.attribute.lock import LOCK

from tests.faults.faults import assert_same_output, attribute, in_child, reference


def test_a_second_run_is_refused_while_the_first_writes(
    tmp_path: Path, tmp_path_factory
) -> None:
    expected = reference(tmp_path_factory)
    out = tmp_path / "out"
    context = multiprocessing.get_context("fork")
    paused, resume = context.Event(), context.Event()
    # The first run stops with its second shard written under its temporary name.
    first = in_child(lambda: attribute(out), "before-rename:3", (paused, resume))
    try:
        assert paused.wait(timeout=120)
        before = sorted(os.listdir(out))
        with pytest.raises(OutputLockedError) as refused:
            attribute(out)
        assert sorted(os.listdir(out)) == before  # its live temporary file too
        message = str(refused.value)
        assert f"process {first.pid} on host {socket.gethostname()}" in message
        assert "wait for it to finish, or choose another --out" in message
    finally:
        resume.set()
        first.join(timeout=120)
    assert first.exitcode == 0
    assert_same_output(out, expected)


def test_the_lock_of_a_killed_run_is_taken_over(
    tmp_path: Path, tmp_path_factory
) -> None:
    expected = reference(tmp_path_factory)
    out = tmp_path / "out"
    killed = in_child(lambda: attribute(out), "after-lock")
    killed.join(timeout=120)
    assert killed.exitcode == -signal.SIGKILL
    assert json.loads((out / LOCK).read_text())["pid"] == killed.pid
    attribute(out)
    assert json.loads((out / LOCK).read_text())["pid"] == os.getpid()
    assert_same_output(out, expected)

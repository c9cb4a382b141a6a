#!/usr/bin/env python3
r"""captum_ext.evaluation._utils.threads: the thread rule and where it takes effect."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from captum_ext.evaluation._utils.threads import (
    busy_elsewhere,
    configure_threads,
    free_cores,
)

ROOT = Path(__file__).resolve().parents[3]
CORES = len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    "load, threads",
    [(0.0, CORES), (CORES - 1.0, 1), (CORES + 8.0, 1), (CORES - 0.4, 1)],
)
def test_free_cores_is_the_cores_other_work_leaves_at_least_one(load, threads):
    assert free_cores(load) == threads


@pytest.mark.parametrize(
    "load, loadavg, busy",
    [
        (1.0, "1.00 0.60 0.30 1/180 42\n", 0.0),  # pip just ended: idle now
        (1.0, "1.00 0.60 0.30 2/180 42\n", 1.0),  # one other job, then and now
        (0.2, "0.20 0.10 0.05 3/180 42\n", 0.2),  # a burst now: not a minute
        (1.5, "garbled", 1.5),  # no runnable count: the load average alone
    ],
)
def test_busy_elsewhere_is_busy_for_the_last_minute_and_now(
    load, loadavg, busy, monkeypatch, tmp_path
):
    path = tmp_path / "loadavg"
    path.write_text(loadavg)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert busy_elsewhere(str(path)) == busy
    assert busy_elsewhere(str(tmp_path / "missing")) == load


def test_torch_already_imported_gets_the_count_and_user_settings_stay(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    try:
        assert configure_threads(load=CORES + 8.0) == 1
        assert torch.get_num_threads() == 1
        assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"  # the user's
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert configure_threads(load=0.0) == 3 and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_before_torch_is_imported_the_environment_carries_the_choice():
    code = (
        "import os, sys; "
        "from captum_ext.evaluation._utils.threads import configure_threads; "
        "n = configure_threads(load=100.0); assert 'torch' not in sys.modules; "
        "import torch; print(n, torch.get_num_threads(), os.environ['OMP_WAIT_POLICY'])"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.check_output([sys.executable, "-c", code], env=env, text=True)
    assert out.split() == ["1", "1", "PASSIVE"]

#!/usr/bin/env python3
r"""attribute_dataset under ``torchrun`` with 2 CPU processes (gloo on loopback):
the ranks' shards together equal a one-process run, and a run whose rank 1 is
killed resumes to the same result. Each launch is bounded by a timeout."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from captum_ext.evaluation.attribute.manifest import MANIFEST
from captum_ext.evaluation.distributed import distributed_context

from tests.evaluation import torchrun_job
from tests.helpers import save_tiny_model, TINY_TEXTS

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_SECONDS = 120
TEXTS_9 = TINY_TEXTS + ["bad bad bad", "the film", "it was not fun and not good at all"]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    r"""A saved model and data file, and the one-process output for them."""
    root = tmp_path_factory.mktemp("torchrun")
    model_dir = save_tiny_model(root / "model")
    data_file = root / "data.csv"
    labels = [["negative", "positive", "<mixed>"][i % 3] for i in range(9)]
    pd.DataFrame({"text": TEXTS_9, "label": labels}).to_csv(data_file, index=False)
    torchrun_job.run(str(model_dir), str(data_file), str(root / "single"))
    return model_dir, data_file, pd.read_parquet(root / "single")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun(model_dir: Path, data_file: Path, out: Path, **env: str):
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        str(ROOT / "tests" / "evaluation" / "torchrun_job.py"),
        str(model_dir),
        str(data_file),
        str(out),
    ]
    environment = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        command,
        env=environment,
        capture_output=True,
        text=True,
        timeout=LAUNCH_SECONDS,
    )


def test_two_ranks_equal_one_process(job, tmp_path: Path) -> None:
    model_dir, data_file, single = job
    done = torchrun(model_dir, data_file, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-3000:]
    shards = sorted(p.name for p in (tmp_path / "out").glob("part-*.parquet"))
    assert shards == [f"part-0000{k}.parquet" for k in range(5)]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out"), single, atol=1e-6)


def test_resume_after_a_rank_is_killed(job, tmp_path: Path) -> None:
    model_dir, data_file, single = job
    out = tmp_path / "out"
    killed = torchrun(model_dir, data_file, out, EXIT_AFTER_FIRST_SHARD="1")
    assert killed.returncode != 0
    survivors = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    # rank 1's first shard (shard 1) made it; the run did not finish
    assert "part-00001.parquet" in survivors and len(survivors) < 5
    assert (out / MANIFEST).exists()

    resumed = torchrun(model_dir, data_file, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for name, written_at in survivors.items():
        assert (out / name).stat().st_mtime_ns == written_at
    assert not list(out.glob(".*.tmp-*"))
    pd.testing.assert_frame_equal(pd.read_parquet(out), single, atol=1e-6)


def test_one_process_context_without_torchrun(monkeypatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with distributed_context("cpu") as context:
        assert (context.rank, context.world_size, context.is_main) == (0, 1, True)
        assert context.shard([4, 5, 6]) == [4, 5, 6]
        assert context.gather("x") == ["x"] and context.broadcast(7) == 7
        context.barrier()

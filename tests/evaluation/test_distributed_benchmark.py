#!/usr/bin/env python3
r"""``benchmark`` and the generation benchmark under ``torchrun``: 2 CPU processes
(gloo on loopback) give the one-process table and per-example values."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys
import torch
from captum_ext.evaluation.engine import benchmark
from tests.helpers import tiny_data
from tests.helpers import dump_rank_zero_result, tiny_labelled_bert, tiny_tokenizer

torch.set_num_threads(1)
result = benchmark(
    tiny_labelled_bert(), tiny_tokenizer(), tiny_data(6),
    ["AttCAT", "NormXLogit", "Random"], ["aopc", "kendall_tau"],
    task="tiny", batch_size=2, max_length=16, progress=False,
)
dump_rank_zero_result(result, result.examples["tiny"], "tokens", sys.argv[1])
"""


def _run(command, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLOO_SOCKET_IFNAME": "lo"}
    env.pop("WORLD_SIZE", None)
    result = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]


def _one_and_two_ranks(script_text, tmp_path):
    r"""The JSON the script writes in one process and on 2 ranks."""
    script = tmp_path / "bench.py"
    script.write_text(script_text)
    single, double = tmp_path / "one.json", tmp_path / "two.json"
    _run([sys.executable, str(script), str(single)], tmp_path)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    torchrun += ["--nnodes", "1", "--nproc-per-node", "2"]
    _run(torchrun + [str(script), str(double)], tmp_path)
    one, two = json.loads(single.read_text()), json.loads(double.read_text())
    assert (one["world"], two["world"]) == (1, 2)
    assert one["examples"] == two["examples"]
    for a, b in zip(one["scores"], two["scores"], strict=True):
        torch.testing.assert_close(
            torch.tensor(a), torch.tensor(b), rtol=1e-4, atol=1e-9
        )
    for a, b in zip(one["rows"], two["rows"], strict=True):
        assert a[:3] == b[:3]  # method, n, rows (in the same order)
        assert a[3] == pytest.approx(b[3], abs=1e-6, nan_ok=True)
        for column in a[4]:
            assert a[4][column] == pytest.approx(b[4][column], abs=1e-6, nan_ok=True)
    return [(a[5], b[5]) for a, b in zip(one["rows"], two["rows"])]


def test_two_ranks_equal_one_process(tmp_path):
    batches = _one_and_two_ranks(SCRIPT, tmp_path)
    assert set(batches) == {(3, 4)}  # 3 batches of 2; 2 ranks x 2 batches (2 + 1)


GENERATION_SCRIPT = """
import sys
import torch
from captum_ext.evaluation.engine.causal_lm import run_generation_benchmark
from captum_ext.evaluation.user_data import LoadedExamples
from captum_ext.evaluation.options import GenerationBenchmarkOptions
from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import dump_rank_zero_result, tiny_causal_lm

torch.set_num_threads(1)
data = LoadedExamples(
    "tiny", ["the cat sat on", "a mat", "the the cat sat on a", "on a mat", "a"],
    continuations=["a mat", "the cat sat", "mat", "the cat", "cat"],
    evidence=[[4, -1], [1, 2, -1], [5], [2, 3], [1]],
)
options = GenerationBenchmarkOptions(
    methods=["AttCAT", "FeatureAblation", "Random"], metrics=["aopc", "soft_nc"],
    batch_size=2, progress=False, task="tiny",
)
result = run_generation_benchmark(
    tiny_causal_lm("gpt2", dtype=torch.float64), tiny_lm_tokenizer(), data, options
)
dump_rank_zero_result(
    result, result.generation_examples["tiny"], "prompt_tokens", sys.argv[1]
)
"""


def test_generation_benchmark_two_ranks_equal_one_process(tmp_path):
    batches = _one_and_two_ranks(GENERATION_SCRIPT, tmp_path)
    assert set(batches) == {(3, 3)}  # 3 batches of 2; ranks of 3 and 2: 2 + 1

#!/usr/bin/env python3
r"""``benchmarks/bench_peers.py`` without any peer installed (none is here): it
prints a skip notice per peer and the captum_ext/Captum rows; a peer's scores
reach the generation benchmark on the benchmark's own positions. A tiny random
GPT-2 stands in for the default generator."""

import importlib.util

import pytest
import torch
from benchmarks import bench_peers
from captum_ext.evaluation.engine.causal_lm import run_generation_benchmark
from captum_ext.evaluation.options import GenerationBenchmarkOptions
from captum_ext.evaluation.user_data import LoadedExamples

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import tiny_causal_lm

PROMPTS = ["the cat sat on", "a mat", "on a mat"]
CONTINUATIONS = ["a mat", "the cat", "the"]
EVIDENCE = [[3, 2], [2, -1], [1]]


@pytest.fixture(scope="module")
def lm():
    return tiny_causal_lm("gpt2", dtype=torch.float64), tiny_lm_tokenizer()


@pytest.fixture
def tiny_task(lm, monkeypatch):
    def task(limit):
        data = LoadedExamples(
            "tiny prompts",
            PROMPTS[:limit],
            continuations=CONTINUATIONS[:limit],
            evidence=EVIDENCE[:limit],
        )
        return (*lm, data)

    monkeypatch.setattr(bench_peers, "recall_task", task)


def test_without_peers_it_prints_a_notice_each_and_the_other_rows(tiny_task, capsys):
    absent = [
        p
        for p in bench_peers.PEERS
        if importlib.util.find_spec(p.module.split(".")[0]) is None
    ]
    assert absent == list(bench_peers.PEERS)  # none of them is a dependency
    bench_peers.main(["--limit", "3", "--methods", "CAT", "FeatureAblation", "Random"])
    out = capsys.readouterr().out
    for peer in bench_peers.PEERS:
        assert f"skipped {peer.name}: {peer.distribution} is not installed" in out
    assert "transformers" in out and "captum" in out
    rows = [line.split()[0] for line in out.splitlines()[-3:]]
    assert sorted(rows) == ["CAT", "FeatureAblation", "Random"]


def test_a_peers_scores_are_placed_on_the_benchmarks_positions(lm):
    r"""A peer whose example scores the prompt position t + 1 for target t:
    its row's Evidence@1 is the share of evidence at those positions."""

    def build(model, tokenizer):
        def example(prompt, target):
            out = torch.zeros(len(target), len(prompt))
            for t in range(len(target)):
                out[t, min(t + 1, len(prompt) - 1)] = 1.0
            return out

        return example

    peer = bench_peers.Peer("fake peer", "torch", "torch", build)
    data = LoadedExamples(
        "tiny", PROMPTS, continuations=CONTINUATIONS, evidence=[[1, 2], [1, 2], [1]]
    )
    options = GenerationBenchmarkOptions(
        methods=[], task="tiny", progress=False, metrics=["aopc"], batch_size=2
    )
    model, tokenizer = lm
    spec = bench_peers.peer_spec(peer)
    result = run_generation_benchmark(model, tokenizer, data, options, [spec])
    (row,) = result.rows
    assert row.method == "fake peer" and row.family == "peer"
    assert row.metrics["Evidence@1"] == 1.0
    assert result.config["generation"]["tiny"]["one_prompt_at_a_time"] == ["fake peer"]


def test_prompt_rows_align_the_peers_tokens_with_or_without_bos():
    prompt, target = torch.tensor([1, 7, 8]), torch.tensor([9, 10])
    scores = torch.arange(10.0).reshape(5, 2)  # [sequence, steps]
    with_bos = bench_peers.prompt_rows(scores, [1, 7, 8, 9, 10], prompt, target)
    torch.testing.assert_close(with_bos, scores[:3].T)
    without = bench_peers.prompt_rows(scores[1:], [7, 8, 9, 10], prompt, target)
    torch.testing.assert_close(without[:, 0], torch.zeros(2))
    torch.testing.assert_close(without[:, 1:], scores[1:3].T)
    with pytest.raises(RuntimeError, match="not the benchmark's prompt"):
        bench_peers.prompt_rows(scores, [2, 7, 8, 9, 10], prompt, target)
    with pytest.raises(RuntimeError, match="explained 2 steps, not 1"):
        bench_peers.prompt_rows(scores, [1, 7, 8, 9, 10], prompt, target[:1])

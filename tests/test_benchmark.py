#!/usr/bin/env python3
r"""The benchmark engine on a tiny random BERT and a tiny WordPiece tokenizer, so
no real model is needed. ``tiny_task`` is shared with the CLI and report tests."""

import math
from pathlib import Path

import pytest
import torch
from captum_ext import benchmark, classifier_forward
from captum_ext.attr import EmbeddingDecoder
from captum_ext.benchmark import (
    explain_text,
    METHODS,
    METRICS,
    MetricValue,
    run_benchmark,
    TaskSetup,
)
from captum_ext.datasets import TextDataset
from captum_ext.metrics import aopc
from transformers import BertTokenizerFast

from tests.helpers import CLS_ID, PAD_ID, SEP_ID, tiny_classifier, VOCAB

WORDS = (
    "the a movie film good bad great awful not very fun boring plot acting it was "
    "is and love hate script < > & ! ."
).split()
TEXTS = [
    "the movie was great fun !",
    "a boring plot and bad acting .",
    "not very good",
    "i love it",
    "awful film , hate it",
    "the acting is very good and the plot is fun",
]
LABEL_NAMES = ["negative", "positive", "<mixed>"]


def tiny_tokenizer() -> BertTokenizerFast:
    r"""A WordPiece tokenizer whose ids match ``tests.helpers`` (PAD 0, UNK 1,
    CLS 2, SEP 3, MASK 4) and the tiny models' vocabulary size."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    vocab += [f"w{i}" for i in range(VOCAB - len(vocab))]
    tokenizer = BertTokenizerFast(vocab={word: i for i, word in enumerate(vocab)})
    assert (tokenizer.pad_token_id, tokenizer.cls_token_id) == (PAD_ID, CLS_ID)
    assert tokenizer.sep_token_id == SEP_ID
    return tokenizer


def tiny_model(num_labels: int = 3) -> torch.nn.Module:
    model = tiny_classifier("bert", num_labels=num_labels)
    model.config.id2label = dict(enumerate(LABEL_NAMES[:num_labels]))
    model.config.label2id = {name: i for i, name in model.config.id2label.items()}
    return model


def tiny_task(n: int = 4, name: str = "tiny") -> TaskSetup:
    data = TextDataset(TEXTS[:n], [i % 3 for i in range(n)], list(LABEL_NAMES))
    return TaskSetup(name, tiny_model(), tiny_tokenizer(), data, max_length=16)


def save_tiny_model(directory: Path) -> Path:
    r"""A local model directory as ``save_pretrained`` writes it."""
    tiny_model().save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    return directory


def embedding_decoders(model, tokenizer):
    r"""Stands in for the fitted decoders, which would be fitted on real text
    and cached: the tied input embeddings decode every layer."""
    return [EmbeddingDecoder(model)] * (model.config.num_hidden_layers + 1)


@pytest.fixture(autouse=True)
def no_decoder_fitting(monkeypatch):
    monkeypatch.setattr(benchmark, "decoders_for", embedding_decoders)


@pytest.fixture(scope="module")
def tiny_result():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(benchmark, "decoders_for", embedding_decoders)
        return run_benchmark([tiny_task(4)], batch_size=4, progress=False)


def test_registries_hold_the_new_methods_and_captum_baselines():
    for name in ("NormXLogit", "LogAt", "AttCAT", "CAT", "GlobEnc", "GlobEnc N_res"):
        assert METHODS[name].family == "captum_ext"
    assert METHODS["GlobEnc N"].family == "captum_ext"
    assert METHODS["Decoded Grad-CAM"].family == "captum_ext"
    for name in ("Saliency", "InputXGradient", "IntegratedGradients"):
        assert METHODS[name].family == "captum"
    assert METHODS["FeatureAblation"].family == "captum"
    assert METHODS["Random"].family == "control"
    for name in ("Attention", "Attention rollout", "Embedding norm"):
        assert METHODS[name].family == "baseline"
    names = ["aopc", "log_odds", "kendall_tau", "hiding_revealing", "sufficiency"]
    assert list(METRICS) == names
    columns = [c for name in names for c in METRICS[name].columns]
    assert columns == ["AOPC", "LOdds", "Kendall-tau", "Hide", "Reveal", "Sufficiency"]


def test_every_method_returns_one_score_per_position_zero_on_padding():
    task = tiny_task(3)
    encoded = task.tokenizer(list(task.data.texts), padding=True, return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    target = torch.tensor([0, 1, 2])
    for name, spec in METHODS.items():
        scores = spec.factory(task.model, task.tokenizer)(ids, mask, target)
        assert scores.shape == ids.shape, name
        assert torch.isfinite(scores).all(), name
        assert (scores[mask == 0] == 0).all(), name


def test_run_benchmark_reports_every_metric_and_finite_timings(tiny_result):
    rows = tiny_result.rows
    assert [row.method for row in rows] == list(METHODS)
    columns = [c for spec in METRICS.values() for c in spec.columns]
    assert list(tiny_result.metrics) == columns
    for row in rows:
        assert row.n == 4 and row.task == "tiny"
        assert list(row.metrics) == columns
        assert all(math.isfinite(v) for v in row.metrics.values()), row
        assert math.isfinite(row.time_ratio) and row.time_ratio > 0
        assert row.forward_seconds > 0
    assert tiny_result.wall_seconds > 0


def test_run_benchmark_keeps_curves_examples_and_layer_maps(tiny_result):
    row = tiny_result.rows[0]
    assert set(row.curves) == {"AOPC", "LOdds", "Hide", "Reveal", "Sufficiency"}
    grid, values = row.curves["AOPC"]
    assert len(grid) == len(values) > 1 and grid == sorted(grid)
    examples = tiny_result.examples["tiny"]
    assert len(examples) == 3
    assert examples[0].tokens[0] == "[CLS]" and examples[0].tokens[-1] == "[SEP]"
    assert set(examples[0].scores) == set(METHODS)
    assert all(len(s) == len(examples[0].tokens) for s in examples[0].scores.values())
    tokens, scores = tiny_result.layer_maps["tiny"]["AttCAT"]
    assert scores.shape == (2, len(tokens))  # blocks 1..L
    tokens, scores = tiny_result.layer_maps["tiny"]["Decoded Grad-CAM"]
    assert scores.shape == (3, len(tokens))  # hidden_states 0..L


def test_run_benchmark_subsets_and_rejects_unknown_names():
    result = run_benchmark(
        [tiny_task(2)], methods=["Random"], metrics=["hiding_revealing"], progress=False
    )
    assert [row.method for row in result.rows] == ["Random"]
    assert list(result.rows[0].metrics) == ["Hide", "Reveal"]
    with pytest.raises(ValueError, match="unknown method"):
        run_benchmark([tiny_task(2)], methods=["Nope"], progress=False)
    with pytest.raises(ValueError, match="unknown metric"):
        run_benchmark([tiny_task(2)], metrics=["Nope"], progress=False)


def test_metric_means_weight_examples_and_skip_nan(monkeypatch):
    def first_token_id(context, scores):
        values = context.input_ids[:, 1].double()
        values[0] = math.nan  # a skipped example must not count
        return {"first": MetricValue(values)}

    monkeypatch.setattr(benchmark, "METRICS", {})
    benchmark.register_metric("first", first_token_id, {"first": True})
    task = tiny_task(5)
    result = run_benchmark([task], methods=["Random"], batch_size=2, progress=False)
    ids = task.tokenizer(list(task.data.texts))["input_ids"]
    order = sorted(range(5), key=lambda i: len(ids[i]))
    # Batches of 2 by length; the first row of each batch is NaN.
    counted = [ids[i][1] for k, i in enumerate(order) if k % 2 == 1]
    assert result.rows[0].metrics["first"] == pytest.approx(sum(counted) / len(counted))


def test_register_rejects_duplicates():
    with pytest.raises(ValueError, match="already registered"):
        benchmark.register_method("Random", METHODS["Random"].factory, "control")


def paper_baseline(name: str, ids: torch.Tensor, mask: torch.Tensor):
    model = tiny_model()
    scores = METHODS[name].factory(model, tiny_tokenizer())(ids, mask, None)
    output = model(
        input_ids=ids,
        attention_mask=mask,
        output_attentions=True,
        output_hidden_states=True,
    )
    return scores, output


def test_attention_baselines_are_the_cls_row_of_head_averaged_weights():
    ids = torch.tensor([[CLS_ID, 7, 8, 9, SEP_ID], [CLS_ID, 10, SEP_ID, PAD_ID, 0]])
    mask = (torch.arange(5) < torch.tensor([[5], [3]])).long()
    last, output = paper_baseline("Attention", ids, mask)
    weights = [layer.mean(1).detach() for layer in output.attentions]
    torch.testing.assert_close(last, weights[-1][:, 0] * mask)
    rollout, _ = paper_baseline("Attention rollout", ids, mask)
    for b in range(2):  # naive: row 0 of W^L @ ... @ W^1, one example at a time
        product = torch.eye(5)
        for layer in weights:
            product = layer[b] @ product
        torch.testing.assert_close(rollout[b], product[0] * mask[b])
    assert rollout[1, 3:].abs().max() == 0  # pads get nothing


def test_embedding_norm_is_the_norm_of_hidden_states_0():
    ids = torch.tensor([[CLS_ID, 7, 8, SEP_ID]])
    scores, output = paper_baseline("Embedding norm", ids, torch.ones_like(ids))
    expected = output.hidden_states[0].norm(dim=-1).detach()
    torch.testing.assert_close(scores, expected)
    assert scores.min() > 0


def test_explain_text_scores_every_non_control_method():
    explanation = explain_text(tiny_model(), tiny_tokenizer(), "the movie was fun")
    assert explanation.tokens == ["[CLS]", "the", "movie", "was", "fun", "[SEP]"]
    expected = [n for n, s in METHODS.items() if s.family != "control"]
    assert list(explanation.scores) == expected
    assert 0 <= explanation.pred_class < 3 and explanation.target == (
        explanation.pred_class
    )
    assert explanation.label_names == LABEL_NAMES


def test_shared_forward_reuses_rows_and_matches_the_model():
    task = tiny_task(3)
    encoded = task.tokenizer(list(task.data.texts), padding=True, return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    forward = classifier_forward(task.model)
    calls = []

    def counting(input_ids, attention_mask):
        calls.append(len(input_ids))
        return forward(input_ids, attention_mask)

    shared = benchmark._SharedForward(counting)
    with torch.no_grad():
        expected = forward(ids, mask)
        assert torch.allclose(shared(ids, mask), expected, atol=1e-6)
        # Extra trailing padding is the same row; nothing runs again.
        wider = torch.nn.functional.pad(ids, (0, 2), value=PAD_ID)
        assert torch.allclose(shared(wider, (wider != PAD_ID).long()), expected)
    assert calls == [3]
    scores = torch.rand(ids.shape) * mask
    kwargs = dict(target=0, additional_forward_args=(mask,), special_token_ids=[0, 2])
    plain = aopc(forward, ids, scores, **kwargs)
    cached = aopc(shared, ids, scores, **kwargs)
    assert torch.allclose(plain.curve, cached.curve, atol=1e-6, equal_nan=True)

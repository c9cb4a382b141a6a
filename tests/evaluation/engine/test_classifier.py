#!/usr/bin/env python3
r"""The benchmark engine on a tiny random BERT and a tiny WordPiece tokenizer."""

import json
import math
import warnings
from typing import Any, Dict

import pytest
import torch
from captum_ext import classifier_forward
from captum_ext.attr import AttCAT
from captum_ext.evaluation import engine, registry
from captum_ext.evaluation.engine import benchmark, classifier
from captum_ext.evaluation.registry import (
    captum_metrics,
    METHODS,
    MethodSpec,
    METRICS,
    MetricSpec,
    MetricValue,
)
from captum_ext.evaluation.user_data import LoadedExamples
from captum_ext.metrics import aopc, TokenOptions

from tests.helpers import (
    embedding_decoders_in_registry,
    PAD_ID,
    tiny_data,
    tiny_labelled_bert,
    TINY_TEXTS,
    tiny_tokenizer,
)

FAST = ["NormXLogit", "AttCAT", "Saliency", "Attention", "Random"]
KENDALL = "Kendall-tau"


pytestmark = pytest.mark.usefixtures("no_decoder_fitting")


def run(data=None, **kwargs):
    kwargs.setdefault("progress", False)
    kwargs.setdefault("max_length", 16)
    model, tokenizer = tiny_labelled_bert(), tiny_tokenizer()
    return benchmark(model, tokenizer, data or tiny_data(4), task="tiny", **kwargs)


@pytest.fixture(scope="module")
def full_result():
    # module scope: no function fixture; sensitivity-max on every example
    with embedding_decoders_in_registry(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(captum_metrics, "SENSITIVITY_SHARE", 1)
        patch.setattr(captum_metrics, "INFIDELITY_SHARE", 1)
        return run(batch_size=4)


def test_every_method_and_metric_gives_finite_values_and_timings(full_result):
    rows = full_result.rows
    assert [row.method for row in rows] == list(METHODS)
    columns = [c for spec in METRICS.values() for c in spec.columns]
    assert list(full_result.metrics) == columns
    for row in rows:
        assert row.n == 4 and row.task == "tiny" and row.rows == [0, 1, 2, 3]
        applies = [c for c in columns if not (row.class_agnostic and c == KENDALL)]
        assert list(row.metrics) == applies
        assert all(math.isfinite(v) for v in row.metrics.values()), row
        assert math.isfinite(row.time_ratio) and row.time_ratio > 0
        assert len(row.ratios) == 1  # one batch of 4
        assert row.forward_seconds > 0
    assert full_result.wall_seconds > 0


def test_means_are_the_means_of_the_per_example_values(full_result):
    for row in full_result.rows:
        for column, values in row.per_example.items():
            assert len(values) == 4
            kept = [v for v in values if not math.isnan(v)]
            assert row.metrics[column] == pytest.approx(sum(kept) / len(kept))


def test_curves_examples_and_layer_maps(full_result):
    row = full_result.rows[0]
    assert set(row.curves) == {"AOPC", "LOdds", "Hide", "Reveal", "Sufficiency"}
    grid, values = row.curves["AOPC"]
    assert len(grid) == len(values) > 1 and grid == sorted(grid)
    examples = full_result.examples["tiny"]
    assert len(examples) == 3
    assert examples[0].tokens == [
        "[CLS]",
        "the",
        "movie",
        "was",
        "great",
        "fun",
        "!",
        "[SEP]",
    ]
    assert examples[1].true_class == 1
    assert set(examples[0].scores) == set(METHODS)
    assert all(len(s) == len(examples[0].tokens) for s in examples[0].scores.values())
    tokens, scores = full_result.layer_maps["tiny"]["AttCAT"]
    assert scores.shape == (2, len(tokens))  # blocks 1..L
    tokens, scores = full_result.layer_maps["tiny"]["Decoded Grad-CAM"]
    assert scores.shape == (3, len(tokens))  # hidden_states 0..L


def test_values_do_not_depend_on_batching():
    # Padding invariance: one batch of 6 or batches of 2 give the same values.
    data = tiny_data(6)
    options = dict(methods=["NormXLogit", "AttCAT"], metrics=["aopc", "sufficiency"])
    one = run(data, batch_size=6, **options)
    pairs = run(data, batch_size=2, **options)
    for a, b in zip(one.rows, pairs.rows, strict=True):
        for column in a.per_example:
            torch.testing.assert_close(
                torch.tensor(a.per_example[column]),
                torch.tensor(b.per_example[column]),
                atol=1e-5,
                rtol=1e-5,
                equal_nan=True,
            )
        assert len(b.ratios) == 3


def test_subsets_fit_nothing_unneeded_and_reject_unknown_names(monkeypatch):
    def no_decoders(model, tokenizer, texts):
        raise AssertionError("decoders fitted for methods that need none")

    monkeypatch.setattr(registry.methods, "decoders_for", no_decoders)
    result = run(tiny_data(2), methods=["Random"], metrics=["hiding_revealing"])
    assert [row.method for row in result.rows] == ["Random"]
    assert list(result.rows[0].metrics) == ["Hide", "Reveal"]
    assert result.layer_maps["tiny"] == {}  # no map of a method not chosen
    with pytest.raises(ValueError, match="unknown method"):
        run(tiny_data(2), methods=["Nope"])
    with pytest.raises(ValueError, match="unknown metric"):
        run(tiny_data(2), metrics=["Nope"])
    with pytest.raises(ValueError, match="no method chosen"):
        run(tiny_data(2), methods=[])


def first_token_id(context, scores):
    values = context.input_ids[:, 1].double()
    values[0] = math.nan  # a skipped example must not count
    return {"first": MetricValue(values)}


def test_metric_means_weight_examples_and_skip_nan(monkeypatch):
    monkeypatch.setitem(
        METRICS, "first", MetricSpec("first", first_token_id, {"first": True})
    )
    data = tiny_data(5)
    result = run(data, methods=["Random"], metrics=["first"], batch_size=2)
    ids = tiny_tokenizer()(data.texts)["input_ids"]
    order = sorted(range(5), key=lambda i: len(ids[i]))
    # Batches of 2 by length; the first row of each batch is NaN.
    counted = [ids[i][1] for k, i in enumerate(order) if k % 2 == 1]
    assert result.rows[0].metrics["first"] == pytest.approx(sum(counted) / len(counted))


def test_gold_label_metrics_say_when_the_data_has_no_labels(monkeypatch):
    spec = MetricSpec("gold", first_token_id, {"gold": True}, needs_labels=True)
    monkeypatch.setitem(METRICS, "gold", spec)
    with pytest.raises(ValueError, match="gold labels and the data has none"):
        run(tiny_data(2, labels=False), methods=["Random"], metrics=["gold"])
    unlabelled = run(tiny_data(2, labels=False), methods=["Random"], metrics=["aopc"])
    assert unlabelled.examples["tiny"][0].true_class is None


class FakeClock:
    r"""Time that moves only when the fake forward or method runs."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_paired_timings_survive_a_slow_forward_on_one_batch(monkeypatch):
    clock = FakeClock()
    forward = classifier_forward(tiny_labelled_bert())
    slow_width = 9  # only "a boring plot and bad acting ." has 9 tokens

    def timed_forward(input_ids, attention_mask=None, token_type_ids=None):
        clock.now += 100.0 if input_ids.shape[1] == slow_width else 1.0
        return forward(input_ids, attention_mask)

    def method_costing(units):
        def factory(model, tokenizer):
            def explain(input_ids, attention_mask, target, token_type_ids=None):
                clock.now += units
                return attention_mask.float()

            return explain

        return factory

    monkeypatch.setattr(classifier, "clock_for", lambda device: clock)
    monkeypatch.setattr(
        classifier, "_forward_for", lambda model, tokenizer: timed_forward
    )
    monkeypatch.setitem(
        METHODS, "Three", MethodSpec("Three", method_costing(3.0), "captum")
    )
    monkeypatch.setitem(
        METHODS, "Half", MethodSpec("Half", method_costing(0.5), "captum")
    )
    monkeypatch.setitem(
        METRICS, "first", MetricSpec("first", first_token_id, {"first": True})
    )
    result = run(
        tiny_data(5), methods=["Three", "Half"], metrics=["first"], batch_size=1
    )
    three, half = result.rows
    assert sorted(three.ratios) == [0.03, 3.0, 3.0, 3.0, 3.0]
    assert three.time_ratio == 3.0 and not three.timing_suspect
    assert three.seconds / three.forward_seconds < 0.2  # what totals would say
    assert half.time_ratio == 0.5 and half.timing_suspect  # flagged, not a cost


def test_text_pairs_are_encoded_with_segments():
    data = tiny_data(3, pairs=True)
    result = run(data, methods=["AttCAT", "Saliency"], metrics=["aopc"], max_length=32)
    tokens = result.examples["tiny"][0].tokens
    assert tokens.count("[SEP]") == 2
    assert all(math.isfinite(row.metrics["AOPC"]) for row in result.rows)


def test_layer_maps_of_text_pairs_keep_their_segments():
    data = tiny_data(3, pairs=True)
    result = run(data, methods=["AttCAT"], metrics=["aopc"], max_length=32)
    tokens, layers = result.layer_maps["tiny"]["AttCAT"]  # layers: [layers, pos]
    row = [e.tokens for e in result.examples["tiny"]].index(tokens)
    shown = result.examples["tiny"][row]
    assert data.text_pairs is not None
    encoded = tiny_tokenizer()(
        data.texts[row], data.text_pairs[row], return_tensors="pt"
    )
    assert encoded["token_type_ids"].sum() > 0  # a second segment exists
    method = AttCAT(tiny_labelled_bert())
    ids, types = encoded["input_ids"], encoded["token_type_ids"]
    target = torch.tensor([shown.target])
    args = (torch.ones_like(ids), types)
    with_segments = method.attribute(ids, target, args, return_layers=True)[0]
    torch.testing.assert_close(layers, with_segments)
    without = method.attribute(ids, target, return_layers=True)[0]  # segment 0 only
    assert not torch.allclose(layers, without)


def test_truncation_is_counted_and_warned():
    long = LoadedExamples(
        "long",
        [" ".join(["good"] * 40), "bad"],
        labels=[1, 0],
        label_names=["negative", "positive"],
    )
    with pytest.warns(UserWarning, match="1 of 2 texts were cut to max_length=8"):
        result = run(long, methods=["Random"], metrics=["aopc"], max_length=8)
    assert result.config["truncated"] == {"tiny": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(tiny_data(2), methods=["Random"], metrics=["aopc"])


def test_rows_are_the_data_row_ids_and_label_names_fall_back_to_the_model():
    data = tiny_data(3, labels=False)
    data.rows, data.label_names = [10, 11, 15], None
    result = run(data, methods=["Random"], metrics=["aopc"])
    assert result.rows[0].rows == [10, 11, 15]
    assert [r["row"] for r in result.per_example()] == [10, 11, 15]
    assert result.examples["tiny"][0].label_names == ["negative", "positive", "<mixed>"]


def test_results_write_csv_and_json(tmp_path):
    result = run(tiny_data(3), methods=["NormXLogit", "Random"], metrics=["aopc"])
    table = result.to_csv(tmp_path / "table.csv").read_text().splitlines()
    assert table[0] == (
        "task,method,family,n,AOPC,class_agnostic,no_signal,time_ratio,timing_suspect,"
        "seconds,forward_seconds"
    )
    assert len(table) == 3
    per_example = result.to_csv(tmp_path / "rows.csv", per_example=True)
    assert len(per_example.read_text().splitlines()) == 1 + 2 * 3
    document = json.loads(result.to_json(tmp_path / "r.json").read_text())
    assert [r["method"] for r in document["table"]] == ["NormXLogit", "Random"]
    assert {r["row"] for r in document["per_example"]} == {0, 1, 2}
    assert document["table"][0]["AOPC"] == pytest.approx(result.rows[0].metrics["AOPC"])
    assert not list(tmp_path.glob(".*tmp"))


def test_shared_forward_reuses_rows_and_matches_the_model():
    tokenizer = tiny_tokenizer()
    encoded = tokenizer(TINY_TEXTS[:3], padding=True, return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    forward = classifier_forward(tiny_labelled_bert())
    calls = []

    def counting(input_ids, attention_mask, token_type_ids=None):
        calls.append(len(input_ids))
        return forward(input_ids, attention_mask)

    shared = engine.SharedForward(counting)
    with torch.no_grad():
        expected = forward(ids, mask)
        assert torch.allclose(shared(ids, mask), expected, atol=1e-6)
        # Extra trailing padding is the same row; nothing runs again.
        wider = torch.nn.functional.pad(ids, (0, 2), value=PAD_ID)
        assert torch.allclose(shared(wider, (wider != PAD_ID).long()), expected)
    assert calls == [3]
    scores = torch.rand(ids.shape) * mask
    kwargs: Dict[str, Any] = dict(
        target=0,
        additional_forward_args=(mask,),
        tokens=TokenOptions(special_token_ids=[0, 2]),
    )
    plain = aopc(forward, ids, scores, **kwargs)
    cached = aopc(shared, ids, scores, **kwargs)
    assert torch.allclose(plain.curve, cached.curve, atol=1e-6, equal_nan=True)


def test_batch_size_follows_the_one_chunk_size_rule():
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        run(methods=["Random"], metrics=["aopc"], batch_size=0)
    with pytest.raises(TypeError, match="batch_size must be a positive int"):
        run(methods=["Random"], metrics=["aopc"], batch_size=2.5)


def test_kendall_tau_of_a_class_agnostic_method_is_missing_not_one(tmp_path):
    result = run(methods=["Attention", "AttCAT"], metrics=["kendall_tau", "aopc"])
    table = {row["method"]: row for row in result.table()}
    assert math.isnan(table["Attention"][KENDALL])  # was 1.0 by construction
    assert math.isfinite(table["AttCAT"][KENDALL])
    assert KENDALL not in result.rows[0].per_example
    with open(result.to_csv(tmp_path / "results.csv"), encoding="utf-8") as handle:
        assert "Attention,baseline,4,nan," in handle.read()
    document = json.loads(result.to_json(tmp_path / "results.json").read_text())
    attention = document["table"][0]
    assert attention["method"] == "Attention" and attention[KENDALL] is None


def test_no_signal_flags_examples_whose_every_row_is_constant():
    real = torch.tensor([[0, 1, 1, 1, 0], [0, 1, 1, 0, 0], [0, 1, 0, 0, 0]])
    scores = torch.tensor(
        [
            [9.0, 2.0, 2.0, 2.0, -5.0],  # constant on the ranked tokens
            [0.0, 0.0, 1e-7, 0.0, 0.0],  # a tiny difference is still a ranking
            [4.0, 3.0, 0.0, 0.0, 0.0],  # one ranked token: nothing to tie
        ]
    )
    assert engine.no_signal(scores, real).tolist() == [True, False, False]
    # [batch, T, pos]: constant only when every target row is.
    rows = torch.stack([scores[0], scores[0] + torch.tensor([0.0, 0, 0, 1, 0])])
    both = torch.stack([torch.stack([scores[0], scores[0] * 2]), rows])
    assert engine.no_signal(both, real[[0, 0]]).tolist() == [True, False]
    ids = torch.tensor([[101, 7, 8, 102]])
    mask = engine.ranked_tokens(ids, torch.ones_like(ids), [101, 102])
    assert mask.tolist() == [[0, 1, 1, 0]]


def zero_on_even_rows(model, tokenizer):
    def explain(input_ids, attention_mask, target, token_type_ids=None):
        scores = torch.rand(input_ids.shape, generator=torch.Generator().manual_seed(0))
        scores[::2] = 0.0  # no signal on rows 0 and 2 of each batch
        return scores * attention_mask

    return explain


def test_constant_explanations_are_left_out_of_every_metric_and_counted(monkeypatch):
    spec = MethodSpec("Flat", zero_on_even_rows, "captum_ext")
    monkeypatch.setitem(METHODS, "Flat", spec)
    result = run(tiny_data(4), methods=["Flat"], metrics=["aopc", "sufficiency"])
    row = result.rows[0]
    flat = [row.rows[i] for i in range(4) if i % 2 == 0]  # batch of 4, rows 0, 2
    assert sorted(row.constant) == sorted(flat) and len(flat) == 2
    for column, values in row.per_example.items():
        by_row = dict(zip(row.rows, values))
        assert all(math.isnan(by_row[r]) for r in flat), column
        kept = [v for r, v in by_row.items() if r not in flat]
        assert all(math.isfinite(v) for v in kept)
        assert row.metrics[column] == pytest.approx(sum(kept) / len(kept))
    assert [r["no_signal"] for r in result.table()] == [2]
    records = result.per_example()
    assert [r["row"] for r in records if r["no_signal"]] == sorted(flat)

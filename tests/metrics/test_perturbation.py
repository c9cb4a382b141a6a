#!/usr/bin/env python3
r"""Behaviour shared by the perturbation-curve metrics: what is perturbed, how
inputs are re-packed, how many forward passes are run, and input errors."""

from typing import Union

import pytest
import torch
from captum_ext import classifier_forward
from captum_ext.metrics import (
    aopc,
    hiding_revealing,
    HidingRevealingResult,
    log_odds,
    MetricResult,
    PerturbationProtocol,
    sufficiency,
    TokenOptions,
)

from tests.helpers import PAD_ID, tiny_labelled_bert, tiny_tokenizer
from tests.metrics.toys import (
    bag_of_words,
    batch_with_scores,
    gold_labels,
    PERTURBATION_METRICS,
    PRESET_CASES,
    protocol,
    run_metric,
    SPECIALS,
    TOKENS,
)


class Recorder:
    r"""A bag-of-words forward that records every call."""

    def __init__(self, num_labels=3):
        self.model = bag_of_words(num_labels)
        self.calls = []

    def __call__(self, input_ids, attention_mask, token_type_ids=None):
        self.calls.append((input_ids, attention_mask, token_type_ids))
        return self.model(input_ids, attention_mask)


def _result(output: Union[MetricResult, HidingRevealingResult]) -> MetricResult:
    return output.hiding if isinstance(output, HidingRevealingResult) else output


@pytest.mark.parametrize("metric,preset", PRESET_CASES)
@pytest.mark.parametrize("pad_side", ["right", "left"])
def test_specials_and_padding_never_perturbed(metric, preset, pad_side):
    forward = Recorder()
    batch = batch_with_scores((12, 5, 10, 3), pad_side=pad_side)
    batch["scores"][batch["special"]] = 100.0  # ranked first, yet never touched
    run_metric(metric, forward, batch, preset=preset, **gold_labels(metric, batch))
    for input_ids, mask, _ in forward.calls:
        for row_ids, row_mask in zip(input_ids, mask):
            attended = row_ids[row_mask.bool()].tolist()
            # Every row keeps its [CLS] and [SEP] (NormXLogit may mask [SEP]),
            # attended, and no [PAD] is attended (but by [PAD] replacement).
            assert attended.count(2) == 1
            assert attended.count(3) == 1 or preset == "normxlogit"
            if preset != "attcat" or metric is not log_odds:
                assert PAD_ID not in attended
            if pad_side == "left":
                assert bool(row_mask[-1])


@pytest.mark.parametrize("metric,preset", PRESET_CASES)
@pytest.mark.parametrize("chunk", [None, 1, 5])
def test_cost_is_levels_plus_one_passes(metric, preset, chunk):
    forward = Recorder()
    batch = batch_with_scores((12, 5, 10, 11, 14, 9, 10), seed=2)
    labels = gold_labels(metric, batch)
    result = _result(run_metric(metric, forward, batch, chunk, preset=preset, **labels))
    levels = len(result.levels) * (2 if metric is hiding_revealing else 1)
    rows = [len(call[0]) for call in forward.calls]
    assert sum(rows) <= 7 * (levels + 1)
    assert max(rows) <= (chunk or 7)
    if chunk is None:
        assert len(rows) <= levels + 1


def test_deletion_repacks_token_types_and_trims():
    forward = Recorder()
    batch = batch_with_scores((9, 6), pad_side="left", seed=4)
    types = batch["input_ids"] % 2  # a type that identifies its token
    aopc(
        forward,
        batch["input_ids"],
        batch["scores"],
        None,
        (batch["attention_mask"], types),
        preset=protocol("aopc", levels=[0.5]),
        tokens=TOKENS,
    )
    input_ids, mask, token_types = forward.calls[-1]
    attended = mask.bool()
    assert torch.equal(token_types[attended], input_ids[attended] % 2)
    # 7 and 4 content tokens lose round(3.5) = 4 and 2: 5 and 4 real tokens left.
    assert mask.sum(1).tolist() == [5, 4] and mask.shape[1] == 5
    assert (input_ids[~attended] == 0).all()


def test_mask_and_pad_replacement():
    forward = Recorder()
    batch = batch_with_scores((8,), seed=5)
    pad = PerturbationProtocol(levels=(0.5,), mode="pad", attend_replaced=False)
    aopc(
        forward,
        batch["input_ids"],
        batch["scores"],
        None,
        batch["attention_mask"],
        preset=pad,
        tokens=TokenOptions(pad_token_id=7, special_token_ids=SPECIALS),
    )
    input_ids, mask, _ = forward.calls[-1]
    top = batch["scores"][0, 1:7].argsort(descending=True)[:3] + 1
    assert (input_ids[0, top] == 7).all() and (mask[0, top] == 0).all()
    assert int((input_ids == 7).sum()) == 3 and int(mask.sum()) == 5


@pytest.mark.parametrize("metric", PERTURBATION_METRICS)
def test_single_token_inputs(metric):
    batch = {
        "input_ids": torch.tensor([[10], [11]]),
        "attention_mask": torch.ones(2, 1, dtype=torch.long),
        "scores": torch.tensor([[1.0], [-1.0]]),
        "special": torch.zeros(2, 1, dtype=torch.bool),
    }
    result = _result(
        run_metric(metric, Recorder(2), batch, **gold_labels(metric, batch))
    )
    assert torch.isfinite(result.score).all()


def test_special_ids_equal_special_mask():
    batch = batch_with_scores((12, 5, 10), seed=6)
    forward = bag_of_words(2)
    args = (forward, batch["input_ids"], batch["scores"], None, batch["attention_mask"])
    by_mask = aopc(*args, tokens=TokenOptions(special_tokens_mask=batch["special"]))
    by_ids = aopc(*args, tokens=TOKENS)
    torch.testing.assert_close(by_mask.curve, by_ids.curve)


def test_target_none_is_the_prediction():
    batch = batch_with_scores((12, 5, 10), seed=7)
    forward = bag_of_words(3)
    with torch.no_grad():
        predicted = forward(batch["input_ids"], batch["attention_mask"]).argmax(-1)
    args = (forward, batch["input_ids"], batch["scores"])
    mask = batch["attention_mask"]
    torch.testing.assert_close(
        aopc(*args, None, mask).curve, aopc(*args, predicted, mask).curve
    )


def test_input_errors_are_clear():
    batch = batch_with_scores((6, 4))
    ids, scores, mask = batch["input_ids"], batch["scores"], batch["attention_mask"]
    forward = bag_of_words(2)
    with pytest.raises(TypeError, match="integer token ids"):
        aopc(forward, ids.float(), scores, None, mask)
    with pytest.raises(ValueError, match="attention_mask has shape"):
        aopc(forward, ids, scores, None, mask[:, :-1])
    with pytest.raises(ValueError, match="only 0"):
        aopc(forward, ids, scores, None, mask * 2)
    with pytest.raises(ValueError, match="no attended token"):
        aopc(forward, ids, scores, None, mask * torch.tensor([[1], [0]]))
    with pytest.raises(ValueError, match="one tensor of token ids"):
        aopc(forward, (ids, ids), scores, None, mask)
    with pytest.raises(ValueError, match="NaN"):
        aopc(forward, ids, scores.masked_fill(mask.bool(), float("nan")), None, mask)
    with pytest.raises(ValueError, match="internal_batch_size"):
        aopc(forward, ids, scores, None, mask, internal_batch_size=0)
    with pytest.raises(ValueError, match=r"logits \[batch, classes\]"):
        aopc(lambda i, m: forward(i, m)[:, 0], ids, scores, None, mask)


def test_progress_bar(capsys):
    batch = batch_with_scores((6, 4))
    aopc(
        bag_of_words(2),
        batch["input_ids"],
        batch["scores"],
        None,
        batch["attention_mask"],
        show_progress=True,
    )
    assert "AOPC" in capsys.readouterr().err


@pytest.mark.parametrize(
    "metric", ["aopc", "sufficiency", "log_odds", "hiding", "revealing"]
)
def test_an_example_with_no_perturbable_token_is_not_scored(metric):
    r"""Only special and unknown tokens ("x" is unknown to the tiny vocabulary):
    every level would leave the input as it is, a "perfect" 0.0 or 1.0."""
    tokenizer = tiny_tokenizer()
    call = {"aopc": aopc, "sufficiency": sufficiency, "log_odds": log_odds}.get(
        metric, hiding_revealing
    )

    def score(texts):
        encoded = tokenizer(texts, padding=True, return_tensors="pt")
        ids, mask = encoded["input_ids"], encoded["attention_mask"]
        torch.manual_seed(0)
        result = call(
            classifier_forward(tiny_labelled_bert()),
            ids,
            torch.rand(ids.shape),
            additional_forward_args=(mask,),
            tokens=TokenOptions.from_tokenizer(tokenizer),
        )
        if isinstance(result, HidingRevealingResult):
            result = result.hiding if metric == "hiding" else result.revealing
        return result.score

    both = score(["the movie was fun", "x"])
    assert torch.isnan(both[1]) and torch.isfinite(both[0])
    assert both[0] == score(["the movie was fun"])[0]

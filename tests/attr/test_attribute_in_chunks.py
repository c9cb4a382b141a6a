#!/usr/bin/env python3
import pytest
import torch
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.attr._utils.attribute_in_chunks import attribute_in_chunks
from torch import nn

MODEL = nn.Dropout().eval()  # the model whose eval semantics the chunks run in


def _batch(size: int = 5, pos: int = 4) -> TokenBatch:
    ids = torch.arange(size * pos).view(size, pos)
    return TokenBatch(ids, torch.ones_like(ids))


def _echo(batch, target, **options):
    r"""Scores = the ids (as floats) plus the chunk's target and offset option,
    so every chunk's slice can be read back; logits = zeros."""
    scores = batch.input_ids.float()
    if target is not None:
        scores = scores + torch.as_tensor(target, dtype=torch.float)[:, None]
    if "offset" in options:
        scores = scores + options["offset"].float()[:, None]
    return scores, torch.zeros(len(scores), 2)


@pytest.mark.parametrize("chunk", [None, 1, 2, 5, 7])
def test_chunks_slice_the_batch_the_target_and_per_example_options(chunk):
    batch = _batch()
    target, offset = [0, 1, 2, 3, 4], torch.tensor([10, 20, 30, 40, 50])
    scores = attribute_in_chunks(
        MODEL, batch, target, chunk, _echo, "Echo", offset=offset
    )
    expected = batch.input_ids.float() + torch.tensor([10.0, 21, 32, 43, 54])[:, None]
    assert torch.equal(scores, expected)


def test_a_target_of_the_wrong_length_is_refused_before_chunking():
    with pytest.raises(ValueError, match="target has 2 entries but the batch has 5"):
        attribute_in_chunks(MODEL, _batch(), [0, 1], 2, _echo, "Echo")


@pytest.mark.parametrize("chunk", [None, 1, 2])
def test_non_finite_attributions_name_the_callers_example(chunk):
    r"""Finite logits but an inf score in example 3: the error names example 3,
    not its row in a chunk."""

    def infinite_in_example_3(batch, target):
        scores = batch.input_ids.float()
        scores[batch.input_ids[:, 0] == 12] = float("inf")  # example 3's first id
        return scores, torch.zeros(len(scores), 2)

    match = r"Echo's attributions contain NaN or inf for example\(s\) \[3\]"
    with pytest.raises(FloatingPointError, match=match):
        attribute_in_chunks(MODEL, _batch(), None, chunk, infinite_in_example_3, "Echo")


def test_chunks_run_in_eval_semantics_and_the_mode_comes_back():
    model = nn.Sequential(nn.Dropout()).train()

    def mode_of_model(batch, target):
        scores = torch.full(batch.input_ids.shape, float(model[0].training))
        return scores, torch.zeros(len(scores), 2)

    with pytest.warns(UserWarning, match="training mode"):
        scores = attribute_in_chunks(model, _batch(), None, 2, mode_of_model, "Mode")
    assert torch.equal(scores, torch.zeros(5, 4))  # eval inside every chunk
    assert model.training and model[0].training

#!/usr/bin/env python3
r"""The metrics' forward passes (metrics/_utils/forward_runner.py): non-finite logits
name the examples of the caller's batch, whatever the chunking, and large finite
half-precision logits of one example's rows in one chunk are not mistaken for an
overflow."""

import pytest
import torch
from captum_ext.metrics import aopc

from tests.helpers import VOCAB
from tests.metrics.toys import batch_with_scores, run_metric

LENGTHS = (6, 4, 7, 5)
MARKED = VOCAB - 1  # a token id only example 2 holds, kept as a special token


def _marked_batch():
    batch = batch_with_scores(LENGTHS)
    batch["input_ids"][2, 2] = MARKED
    batch["special"][2, 2] = True  # never perturbed: every row of example 2 has it
    return batch


def _half_forward(scale: float, nan_for_marked: bool = False):
    r"""float16 logits ``[rows, 2]`` of magnitude ``scale``, NaN on the rows that
    hold :data:`MARKED` if asked."""

    def forward(input_ids, attention_mask):
        length = attention_mask.sum(-1).float()  # [rows]
        logits = torch.stack([length, -length], -1) / length.max() * scale
        logits = logits.half()
        if nan_for_marked:
            logits[(input_ids == MARKED).any(-1)] = float("nan")
        return logits

    return forward


@pytest.mark.parametrize("chunk", [None, 3, 1, 40])
def test_nan_logits_name_the_example_of_the_batch(chunk):
    forward = _half_forward(10.0, nan_for_marked=True)
    with pytest.raises(FloatingPointError, match=r"for example\(s\) \[2\];"):
        run_metric(aopc, forward, _marked_batch(), chunk)


def test_large_finite_half_logits_of_one_example_are_not_an_overflow():
    # A chunk of 40 rows holds several levels of each example: their logits of
    # 40,000 would sum past float16's largest value, 65,504.
    batch = _marked_batch()
    result = run_metric(aopc, _half_forward(40_000.0), batch, chunk=40)
    assert torch.isfinite(result.score).all()

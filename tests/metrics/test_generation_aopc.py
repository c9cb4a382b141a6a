#!/usr/bin/env python3
import dataclasses
import math

import pytest
import torch
from captum_ext.metrics import generation_aopc, get_protocol

from tests.metrics.generation_reference import (
    bos_case,
    check_bad_inputs,
    check_invariances,
    LEVELS,
    naive_hard,
    run,
)

PROTOCOL = dataclasses.replace(get_protocol("generation_aopc"), levels=LEVELS)


def _drop(base: float, perturbed: float) -> float:
    return math.exp(base) - math.exp(perturbed)


@pytest.mark.parametrize("shared", [False, True])
def test_equals_naive_loop(shared) -> None:
    case = bos_case()
    attributions = case["attr"].sum(1) if shared else case["attr"]
    got = run(generation_aopc, case, attributions=attributions, preset=PROTOCOL)
    expected = naive_hard(case, keep_top=False, value=_drop, shared=shared)
    torch.testing.assert_close(
        got.score.double(), expected, equal_nan=True, rtol=0, atol=1e-6
    )
    torch.testing.assert_close(
        got.sequence.double(), expected.nan_to_num().sum(1), rtol=0, atol=1e-6
    )
    assert got.curve.shape == (*expected.shape, len(LEVELS))


def test_padding_and_internal_batch_size() -> None:
    check_invariances(generation_aopc, preset=PROTOCOL)


def test_bad_inputs() -> None:
    check_bad_inputs(generation_aopc)
    case = bos_case()
    case["ids"][:, :] = torch.where(case["mask"].bool(), 7, 0)  # no BOS left
    with pytest.raises(ValueError, match="lose every prompt token"):
        run(generation_aopc, case)

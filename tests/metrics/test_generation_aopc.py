#!/usr/bin/env python3
import math

import pytest
import torch
from captum_ext.metrics import generation_aopc

from tests.metrics.generation_reference import (
    bos_case,
    check_hard_equals_naive,
    LEVELS,
    run,
)


def _drop(base: float, perturbed: float) -> float:
    return math.exp(base) - math.exp(perturbed)


@pytest.mark.parametrize("shared", [False, True])
def test_equals_naive_loop(shared) -> None:
    got, expected = check_hard_equals_naive(generation_aopc, False, _drop, shared)
    torch.testing.assert_close(
        got.sequence.double(), expected.nan_to_num().sum(1), rtol=0, atol=1e-6
    )
    assert got.curve.shape == (*expected.shape, len(LEVELS))


def test_a_prompt_emptied_by_deletion_raises() -> None:
    case = bos_case()
    case["ids"][:, :] = torch.where(case["mask"].bool(), 7, 0)  # no BOS left
    with pytest.raises(ValueError, match="lose every prompt token"):
        run(generation_aopc, case)

#!/usr/bin/env python3
import math

import pytest
import torch
from captum_ext.metrics import generation_soft_ns

from tests.metrics.generation_reference import (
    bos_case,
    check_bad_inputs,
    check_invariances,
    naive_soft,
    run,
)


def soft_ns(log_p: float, log_soft: float, log_empty: float) -> float:
    p, soft, empty = math.exp(log_p), math.exp(log_soft), math.exp(log_empty)
    normaliser = max(0.0, p - empty)  # 1 - S(x, 0)
    if normaliser == 0:
        return math.nan
    sufficiency, empty_sufficiency = 1 - max(0.0, p - soft), 1 - normaliser
    return min(1.0, max(0.0, (sufficiency - empty_sufficiency) / normaliser))


def test_equals_naive_loop() -> None:
    case = bos_case()
    got = run(generation_soft_ns, case, n_samples=2, seed=3)
    expected = naive_soft(case, True, soft_ns, n_samples=2, seed=3)
    assert bool(expected.isfinite().any())
    torch.testing.assert_close(
        got.score.double(), expected, equal_nan=True, rtol=0, atol=1e-6
    )


def test_padding_and_internal_batch_size() -> None:
    check_invariances(generation_soft_ns, n_samples=2)


def test_bad_inputs() -> None:
    check_bad_inputs(generation_soft_ns)
    case = bos_case()
    with pytest.raises(TypeError, match="causal_lm_forward"):
        model = case["model"]
        generation_soft_ns(
            lambda ids, mask: model(input_ids=ids, attention_mask=mask).logits,
            case["ids"],
            case["attr"],
            case["target"],
            (case["mask"],),
        )
    with pytest.raises(ValueError, match="n_samples"):
        run(generation_soft_ns, case, n_samples=0)

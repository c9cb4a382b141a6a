#!/usr/bin/env python3
import math

from captum_ext.metrics import generation_sufficiency

from tests.metrics.generation_reference import check_hard_equals_naive


def test_equals_naive_loop() -> None:
    got, _ = check_hard_equals_naive(
        generation_sufficiency,
        True,
        lambda base, kept: math.exp(base) - math.exp(kept),
    )
    # Keeping every token changes nothing: the last level is exactly 0.
    assert bool((got.curve[..., -1].nan_to_num() == 0).all())

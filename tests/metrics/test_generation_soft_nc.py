#!/usr/bin/env python3
import math

from captum_ext.metrics import generation_soft_nc

from tests.metrics.generation_reference import check_soft_equals_naive


def soft_nc(log_p: float, log_soft: float, log_empty: float) -> float:
    p, soft, empty = math.exp(log_p), math.exp(log_soft), math.exp(log_empty)
    normaliser = max(0.0, p - empty)  # 1 - S(x, 0)
    if normaliser == 0:
        return math.nan
    return min(1.0, max(0.0, p - soft) / normaliser)


def test_equals_naive_loop() -> None:
    check_soft_equals_naive(generation_soft_nc, False, soft_nc)

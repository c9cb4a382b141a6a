#!/usr/bin/env python3
import dataclasses
import math

import torch
from captum_ext.metrics import generation_sufficiency, get_protocol

from tests.metrics.generation_reference import (
    bos_case,
    check_bad_inputs,
    check_invariances,
    LEVELS,
    naive_hard,
    run,
)

PROTOCOL = dataclasses.replace(get_protocol("generation_sufficiency"), levels=LEVELS)


def test_equals_naive_loop() -> None:
    case = bos_case()
    got = run(generation_sufficiency, case, preset=PROTOCOL)
    expected = naive_hard(
        case, keep_top=True, value=lambda base, kept: math.exp(base) - math.exp(kept)
    )
    torch.testing.assert_close(
        got.score.double(), expected, equal_nan=True, rtol=0, atol=1e-6
    )
    # Keeping every token changes nothing: the last level is exactly 0.
    assert bool((got.curve[..., -1].nan_to_num() == 0).all())


def test_padding_and_internal_batch_size() -> None:
    check_invariances(generation_sufficiency, preset=PROTOCOL)


def test_bad_inputs() -> None:
    check_bad_inputs(generation_sufficiency)

#!/usr/bin/env python3
import math

from captum_ext.metrics import generation_sufficiency

from tests.metrics.generation_reference import (
    bos_case,
    check_scores,
    hard_protocol,
    naive_hard,
    run,
)

PROTOCOL = hard_protocol("generation_sufficiency")


def test_equals_naive_loop() -> None:
    case = bos_case()
    got = run(generation_sufficiency, case, preset=PROTOCOL)
    expected = naive_hard(
        case, keep_top=True, value=lambda base, kept: math.exp(base) - math.exp(kept)
    )
    check_scores(got, expected)
    # Keeping every token changes nothing: the last level is exactly 0.
    assert bool((got.curve[..., -1].nan_to_num() == 0).all())

#!/usr/bin/env python3
import dataclasses

import pytest
import torch
from captum_ext.metrics import generation_log_odds, TokenOptions

from tests.metrics.generation_reference import (
    bos_case,
    check_hard_equals_naive,
    check_scores,
    hard_protocol,
    naive_hard,
    run,
)

PROTOCOL = hard_protocol("generation_log_odds")


def test_equals_naive_loop() -> None:
    check_hard_equals_naive(generation_log_odds, False, lambda base, cut: cut - base)


def test_shared_ranking_sums_to_the_sequence_log_ratio() -> None:
    r"""With one ranking for all targets, ``sequence`` is the mean over levels of
    log p(y | x~) - log p(y | x)."""
    case = bos_case()
    got = run(
        generation_log_odds, case, attributions=case["attr"].sum(1), preset=PROTOCOL
    )
    per_level = got.curve.nan_to_num().sum(1)  # [batch, levels]
    torch.testing.assert_close(got.sequence, per_level.mean(1))


def test_replacement_by_a_given_id() -> None:
    case = bos_case()
    replace = dataclasses.replace(PROTOCOL, mode="mask")
    tokens = TokenOptions(mask_token_id=9, special_token_ids=[1])
    got = run(generation_log_odds, case, preset=replace, tokens=tokens)
    expected = naive_hard(
        case, keep_top=False, value=lambda base, cut: cut - base, replace_id=9
    )
    check_scores(got, expected)
    with pytest.raises(ValueError, match="mask_token_id"):
        run(generation_log_odds, case, preset=replace)

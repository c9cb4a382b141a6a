#!/usr/bin/env python3
r"""What every faithfulness metric of generated text guarantees, run on each:
the same scores under more left padding and any ``internal_batch_size``, and a
clear error for each bad input."""

import pytest
from captum_ext.metrics import (
    generation_aopc,
    generation_log_odds,
    generation_soft_nc,
    generation_soft_ns,
    generation_sufficiency,
)

from tests.metrics.generation_reference import (
    bos_case,
    check_bad_inputs,
    check_invariances,
    check_nothing_to_perturb_is_nan,
    hard_protocol,
    logits_of,
    run,
)

HARD = (generation_aopc, generation_sufficiency, generation_log_odds)
SOFT = (generation_soft_nc, generation_soft_ns)


def _name(metric) -> str:
    return metric.__name__


@pytest.mark.parametrize("metric", HARD, ids=_name)
def test_hard_padding_and_internal_batch_size(metric) -> None:
    check_invariances(metric, preset=hard_protocol(metric.__name__))


@pytest.mark.parametrize("metric", SOFT, ids=_name)
def test_soft_padding_and_internal_batch_size(metric) -> None:
    check_invariances(metric, n_samples=2)


@pytest.mark.parametrize("metric", HARD + SOFT, ids=_name)
def test_bad_inputs(metric) -> None:
    check_bad_inputs(metric)


@pytest.mark.parametrize("metric", HARD + SOFT, ids=_name)
def test_a_prompt_with_nothing_to_perturb_scores_nan(metric) -> None:
    options = {"n_samples": 2} if metric in SOFT else {}
    check_nothing_to_perturb_is_nan(metric, **options)


@pytest.mark.parametrize("metric", SOFT, ids=_name)
def test_soft_bad_inputs(metric) -> None:
    case = bos_case()
    with pytest.raises(TypeError, match="causal_lm_forward"):
        run(metric, case, forward_func=logits_of(case["model"]), tokens=None)
    with pytest.raises(ValueError, match="n_samples"):
        run(metric, case, n_samples=0)

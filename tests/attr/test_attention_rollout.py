#!/usr/bin/env python3
from functools import partial

import pytest
import torch
from captum_ext.attr import AttentionRollout, LastLayerAttention
from captum_ext.attr._utils.rollout import rollout_products, rollout_row

from tests.attr.baseline_checks import (
    assert_equals_naive_per_example,
    assert_target_validated_but_ignored,
)
from tests.attr.token_method_checks import attribute
from tests.helpers import (
    ALL_FAMILIES,
    CAUSAL_FAMILIES,
    continuation_batch,
    is_causal,
    tiny_causal_lm,
    tiny_classifier,
    token_batch,
)


def naive_rollout(model, input_ids, causal):
    r"""One unpadded example ``[1, n]``: row ``p`` of ``W^L ... W^1``, every
    ``W^l`` the head average of layer ``l``'s attention, multiplied entry by
    entry in Python loops (``p`` = last token for causal models, else first)."""
    attentions = model(input_ids=input_ids, output_attentions=True).attentions
    n = input_ids.shape[1]
    product = [[float(i == j) for j in range(n)] for i in range(n)]
    for layer in attentions:
        weights = layer[0].mean(0).tolist()  # [query, key]
        product = [
            [sum(weights[i][k] * product[k][j] for k in range(n)) for j in range(n)]
            for i in range(n)
        ]
    return torch.tensor(product[n - 1 if causal else 0], dtype=torch.float64)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_equals_naive_per_example_product(family):
    naive = partial(naive_rollout, causal=is_causal(family))
    assert_equals_naive_per_example(AttentionRollout, family, naive)


def test_differs_from_the_last_layer_alone():
    # a product of row-stochastic matrices is row-stochastic: the rollout is a
    # distribution too, but not the last layer's
    model = tiny_classifier("electra")
    batch = token_batch()
    rolled = attribute(AttentionRollout(model), batch)
    last = attribute(LastLayerAttention(model), batch)
    torch.testing.assert_close(rolled.sum(-1), torch.ones(3))
    assert (rolled - last).abs().max() > 1e-3


def test_target_validated_but_ignored():
    assert_target_validated_but_ignored(AttentionRollout, "gpt2")


# ---------------------------------------------------------------- shared rollout
def _random_matrices(layers=3, batch=2, pos=5):
    generator = torch.Generator().manual_seed(0)
    return [
        torch.rand(batch, pos, pos, generator=generator, dtype=torch.float64)
        for _ in range(layers)
    ]


def test_rollout_products_are_the_partial_products():
    matrices = _random_matrices()
    rolled = rollout_products(matrices)
    assert len(rolled) == 3
    torch.testing.assert_close(rolled[0], matrices[0])
    torch.testing.assert_close(rolled[1], matrices[1] @ matrices[0])
    torch.testing.assert_close(rolled[2], matrices[2] @ matrices[1] @ matrices[0])


def test_rollout_row_reads_the_last_product():
    matrices = _random_matrices()
    position = torch.tensor([4, 1])
    row = rollout_row(matrices, position)
    last = rollout_products(matrices)[-1]
    torch.testing.assert_close(row, last[torch.arange(2), position])
    # one layer: the row itself
    torch.testing.assert_close(
        rollout_row(matrices[:1], position), matrices[0][torch.arange(2), position]
    )


def test_rollout_rows_keep_every_bit_of_the_plain_product():
    # Powers of two scale exactly: the carried rows' rescaling changes nothing.
    generator = torch.Generator().manual_seed(1)
    matrices = [
        torch.rand(2, 6, 6, generator=generator) * 30.0 for _ in range(8)
    ]  # float32, products up to ~1e13
    position = torch.tensor([5, 2])
    plain = matrices[-1][torch.arange(2), position][:, None]  # [batch, 1, pos]
    for matrix in reversed(matrices[:-1]):
        plain = plain @ matrix
    assert torch.equal(rollout_row(matrices, position), plain[:, 0])


def test_rollout_rows_past_the_dtype_range_come_back_scaled_with_a_warning():
    generator = torch.Generator().manual_seed(2)
    matrices = [
        torch.rand(1, 5, 5, generator=generator, dtype=torch.float64) * 1e3
        for _ in range(20)
    ]  # products near 1e60: past float32 (3.4e38), not float64
    position = torch.tensor([3])
    exact = rollout_row(matrices, position)  # float64
    assert exact.isfinite().all() and exact.max() > 1e50
    with pytest.warns(UserWarning, match="exceeds torch.float32's range"):
        scaled = rollout_row([m.float() for m in matrices], position)
    assert 0.5 <= float(scaled.abs().max()) < 1.0
    # one positive factor per row: the same row, divided by a power of two
    factor = exact.abs().max() / scaled.double().abs().max()
    assert float(torch.log2(factor)) == pytest.approx(round(float(torch.log2(factor))))
    torch.testing.assert_close(scaled.double() * factor, exact, rtol=1e-5, atol=0)


def test_rollout_rejects_no_or_mismatched_matrices():
    with pytest.raises(ValueError, match="at least one"):
        rollout_products([])
    with pytest.raises(ValueError, match="one shape"):
        rollout_row([torch.ones(2, 3, 3), torch.ones(2, 4, 4)], torch.zeros(2))


@pytest.mark.parametrize("method", [LastLayerAttention, AttentionRollout])
@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
def test_causal_lm_rows_are_the_predicting_positions(family, method):
    r"""Row t of a causal LM's scores is the naive formula's row at the
    predicting position of y_t on prompt + y_<t (one unpadded example at a
    time), over the prompt and the generated tokens before y_t. The batch runs
    on sdpa: Llama's eager attention gives NaN on left-padded rows in float64."""
    model = tiny_causal_lm(family, dtype=torch.float64)
    sdpa = tiny_causal_lm(family, dtype=torch.float64, attn_implementation="sdpa")
    batch = continuation_batch((5, 3, 7), (3, 1, 2))
    scores = method(sdpa).attribute(
        batch["input_ids"],
        target=batch["target"],
        additional_forward_args=(batch["attention_mask"],),
        attribute_generated=True,
    )  # [batch, T, P + T]
    naive = naive_rollout if method is AttentionRollout else _naive_last_layer
    prompt_width = batch["input_ids"].shape[1]
    for row, real in enumerate(batch["attention_mask"].bool()):
        prompt = batch["input_ids"][row, real]
        steps = batch["target"][row][batch["target"][row] != -100]
        for t in range(len(steps)):
            ids = torch.cat([prompt, steps[:t]])[None]
            expected = naive(model, ids, causal=True)  # [P_i + t]
            got = torch.cat(
                [scores[row, t, :prompt_width][real], scores[row, t, prompt_width:][:t]]
            )
            # Llama-style eager attention takes its softmax in float32.
            torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-12)
            assert float(scores[row, t].sum()) == pytest.approx(1.0)


def _naive_last_layer(model, input_ids, causal):
    attention = model(input_ids=input_ids, output_attentions=True).attentions[-1]
    return attention[0, :, -1].mean(0)

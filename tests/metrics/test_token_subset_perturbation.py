#!/usr/bin/env python3
r"""TokenSubsetPerturbation: which tokens a draw replaces, draws that follow the
row (not its padding, batch or chunk), and Captum's infidelity and
sensitivity_max with it equal to naive loops over examples and draws."""

from typing import Any, Callable, Optional, Tuple

import pytest
import torch
from captum.metrics import infidelity, sensitivity_max
from captum_ext.metrics import TokenSubsetPerturbation
from torch import Tensor

from tests.helpers import PAD_ID, token_batch
from tests.metrics.toys import bag_of_words, lively_forward, MASK_ID, TOKENS

LENGTHS = (7, 3, 9, 5)


def _perturb(**options) -> TokenSubsetPerturbation:
    return TokenSubsetPerturbation(MASK_ID, tokens=TOKENS, **options)


def _perturbed(perturb: TokenSubsetPerturbation, input_ids: Tensor) -> Tensor:
    r"""The perturbed ids alone (``indicator=False``)."""
    perturbed = perturb(input_ids)
    assert isinstance(perturbed, Tensor)
    return perturbed


def _content(input_ids: Tensor) -> Tensor:
    r"""[CLS] and [SEP] frame every row; the rest is content or padding."""
    return (input_ids != PAD_ID) & (input_ids >= 5)


@pytest.mark.parametrize("size", [None, 2])
def test_replaces_content_tokens_only(size: Optional[int]) -> None:
    input_ids = token_batch(LENGTHS)["input_ids"].repeat(20, 1)
    indicator, perturbed = _perturb(size=size)(input_ids)
    chosen = indicator.bool()
    assert not bool((chosen & ~_content(input_ids)).any())
    assert torch.equal(perturbed[chosen], torch.full_like(perturbed[chosen], MASK_ID))
    assert torch.equal(perturbed[~chosen], input_ids[~chosen])
    counts = chosen.sum(1)
    if size is None:  # each content token with probability 1/2
        share = counts.sum() / _content(input_ids).sum()
        assert 0.4 < float(share) < 0.6
        assert len(set(counts.tolist())) > 2  # subsets of varying size
    else:
        assert torch.equal(counts, _content(input_ids).sum(1).clamp(max=size))


def _replaced(row: Tensor, perturbed: Tensor) -> Tuple[int, ...]:
    r"""Indices, among the row's non-padding tokens, of those replaced."""
    kept = row != PAD_ID
    return tuple((perturbed[kept] != row[kept]).nonzero().flatten().tolist())


def test_draws_follow_the_row_not_its_padding_or_batch() -> None:
    right = token_batch(LENGTHS)["input_ids"]
    left = token_batch(LENGTHS, pad_side="left")["input_ids"]
    alone = [right[b : b + 1, : LENGTHS[b]] for b in range(len(LENGTHS))]
    by_batch = [_perturbed(_perturb(indicator=False), ids) for ids in (right, left)]
    for b, row in enumerate(alone):
        single = _replaced(row[0], _perturbed(_perturb(indicator=False), row)[0])
        assert single == _replaced(right[b], by_batch[0][b])
        assert single == _replaced(left[b], by_batch[1][b])


def test_draws_continue_across_calls() -> None:
    row = token_batch((12,))["input_ids"]
    perturb = _perturb(indicator=False)
    one_call = _perturbed(_perturb(indicator=False), row.repeat(6, 1))
    calls = torch.cat([_perturbed(perturb, row.repeat(n, 1)) for n in (1, 2, 3)])
    assert torch.equal(one_call, calls)
    assert len({tuple(r.tolist()) for r in one_call}) > 3  # draws differ


def _probabilities(forward: Callable[..., Tensor]) -> Callable[..., Tensor]:
    return lambda ids, mask: forward(ids, mask).double().softmax(-1)


def _naive_infidelity(
    f: Callable[..., Tensor],
    batch: dict,
    scores: Tensor,
    target: Tensor,
    n: int,
    normalize: bool,
) -> Tensor:
    r"""Yeh et al.'s infidelity one example and one draw at a time: the mean of
    :math:`(\beta \Phi^T I - (f(x) - f(\tilde x)))^2`, :math:`\beta` the least
    squares scale (1 without ``normalize``)."""
    perturb, values = _perturb(), []
    for b in range(len(target)):
        ids, mask = batch["input_ids"][b : b + 1], batch["attention_mask"][b : b + 1]
        f_x = f(ids, mask)[0, target[b]]
        explained, changes = [], []
        for _ in range(n):
            indicator, perturbed = perturb(ids)
            explained.append((scores[b] * indicator[0]).sum())
            changes.append(f_x - f(perturbed, mask)[0, target[b]])
        a, d = torch.stack(explained), torch.stack(changes)
        beta = (a * d).sum() / (a * a).sum() if normalize else 1.0
        values.append(((beta * a - d) ** 2).mean())
    return torch.stack(values)


@pytest.mark.parametrize("model", ["bow", "bert"])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("chunk", [None, 4])
def test_infidelity_equals_naive_loop(
    model: str, normalize: bool, chunk: Optional[int]
) -> None:
    f = _probabilities(bag_of_words(3) if model == "bow" else lively_forward(model))
    batch = token_batch(LENGTHS)
    scores = torch.randn(batch["input_ids"].shape, generator=torch.Generator())
    scores = scores.double()
    target = torch.tensor([0, 2, 1, 2])
    n = 5
    value = infidelity(
        f,
        _perturb(),
        batch["input_ids"],
        scores,
        additional_forward_args=(batch["attention_mask"],),
        target=target,
        n_perturb_samples=n,
        max_examples_per_batch=chunk,
        normalize=normalize,
    )
    expected = _naive_infidelity(f, batch, scores, target, n, normalize)
    torch.testing.assert_close(value, expected, rtol=1e-6, atol=1e-9)
    # Row 1 has one content token: with normalize, beta fits its two subsets.
    assert bool((expected[[0, 2, 3]] > 0).all())


def _explanation(inputs, additional_forward_args, target) -> Any:
    r"""A context-dependent toy explanation: each token's weight for the
    target class minus the row's mean weight (padding 0); a tuple for a tuple
    of inputs, as Captum's methods answer."""
    ids = inputs[0] if isinstance(inputs, tuple) else inputs
    (mask,) = additional_forward_args
    weights = bag_of_words(3).weights[ids, target[:, None]] * mask
    scores = (weights - weights.sum(1, keepdim=True) / mask.sum(1, keepdim=True)) * mask
    return (scores,) if isinstance(inputs, tuple) else scores


@pytest.mark.parametrize("chunk", [None, 4])
def test_sensitivity_max_equals_naive_loop(chunk: Optional[int]) -> None:
    batch = token_batch(LENGTHS)
    target = torch.tensor([0, 2, 1, 2])
    n = 5
    value = sensitivity_max(
        _explanation,
        batch["input_ids"],
        _perturb(size=1, indicator=False),
        n_perturb_samples=n,
        max_examples_per_batch=chunk,
        additional_forward_args=(batch["attention_mask"],),
        target=target,
    )
    perturb, expected = _perturb(size=1, indicator=False), []
    for b in range(len(target)):
        ids, mask = batch["input_ids"][b : b + 1], batch["attention_mask"][b : b + 1]
        original = _explanation(ids, (mask,), target[b : b + 1])
        changes = [
            (_explanation(perturb(ids), (mask,), target[b : b + 1]) - original).norm()
            / original.norm()
            for _ in range(n)
        ]
        expected.append(torch.stack(changes).max())
    torch.testing.assert_close(value, torch.stack(expected))
    assert bool((value > 0).all())


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(probability=0.0), "probability"),
        (dict(probability=1.5), "probability"),
        (dict(size=0), "size"),
    ],
)
def test_bad_options_are_refused(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _perturb(**options)


def test_special_tokens_mask_is_refused() -> None:
    tokens = type(TOKENS)(MASK_ID, PAD_ID, special_tokens_mask=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="special_tokens_mask"):
        TokenSubsetPerturbation(MASK_ID, tokens=tokens)

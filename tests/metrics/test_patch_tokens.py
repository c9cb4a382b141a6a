#!/usr/bin/env python3
r"""PatchTokens: the token metrics and Captum's infidelity / sensitivity_max on
a vision transformer's images by masking patches, equal to hand loops that
mask the patches of one image at a time (float64 tiny random ViT); the class
token is never removed."""

from dataclasses import replace
from typing import Any, Callable, List

import numpy as np
import pytest
import torch
from captum.metrics import infidelity, sensitivity_max
from captum_ext.attr import CAT
from captum_ext.metrics import (
    aopc,
    get_protocol,
    kendall_tau,
    log_odds,
    PatchTokens,
    sufficiency,
    TokenSubsetPerturbation,
)
from scipy.stats import kendalltau
from torch import Tensor

from tests.helpers import tiny_vision

PATCH = 4
SIZE = 12  # a 3 x 3 patch grid: 9 patches, ten levels with distinct counts


def _setup(family: str = "vit") -> Any:
    model = tiny_vision(family, image_size=SIZE)
    torch.manual_seed(1)
    pixels = torch.randn(3, 3, SIZE, SIZE, dtype=torch.float64)
    return model, pixels


def _logits(model: Any) -> Callable[[Tensor], Tensor]:
    def forward(pixel_values: Tensor) -> Tensor:
        return model(pixel_values=pixel_values).logits

    return forward


def _masked(image: Tensor, patches: List[int]) -> Tensor:
    r"""``image`` ``[C, H, W]`` with the listed patches (row by row) zeroed."""
    out = image.clone()
    cols = SIZE // PATCH
    for p in patches:
        r, c = divmod(p, cols)
        out[:, r * PATCH : (r + 1) * PATCH, c * PATCH : (c + 1) * PATCH] = 0
    return out


def _prob(model: Any, image: Tensor, target: int) -> float:
    with torch.no_grad():
        return float(_logits(model)(image[None]).float().softmax(-1)[0, target])


def _order(patch_scores: Tensor) -> List[int]:
    return list(np.argsort(-patch_scores.numpy(), kind="stable"))


def _hand_curve(
    model: Any, image: Tensor, scores: Tensor, target: int, keep_top: bool
) -> List[float]:
    r"""Probabilities of ``target`` with the top ``round(g * n)`` patches
    masked (``keep_top``: every patch but them masked), g = 0.1 ... 1.0."""
    order = _order(scores[1:])
    n = len(order)
    curve = []
    for g in [i / 10 for i in range(1, 11)]:
        k = int(np.round(g * n))
        masked = order[k:] if keep_top else order[:k]
        curve.append(_prob(model, _masked(image, masked), target))
    return curve


@pytest.mark.parametrize("mode", ["delete", "mask", "pad"])
def test_aopc_log_odds_sufficiency_equal_a_hand_loop(mode: str) -> None:
    model, pixels = _setup()
    target = torch.tensor([0, 2, 3])
    scores = CAT(model).attribute(pixels, target=target)  # [3, 1 + 9]
    view = PatchTokens(pixels, PATCH)
    forward = view.forward_func(_logits(model))
    # The three metrics share the default protocol.
    protocol = replace(get_protocol("aopc"), mode=mode)
    results = {
        name: metric(
            forward, view.input_ids, scores, target, preset=protocol, tokens=view.tokens
        ).score
        for name, metric in (
            ("aopc", aopc),
            ("log_odds", log_odds),
            ("sufficiency", sufficiency),
        )
    }
    for b in range(3):
        t = int(target[b])
        base = _prob(model, pixels[b], t)
        removed = _hand_curve(model, pixels[b], scores[b], t, keep_top=False)
        kept = _hand_curve(model, pixels[b], scores[b], t, keep_top=True)
        expected = {
            "aopc": np.mean([base - p for p in removed]),
            "log_odds": np.mean([np.log(p) - np.log(base) for p in removed]),
            "sufficiency": np.mean([base - p for p in kept]),
        }
        for name, value in expected.items():
            assert float(results[name][b]) == pytest.approx(value, abs=2e-6)
    assert float(results["aopc"].abs().sum()) > 0


def test_kendall_tau_equals_scipy_on_the_patch_rankings() -> None:
    model, pixels = _setup()
    view = PatchTokens(pixels, PATCH)
    method = CAT(model)

    def explain(target: Tensor) -> Tensor:
        return method.attribute(pixels, target=target)

    taus = kendall_tau(
        view.forward_func(_logits(model)),
        view.input_ids,
        explain,
        target=torch.tensor([1, 0, 2]),
        tokens=view.tokens,
    )
    for b, own in enumerate([1, 0, 2]):
        orders = [
            _order(explain(torch.tensor([c]).expand(3))[b, 1:].detach())
            for c in range(4)
        ]
        expected = np.mean(
            [kendalltau(orders[own], orders[c])[0] for c in range(4) if c != own]
        )
        assert float(taus[b]) == pytest.approx(expected, abs=1e-6)


def _draws(view: PatchTokens, samples: int, **options: Any) -> Tensor:
    r"""The draws a fresh perturbation gives Captum's repeated rows."""
    repeated = view.input_ids.repeat_interleave(samples, 0)
    perturb = TokenSubsetPerturbation(
        view.mask_token_id, tokens=view.tokens, indicator=False, **options
    )
    drawn = perturb(repeated)
    assert isinstance(drawn, Tensor)
    return drawn != repeated  # [batch * samples, 1 + patches]


def test_captum_infidelity_masks_the_drawn_patches() -> None:
    model, pixels = _setup()
    target = torch.tensor([3, 1, 0])
    scores = CAT(model).attribute(pixels, target=target)
    view = PatchTokens(pixels, PATCH)
    samples = 6

    def probability(input_ids: Tensor) -> Tensor:
        return view.forward_func(_logits(model))(input_ids).softmax(-1)

    value = infidelity(
        probability,
        TokenSubsetPerturbation(view.mask_token_id, tokens=view.tokens),
        view.input_ids,
        scores,
        target=target,
        n_perturb_samples=samples,
        normalize=True,
    )
    chosen = _draws(view, samples).reshape(3, samples, -1)
    for b in range(3):
        t = int(target[b])
        a, d = [], []
        for s in range(samples):
            patches = (chosen[b, s, 1:].nonzero().flatten()).tolist()
            a.append(float((scores[b] * chosen[b, s]).sum()))
            d.append(
                _prob(model, pixels[b], t)
                - _prob(model, _masked(pixels[b], patches), t)
            )
        a_, d_ = np.array(a), np.array(d)
        beta = np.mean(a_ * d_) / np.mean(a_ * a_)
        expected = np.mean((beta * a_ - d_) ** 2)
        assert float(value[b]) == pytest.approx(expected, rel=1e-5, abs=1e-9)


def test_captum_sensitivity_max_reexplains_the_masked_images() -> None:
    model, pixels = _setup()
    target = torch.tensor([2, 2, 1])
    method = CAT(model)
    view = PatchTokens(pixels, PATCH)
    samples = 3

    def explain(inputs: Any, target: Tensor) -> Any:
        # Captum passes the unperturbed inputs as a one-tensor tuple and
        # wants one back; the perturbed ones as a tensor.
        input_ids = inputs[0] if isinstance(inputs, tuple) else inputs
        scores = method.attribute(view.pixels(input_ids), target=target)
        return (scores,) if isinstance(inputs, tuple) else scores

    value = sensitivity_max(
        explain,
        view.input_ids,
        TokenSubsetPerturbation(
            view.mask_token_id, tokens=view.tokens, size=1, indicator=False
        ),
        n_perturb_samples=samples,
        target=target,
    )
    chosen = _draws(view, samples, size=1).reshape(3, samples, -1)
    for b in range(3):
        t = torch.tensor([int(target[b])])
        own = method.attribute(pixels[b : b + 1], target=t)
        ratios = []
        for s in range(samples):
            patches = chosen[b, s, 1:].nonzero().flatten().tolist()
            assert len(patches) == 1 and not bool(chosen[b, s, 0])
            other = method.attribute(_masked(pixels[b], patches)[None], target=t)
            ratios.append(float((other - own).norm() / own.norm()))
        assert float(value[b]) == pytest.approx(max(ratios), rel=1e-6)


def test_pixels_mask_the_absent_and_unattended_patches() -> None:
    _, pixels = _setup()
    view = PatchTokens(
        pixels, PATCH, baseline=torch.tensor([1.0, 2.0, 3.0])[:, None, None]
    )
    ids = view.input_ids  # [3, 10]
    assert ids[:, 0].tolist() == [0, 0, 0]
    assert ids[1, 1:].tolist() == list(range(2 + 9, 2 + 18))
    rows = torch.stack([ids[2], ids[0].masked_fill(torch.arange(10) == 4, 1)])
    mask = torch.ones_like(rows)
    mask[0, 7] = 0
    out = view.pixels(rows, mask)
    expected = _masked(pixels[2], [6])
    expected[:, 8:12, 0:4] = torch.tensor([1.0, 2.0, 3.0])[:, None, None]
    assert torch.equal(out[0], expected)
    second = _masked(pixels[0], [3])
    second[:, 4:8, 0:4] = torch.tensor([1.0, 2.0, 3.0])[:, None, None]
    assert torch.equal(out[1], second)
    # Every patch masked: the baseline image, whatever the row's image was.
    every = view.pixels(torch.tensor([[0] + [1] * 9]))
    assert torch.equal(
        every[0], torch.tensor([1.0, 2.0, 3.0])[:, None, None].expand(3, SIZE, SIZE)
    )


def test_the_class_token_is_never_removed() -> None:
    model, pixels = _setup("deit")
    view = PatchTokens(pixels, PATCH, class_tokens=2)
    assert view.tokens.special_token_ids == (0, 1)
    scores = CAT(model).attribute(pixels, target=0)  # [3, 2 + 9]
    forward = view.forward_func(_logits(model))
    # The default protects the class tokens, so it runs ...
    result = aopc(forward, view.input_ids, scores, 0, tokens=view.tokens)
    assert bool(torch.isfinite(result.score).all())
    # ... and a protocol that would mask DeiT's distillation token raises.
    scores[:, 1] = 100.0  # ranked first
    with pytest.raises(ValueError, match="cannot remove its class token"):
        aopc(
            forward, view.input_ids, scores, 0, preset="normxlogit", tokens=view.tokens
        )
    with pytest.raises(ValueError, match="cannot remove its class token"):
        view.pixels(view.input_ids[:, 1:])


def test_bad_arguments_name_the_argument() -> None:
    _, pixels = _setup()
    with pytest.raises(ValueError, match="pixel_values"):
        PatchTokens(pixels[0], PATCH)
    with pytest.raises(ValueError, match="patch_size"):
        PatchTokens(pixels, 5)
    with pytest.raises(ValueError, match="several images"):
        view = PatchTokens(pixels, PATCH)
        ids = view.input_ids
        view.pixels(torch.cat([ids[:1, :5], ids[1:2, 5:]], dim=1))

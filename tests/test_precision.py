#!/usr/bin/env python3
r"""The half-precision guard: every method on a bfloat16 copy of the default
sentiment model ranks the tokens of held-out snippets like on the float32 model.

For each method, over the first :data:`SNIPPETS` snippets of the test split:
mean Spearman correlation of the per-example scores (real tokens, specials
included) >= 0.98, mean top-3 overlap >= 0.95, no NaN/inf, and
``|AOPC(bfloat16 scores) - AOPC(float32 scores)| <= 0.01`` (both AOPCs on the
float32 model, so the difference is the rankings' alone). The decoded methods use
the fitted decoders of the train split (cached with the default model), cast to
bfloat16 for the bfloat16 model. Run with ``-s`` to print the table (README).
"""

import copy
from typing import Callable, Dict, List, Tuple

import pytest
import torch
from captum.attr import LayerIntegratedGradients
from captum_ext import classifier_forward
from captum_ext.attr import (
    AttCAT,
    CAT,
    DecodedLayerAttribution,
    DecodedLayerGradCam,
    GlobEnc,
    load_fitted_decoders,
    LogAt,
    NormXLogit,
)
from captum_ext.datasets import load_split
from captum_ext.metrics import aopc
from torch import nn, Tensor

pytestmark = pytest.mark.integration

SNIPPETS = 100
MAX_LENGTH = 64
DECODED_LAYERS = (3, 6)  # of all-MiniLM-L6-v2's hidden_states[0..6]
IG_STEPS = 8
TOP = 3
MIN_SPEARMAN = 0.98
MIN_TOP_OVERLAP = 0.95
MAX_AOPC_GAP = 0.01

# (input_ids, attention_mask) -> scores [batch, pos]
Run = Callable[[Tensor, Tensor], Tensor]


def _method_table(model: nn.Module, decoders: List[nn.Module]) -> Dict[str, Run]:
    def plain(method: object) -> Run:
        return lambda ids, mask: method.attribute(  # type: ignore[attr-defined]
            ids, additional_forward_args=(mask,)
        )

    table = {
        name: plain(method(model))
        for name, method in [
            ("LogAt", LogAt),
            ("NormXLogit", NormXLogit),
            ("CAT", CAT),
            ("AttCAT", AttCAT),
            ("GlobEnc", GlobEnc),
        ]
    }
    for layer in DECODED_LAYERS:
        table[f"DecodedLayerGradCam({layer})"] = plain(
            DecodedLayerGradCam(model, layer, decoders[layer])
        )
    lig = DecodedLayerAttribution(
        model, DECODED_LAYERS[0], decoders[DECODED_LAYERS[0]], LayerIntegratedGradients
    )
    table[f"DecodedLayerAttribution-LIG({DECODED_LAYERS[0]})"] = (
        lambda ids, mask: lig.attribute(
            ids, additional_forward_args=(mask,), n_steps=IG_STEPS
        )
    )
    return table


def _ranks(values: Tensor) -> Tensor:
    r"""Average ranks (ties share the mean of their ranks), ``[n]``."""
    order = values.argsort()
    ranks = torch.empty_like(values, dtype=torch.float64)
    ranks[order] = torch.arange(len(values), dtype=torch.float64)
    for value in values.unique():
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def _spearman(a: Tensor, b: Tensor) -> float:
    r"""Spearman's rho; 1 for two identical vectors (all-zero ones included)."""
    if torch.equal(a, b):
        return 1.0
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()).clamp_min(1e-12))


def _top_overlap(a: Tensor, b: Tensor) -> float:
    k = min(TOP, len(a))
    top_a, top_b = set(a.topk(k).indices.tolist()), set(b.topk(k).indices.tolist())
    return len(top_a & top_b) / k


def _agreement(low: Tensor, exact: Tensor, mask: Tensor) -> Tuple[float, float]:
    r"""Mean Spearman and mean top-3 overlap over the examples' real tokens."""
    pairs = [(lo[m.bool()], ex[m.bool()]) for lo, ex, m in zip(low, exact, mask)]
    spearman = sum(_spearman(lo, ex) for lo, ex in pairs) / len(pairs)
    overlap = sum(_top_overlap(lo, ex) for lo, ex in pairs) / len(pairs)
    return spearman, overlap


@pytest.fixture(scope="module")
def setup(sentiment_model: tuple) -> dict:
    model, tokenizer = sentiment_model
    texts = load_split("sentiment", "test").texts[:SNIPPETS]
    encoded = tokenizer(
        list(texts),
        truncation=True,
        max_length=MAX_LENGTH,
        padding=True,
        return_tensors="pt",
    )
    decoders = list(load_fitted_decoders(model, tokenizer).heads)
    low = copy.deepcopy(model).to(torch.bfloat16)
    low_decoders = [copy.deepcopy(d).to(torch.bfloat16) for d in decoders]
    return dict(
        model=model,
        ids=encoded["input_ids"],
        mask=encoded["attention_mask"],
        exact=_method_table(model, decoders),
        low=_method_table(low, low_decoders),
    )


@pytest.mark.parametrize(
    "name",
    [
        "LogAt",
        "NormXLogit",
        "CAT",
        "AttCAT",
        "GlobEnc",
        *(f"DecodedLayerGradCam({layer})" for layer in DECODED_LAYERS),
        f"DecodedLayerAttribution-LIG({DECODED_LAYERS[0]})",
    ],
)
def test_bfloat16_ranks_tokens_like_float32(setup: dict, name: str) -> None:
    ids, mask = setup["ids"], setup["mask"]
    exact = setup["exact"][name](ids, mask)
    low = setup["low"][name](ids, mask)
    assert low.dtype == exact.dtype == torch.float32
    assert torch.isfinite(low).all() and torch.isfinite(exact).all()
    spearman, overlap = _agreement(low, exact, mask)
    forward = classifier_forward(setup["model"])
    with torch.no_grad():
        target = forward(ids, mask).argmax(-1)
    gap = float(
        (
            aopc(forward, ids, low, target, (mask,)).score.mean()
            - aopc(forward, ids, exact, target, (mask,)).score.mean()
        ).abs()
    )
    print(f"\n| {name} | {spearman:.3f} | {overlap:.3f} | {gap:.4f} |", end="")
    assert spearman >= MIN_SPEARMAN, (name, spearman)
    assert overlap >= MIN_TOP_OVERLAP, (name, overlap)
    assert gap <= MAX_AOPC_GAP, (name, gap)

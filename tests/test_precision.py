#!/usr/bin/env python3
r"""The half-precision guard: every method on a bfloat16 copy of the default
sentiment model ranks the tokens of held-out snippets like on the float32 model.

For each method, over the first :data:`SNIPPETS` snippets of the test split:
mean Spearman correlation of the per-example scores (real tokens, specials
included) >= 0.98, mean top-3 overlap >= 0.95, no NaN/inf, and
``|AOPC(bfloat16 scores) - AOPC(float32 scores)| <= 0.01`` (both AOPCs on the
float32 model, so the difference is the rankings' alone). The decoded methods use
the fitted decoders of the train split (cached with the default model), cast to
bfloat16 for the bfloat16 model. Run with ``-s`` to print the table
(docs/measured.rst).

To stay fast on two cores, the snippets run in :data:`BUCKETS` batches of
similar length, and AOPC is evaluated only on the examples whose two score
vectors rank the tokens differently: an example whose ranks (ties included)
are the same deletes the same tokens at every level, so its AOPC difference is
exactly zero.
"""

import copy
from typing import Callable, Dict, Sequence

import numpy as np
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
    LogAt,
    NormXLogit,
)
from captum_ext.defaults.data import load_split
from captum_ext.defaults.decoders import load_fitted_decoders
from captum_ext.evaluation.tasks import default_decoder_texts
from captum_ext.evaluation.tokenized_batches import bucketed_batches
from captum_ext.metrics import aopc
from scipy.stats import rankdata, spearmanr
from torch import nn, Tensor

pytestmark = pytest.mark.integration

SNIPPETS = 100
MAX_LENGTH = 64
DECODED_LAYERS = (3, 6)  # of all-MiniLM-L6-v2's hidden_states[0..6]
IG_STEPS = 8
BUCKETS = 4
TOP = 3
MIN_SPEARMAN = 0.98
MIN_TOP_OVERLAP = 0.95
MAX_AOPC_GAP = 0.01

# (input_ids, attention_mask) -> scores [batch, pos]
Run = Callable[[Tensor, Tensor], Tensor]


def _method_table(model: nn.Module, decoders: Sequence[nn.Module]) -> Dict[str, Run]:
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


def _same_ranks(a: Tensor, b: Tensor) -> bool:
    r"""Whether ``a`` and ``b`` rank their entries alike, ties included."""
    return bool(np.array_equal(rankdata(a.cpu()), rankdata(b.cpu())))


def _spearman(a: Tensor, b: Tensor) -> float:
    if _same_ranks(a, b):  # all-tied vectors (e.g. all zero) included
        return 1.0
    if a.unique().numel() == 1 or b.unique().numel() == 1:
        return 0.0  # one vector all tied: no order to agree with
    return float(spearmanr(a.cpu(), b.cpu()).statistic)


def _top_overlap(a: Tensor, b: Tensor) -> float:
    k = min(TOP, len(a))
    top_a, top_b = set(a.topk(k).indices.tolist()), set(b.topk(k).indices.tolist())
    return len(top_a & top_b) / k


def _aopc_gap(
    forward: nn.Module, ids: Tensor, mask: Tensor, low: Tensor, exact: Tensor
) -> float:
    r"""Sum over the examples of AOPC(low) - AOPC(exact), evaluated on the
    examples whose token ranks differ only (the others contribute 0)."""
    rows = [
        row
        for row in range(len(ids))
        if not _same_ranks(low[row][mask[row].bool()], exact[row][mask[row].bool()])
    ]
    if not rows:
        return 0.0
    ids, mask = ids[rows], mask[rows]
    with torch.no_grad():
        target = forward(ids, mask).argmax(-1)
    low_aopc = aopc(forward, ids, low[rows], target, (mask,)).score
    exact_aopc = aopc(forward, ids, exact[rows], target, (mask,)).score
    return float((low_aopc - exact_aopc).sum())


@pytest.fixture(scope="module")
def setup(sentiment_model: tuple) -> dict:
    model, tokenizer = sentiment_model
    texts = list(load_split("sentiment", "test").texts[:SNIPPETS])
    decoders = list(
        load_fitted_decoders(model, tokenizer, default_decoder_texts()).heads
    )
    low = copy.deepcopy(model).to(torch.bfloat16)
    low_decoders = [copy.deepcopy(d).to(torch.bfloat16) for d in decoders]
    return dict(
        forward=classifier_forward(model),
        batches=[
            (batch.input_ids, batch.attention_mask)
            for batch in bucketed_batches(
                tokenizer,
                texts,
                batch_size=-(-len(texts) // BUCKETS),
                max_length=MAX_LENGTH,
            )
        ],
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
    spearman, overlap, gap = [], [], 0.0
    for ids, mask in setup["batches"]:
        exact = setup["exact"][name](ids, mask)
        low = setup["low"][name](ids, mask)
        assert low.dtype == exact.dtype == torch.float32
        assert torch.isfinite(low).all() and torch.isfinite(exact).all()
        for lo, ex, m in zip(low, exact, mask.bool()):
            spearman.append(_spearman(lo[m], ex[m]))
            overlap.append(_top_overlap(lo[m], ex[m]))
        gap += _aopc_gap(setup["forward"], ids, mask, low, exact)
    mean_spearman = sum(spearman) / len(spearman)
    mean_overlap = sum(overlap) / len(overlap)
    aopc_gap = abs(gap) / len(spearman)
    print(
        f"\n| {name} | {mean_spearman:.3f} | {mean_overlap:.3f} | {aopc_gap:.4f} |",
        end="",
    )
    assert len(spearman) >= SNIPPETS
    assert mean_spearman >= MIN_SPEARMAN, (name, mean_spearman)
    assert mean_overlap >= MIN_TOP_OVERLAP, (name, mean_overlap)
    assert aopc_gap <= MAX_AOPC_GAP, (name, aopc_gap)

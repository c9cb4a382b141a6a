#!/usr/bin/env python3
r"""Attention read from the query and key of sdpa models equals the eager maps:
every attention-reading method, every family, padding, blocks, sliding windows;
the model and transformers' registry are left as they were."""

from functools import partial

import pytest
import torch
from captum_ext.adapters import attention as attention_module, UnsupportedModelError
from captum_ext.adapters.attention import AttentionInputs
from captum_ext.attr import AttCAT, AttentionRollout, CAT, LastLayerAttention
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from tests.helpers import (
    ALL_FAMILIES,
    assert_same_in_threads,
    CAUSAL_LM_FAMILIES,
    continuation_batch,
    eager_one_at_a_time,
    is_causal,
    sdpa_and_eager,
    sliding_window_lm,
    tiny_causal_lm,
    tiny_classifier,
    token_batch,
)

METHODS = (AttCAT, LastLayerAttention, AttentionRollout)
SDPA_FAMILIES = tuple(f for f in ALL_FAMILIES if f != "deberta-v2")  # no sdpa in HF


def _classifier_scores(method, model, batch):
    return method(model).attribute(
        batch["input_ids"], additional_forward_args=(batch["attention_mask"],)
    )


def _generation_scores(method, model, batch):
    return method(model).attribute(
        batch["input_ids"],
        target=batch["target"],
        additional_forward_args=(batch["attention_mask"],),
    )


def _float32_softmax(family, method):
    r"""Llama-style eager attention takes its softmax in float32 even in a
    float64 model, so its gradients (not its probabilities) are float32-precise:
    AttCAT is checked per layer as CAT x alpha instead (test below)."""
    return method is AttCAT and family not in ("gpt2",) + SDPA_FAMILIES[:5]


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("family", SDPA_FAMILIES)
def test_classifier_sdpa_equals_eager(family, method, block_elements):
    if _float32_softmax(family, method):
        pytest.skip("float32 softmax in the eager model: see test_attcat_alpha_*")
    sdpa, eager = sdpa_and_eager(family, causal_lm=False)
    pad_side = "left" if is_causal(family) else "right"
    batch = token_batch((7, 4, 9), pad_side=pad_side, causal=is_causal(family))
    expected = eager_one_at_a_time(partial(_classifier_scores, method, eager), batch)
    torch.testing.assert_close(
        _classifier_scores(method, sdpa, batch), expected, rtol=1e-6, atol=1e-12
    )


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
def test_causal_lm_sdpa_equals_eager(family, method, block_elements):
    if _float32_softmax(family, method):
        pytest.skip("float32 softmax in the eager model: see test_attcat_alpha_*")
    sdpa, eager = sdpa_and_eager(family, causal_lm=True)
    batch = continuation_batch((5, 3, 7), (3, 1, 2))
    expected = eager_one_at_a_time(partial(_generation_scores, method, eager), batch)
    torch.testing.assert_close(
        _generation_scores(method, sdpa, batch), expected, rtol=1e-6, atol=1e-12
    )


def _eager_alpha(model, batch):
    r"""AttCAT's alpha from the eager maps, one unpadded example at a time:
    ``[1, T, L, width]`` (mean over heads and the queries i <= q <= p_t)."""
    ids = torch.cat([batch["input_ids"], batch["target"][:, :-1]], dim=1)
    maps = model(input_ids=ids, output_attentions=True).attentions
    prompt, steps = batch["input_ids"].shape[1], batch["target"].shape[1]
    rows = []
    for t in range(steps):
        p = prompt - 1 + t
        layers = [a[0].mean(0)[: p + 1, : ids.shape[1]] for a in maps]  # [q, k]
        counts = (p - torch.arange(ids.shape[1]) + 1).clamp(min=1)
        rows.append(torch.stack([a.sum(0) / counts for a in layers]))
    return torch.stack(rows)[None]  # [1, T, L, width]


@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
def test_attcat_alpha_from_sdpa_equals_eager(family, block_elements):
    r"""Per layer, AttCAT on sdpa is CAT on sdpa times alpha of the eager maps."""
    sdpa, eager = sdpa_and_eager(family, causal_lm=True)
    batch = continuation_batch((5, 3, 7), (3, 1, 2))

    def per_layer(method, one):
        return method(sdpa).attribute(
            one["input_ids"],
            target=one["target"],
            additional_forward_args=(one["attention_mask"],),
            return_layers=True,
        )  # [batch, T, L, P]

    def weighted(one):
        prompt = one["input_ids"].shape[1]
        return per_layer(CAT, one) * _eager_alpha(eager, one)[..., :prompt]

    torch.testing.assert_close(
        per_layer(partial(AttCAT, alpha="received"), batch),  # as _eager_alpha
        eager_one_at_a_time(weighted, batch),
        rtol=1e-6,
        atol=1e-12,
    )


@pytest.mark.parametrize("method", METHODS[1:], ids=lambda m: m.__name__)
def test_sliding_window_sdpa_equals_eager(method, block_elements):
    models = [sliding_window_lm(i) for i in ("sdpa", "eager")]
    batch = continuation_batch((9, 4, 7), (3, 2, 3))
    sdpa = _generation_scores(method, models[0], batch)
    eager = eager_one_at_a_time(partial(_generation_scores, method, models[1]), batch)
    torch.testing.assert_close(sdpa, eager, rtol=1e-6, atol=1e-12)
    # The window bites: keys more than 3 positions back get no attention.
    if method is LastLayerAttention:
        assert bool((sdpa[0, 0, :-3] == 0).all())


def test_registry_and_model_restored_also_when_the_forward_raises():
    model = tiny_causal_lm("llama", attn_implementation="sdpa")
    original = ALL_ATTENTION_FUNCTIONS["sdpa"]
    local_before = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    batch = continuation_batch()
    _generation_scores(AttCAT, model, batch)
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is original
    assert ALL_ATTENTION_FUNCTIONS._local_mapping == local_before
    assert model.config._attn_implementation == "sdpa"

    def fail(*args):
        raise RuntimeError("planted failure")

    handle = model.model.layers[1].register_forward_hook(fail)
    try:
        with pytest.raises(RuntimeError, match="planted failure"):
            _generation_scores(AttCAT, model, batch)
    finally:
        handle.remove()
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is original
    assert ALL_ATTENTION_FUNCTIONS._local_mapping == local_before


def test_threads_share_the_registry_wrapper():
    models = [
        tiny_causal_lm("llama", seed=s, attn_implementation="sdpa") for s in (0, 1)
    ]
    batch = continuation_batch()
    assert_same_in_threads(
        [partial(_generation_scores, AttCAT, model, batch) for model in models]
    )
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is attention_module._registry()["sdpa"]
    assert "sdpa" not in ALL_ATTENTION_FUNCTIONS._local_mapping


def test_key_padding_mask_of_flash_kernels_equals_the_4d_mask():
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, 5, 8, generator=generator, dtype=torch.float64)
    key = torch.randn(2, 2, 5, 8, generator=generator, dtype=torch.float64)
    padding = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    four_d = (causal[None, None] & padding.bool()[:, None, None, :]).expand(2, 1, 5, 5)
    flash = AttentionInputs(query=query, key=key, mask=padding, causal=True)
    sdpa = AttentionInputs(query=query, key=key, mask=four_d)
    (_, a), (_, b) = (next(x.probability_blocks(torch.float64)) for x in (flash, sdpa))
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert bool((a[0, :, :2] == 0).all())  # padded query rows read nothing
    torch.testing.assert_close(a[0, :, 2:].sum(-1), torch.ones(4, 3, dtype=a.dtype))


@pytest.mark.parametrize("window", (None, 3), ids=("causal", "sliding-window"))
@pytest.mark.parametrize("padding", (False, True), ids=("no-mask", "key-padding"))
def test_causal_row_blocks_skip_later_keys_and_equal_the_4d_mask(window, padding):
    # 6 query rows after 3 cached keys (bottom-right aligned); blocks of one row
    # compute only the keys their row may reach, the rest are zeros.
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, 6, 8, generator=generator, dtype=torch.float64)
    key = torch.randn(2, 2, 9, 8, generator=generator, dtype=torch.float64)
    keys = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1], [1] * 9])
    query_pos = torch.arange(3, 9)[:, None]
    allowed = torch.arange(9)[None] <= query_pos  # [6, 9]
    if window is not None:
        allowed &= query_pos - torch.arange(9)[None] < window
    mask = keys if padding else None
    four_d = (
        allowed[None, None]
        & (keys if padding else torch.ones_like(keys)).bool()[:, None, None, :]
    )
    options = dict(query=query, key=key, causal=True, sliding_window=window)
    blocked = AttentionInputs(mask=mask, **options)
    assert [blocked._reach(stop, 9) for stop in (1, 4, 6)] == [4, 7, 9]
    rows = blocked.probability_blocks(torch.float64, max_elements=2 * 4 * 9)
    got = torch.cat([block for _, block in rows], dim=2)  # [2, 4, 6, 9]
    _, expected = next(
        AttentionInputs(query=query, key=key, mask=four_d).probability_blocks(
            torch.float64
        )
    )
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    assert bool((got[..., ~allowed] == 0).all())


def test_attention_outside_the_interface_is_named():
    model = tiny_classifier("deberta-v2")
    model.config._attn_implementation = "sdpa"  # DeBERTa computes attention itself
    with pytest.raises(UnsupportedModelError, match="0 of this model's 2 blocks"):
        _classifier_scores(AttCAT, model, token_batch())

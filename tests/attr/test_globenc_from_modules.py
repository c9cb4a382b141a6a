#!/usr/bin/env python3
r"""GlobEnc built Captum's way, from ``forward_func``, the blocks, their
attention modules and their :class:`~captum_ext.adapters.BlockParts`: a
post-LN encoder in plain PyTorch against loops by hand, and the registered
post-LN families' shortcut numbers for every variant."""

import pytest
import torch
from torch import Tensor

from captum_ext import classifier_forward, get_adapter
from captum_ext.adapters import BlockParts
from captum_ext.attr import GlobEnc
from tests.attr.plain_transformers import plain_classifier
from tests.helpers import POST_LN_FAMILIES, tiny_classifier


def _parts(model) -> list:
    return [
        BlockParts(
            value=b.attention.value,
            attention_output=b.attention.out,
            layernorm1=b.ln1,
            layernorm2=b.ln2,
        )
        for b in model.blocks
    ]


def _naive_last_layer_row(model, ids: Tensor) -> Tensor:
    r"""``||sum_h A_h[0, j] v_h,j W_O,h^T||`` of the last block by loops."""
    block = model.blocks[-1]
    seen = {}
    handles = [
        block.register_forward_pre_hook(lambda _m, i: seen.__setitem__("x", i[0])),
        block.attention.probabilities.register_forward_hook(
            lambda _m, _i, out: seen.__setitem__("a", out)
        ),
    ]
    with torch.no_grad():
        model(ids)
    for handle in handles:
        handle.remove()
    heads = block.attention.heads
    dh = block.attention.out.weight.shape[0] // heads
    rows = []
    for b in range(len(ids)):
        values = block.attention.value(seen["x"][b]).detach()  # [pos, d]
        w_out = block.attention.out.weight
        row = []
        for j in range(ids.shape[1]):
            total = sum(
                seen["a"][b, h, 0, j]
                * values[j, h * dh : (h + 1) * dh]
                @ w_out[:, h * dh : (h + 1) * dh].T
                for h in range(heads)
            )
            row.append(total.norm())
        rows.append(torch.stack(row))
    return torch.stack(rows)


def test_a_plain_post_ln_encoder_equals_loops_by_hand() -> None:
    model, ids = plain_classifier("post-LN encoder")
    blocks = list(model.blocks)
    probs = [block.attention.probabilities for block in blocks]
    globenc = GlobEnc(model, blocks, probs, _parts(model))
    last = globenc.attribute(ids, variant="N", rollout=False)
    torch.testing.assert_close(
        last, _naive_last_layer_row(model, ids), rtol=1e-10, atol=1e-12
    )
    scores = globenc.attribute(ids, internal_batch_size=2)  # N_enc, rolled out
    assert scores.shape == (3, 7) and bool((scores > 0).all())


@pytest.mark.parametrize("family", POST_LN_FAMILIES)
def test_registered_families_give_the_shortcut_numbers(family: str) -> None:
    model = tiny_classifier(family, dtype=torch.float64, attn_implementation="eager")
    adapter = get_adapter(model)
    blocks = adapter.blocks()
    attention = [
        next(
            m for n, m in block.named_modules() if n in ("attention.self", "attention")
        )
        for block in blocks
    ]
    parts = [adapter.block_parts(k + 1) for k in range(adapter.num_layers)]
    explicit = GlobEnc(classifier_forward(model), blocks, attention, parts)
    ids = torch.randint(5, 60, (2, 6))
    for variant in ("N", "N_res", "N_resln", "N_enc"):
        for rollout in (True, False):
            options = dict(variant=variant, rollout=rollout)
            expected = GlobEnc(model).attribute(ids, **options)
            assert torch.equal(explicit.attribute(ids, **options), expected)


def test_missing_or_mismatched_modules_are_named() -> None:
    model, ids = plain_classifier("post-LN encoder")
    blocks = list(model.blocks)
    probs = [block.attention.probabilities for block in blocks]
    with pytest.raises(ValueError, match="needs parts="):
        GlobEnc(model, blocks, probs)
    with pytest.raises(ValueError, match="needs attention="):
        GlobEnc(model, blocks, parts=_parts(model))
    with pytest.raises(ValueError, match="got 3 blocks, 1 attention modules, 3"):
        GlobEnc(model, blocks, probs[:1], _parts(model))
    with pytest.raises(ValueError, match="go with layer modules"):
        GlobEnc(tiny_classifier("bert"), position=0)
    globenc = GlobEnc(model, blocks, probs, _parts(model), position=9)
    with pytest.raises(IndexError, match="position 9 is out of range for 7"):
        globenc.attribute(ids)
    with pytest.raises(ValueError, match="build GlobEnc from the model"):
        globenc.attribute_matrices(ids)

#!/usr/bin/env python3
r"""GlobEnc's decomposition of post-LayerNorm encoder blocks into one vector
per source token, one layer at a time; the equations are in
:class:`~captum_ext.attr._core.layer.globenc.GlobEnc` (pre-LayerNorm
decoders: :mod:`captum_ext.attr._utils.decoder_decomposition`)."""

from dataclasses import dataclass, fields, replace
from typing import List, NamedTuple, Sequence, Tuple

from torch import Tensor

from captum_ext._utils.attention_inputs import AttentionInputs
from captum_ext._utils.block_parts import BlockParts
from captum_ext._utils.hooks import HookSet, single_call
from captum_ext.attr._utils.norm_decomposition import Factors, through_norm
from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = [
    "EncoderLayer",
    "PartCaptures",
    "VARIANTS",
    "capture_parts",
    "encoder_layers",
    "encoder_factors",
    "encoder_work_factors",
    "in_work_dtype",
]

# Decomposition depth, in order: attention only, + residual, + LN1, + LN2.
VARIANTS = ("N", "N_res", "N_resln", "N_enc")


@dataclass
class EncoderLayer:
    r"""What one block's forward pass exposes to the decomposition."""

    hidden: Tensor  # [batch, pos, d]  block input x = hidden_states[l - 1]
    attention: AttentionInputs  # its probabilities, a block of rows at a time
    value: Tensor  # [batch, pos, d]  value projection output, bias b_V included
    pre_ln1: Tensor  # [batch, pos, d]  real LN1 input: dense(context) + b_O + x
    pre_ln2: Tensor  # [batch, pos, d]  real LN2 input: FFN(out1) + out1


class PartCaptures(NamedTuple):
    r"""Per block, what the hooks of :func:`capture_parts` store."""

    values: List[List[Tensor]]
    pre_ln1: List[List[Tensor]]
    pre_ln2: List[List[Tensor]]


def capture_parts(hooks: HookSet, parts: Sequence[BlockParts]) -> PartCaptures:
    r"""Hooks that store each block's value projection output and both
    LayerNorms' inputs during one forward pass."""
    return PartCaptures(
        [hooks.capture_output(p.value) for p in parts],
        [hooks.capture_input(p.layernorm1) for p in parts],
        [hooks.capture_input(p.layernorm2) for p in parts],
    )


def encoder_layers(
    hidden: Sequence[Tensor],
    attention: Sequence[AttentionInputs],
    captures: PartCaptures,
) -> List[EncoderLayer]:
    r"""Every block's :class:`EncoderLayer` from its input ``hidden[k]``, its
    attention and what :func:`capture_parts` stored, in the model's dtype
    (each layer goes to float32 only when it is decomposed)."""
    return [
        EncoderLayer(
            hidden[k],
            attention[k],
            single_call(values, "GlobEnc", f"block {k + 1}'s value projection"),
            single_call(pre_ln1, "GlobEnc", f"block {k + 1}'s first LayerNorm"),
            single_call(pre_ln2, "GlobEnc", f"block {k + 1}'s second LayerNorm"),
        )
        for k, (values, pre_ln1, pre_ln2) in enumerate(zip(*captures))
    ]


def in_work_dtype(layer: EncoderLayer) -> EncoderLayer:
    r"""One layer's inputs in float32 (or wider), where its decomposition runs:
    norms of half-precision sums lose too many digits (the attention's blocks
    are computed in the values' dtype)."""
    dtype = result_dtype(layer.hidden.dtype)
    tensors = {
        field.name: getattr(layer, field.name).to(dtype)
        for field in fields(EncoderLayer)
        if field.name != "attention"
    }
    return replace(layer, **tensors)


def encoder_factors(layer: EncoderLayer, parts: BlockParts, variant: str) -> Factors:
    r"""The decomposition of one block for ``variant`` (one of :data:`VARIANTS`)."""
    batch, pos, d = layer.value.shape
    heads = layer.attention.num_heads
    value = layer.value.view(batch, pos, heads, d // heads)
    weight = parts.output_weight  # [d, d]
    depth = VARIANTS.index(variant)
    residual = layer.hidden if depth >= 1 else None
    factors = Factors.of_attention(layer.attention, value, weight, residual)
    if depth >= 2:
        factors = _through_layernorm(factors, layer.pre_ln1, parts.norm1)
    if depth >= 3:
        factors = _through_layernorm(factors, layer.pre_ln2, parts.norm2)
    return factors


def _through_layernorm(
    factors: Factors, pre_ln: Tensor, norm: Tuple[Tensor, float]
) -> Factors:
    gamma, eps = norm  # [d], LayerNorm's epsilon
    return through_norm(factors, pre_ln, gamma, eps, centred=True)


def encoder_work_factors(
    layer: EncoderLayer, parts: BlockParts, variant: str
) -> Factors:
    r""":func:`encoder_factors` of one block, its inputs in the work dtype
    (:func:`in_work_dtype`)."""
    return encoder_factors(in_work_dtype(layer), parts, variant)

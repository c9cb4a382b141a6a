#!/usr/bin/env python3
r"""GlobEnc's decomposition of pre-LayerNorm decoder blocks (GPT-2: LayerNorm;
Llama, Mistral, Qwen2: RMSNorm), one layer at a time; the derivation is in
``docs/generation_globenc.rst`` and :class:`~captum_ext.attr.GlobEnc`.

Block ``l`` maps the residual stream ``h`` (``hidden_states[l - 1]``) to

.. math::
    h'_i = h_i + \sum_j \sum_h A_h[i, j]\, W_{O,h} v_{h,j} + b_O, \qquad
    h''_i = h'_i + \mathrm{MLP}(\mathrm{norm}_2(h'_i))

with ``v_j = W_V norm_1(h_j) + b_V`` (a function of token ``j`` alone). Source
``j``'s share of ``h'_i`` is ``z_ij = sum_h A_h[i, j] W_O,h v_h,j + 1[i = j] h_i``;
``b_O`` and the MLP's output stay undistributed, as GlobEnc leaves ``b_O`` and
the encoder's FFN out, and enter only through the statistics of the norm that
reads ``h''`` next (the next block's ``norm_1``, or the final norm after the
last block), which maps every ``z_ij`` linearly once the receiving position's
statistics are fixed.
"""

from dataclasses import dataclass, replace
from typing import List, Tuple

import torch
from torch import Tensor

from captum_ext._utils.hooks import HookSet, single_call
from captum_ext._utils.model_forward import run_model
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.adapters import (
    AttentionInputs,
    ModelAdapter,
    NormParams,
    PreNormParts,
    UnsupportedModelError,
)
from captum_ext.attr._utils.norm_decomposition import Factors, through_norm

__all__ = [
    "DECODER_VARIANTS",
    "DecoderLayer",
    "capture_decoder",
    "decoder_factors",
    "next_norms",
]

# Decomposition depth, in order: attention only, + residual, + the next norm.
DECODER_VARIANTS = ("N", "N_res", "N_enc")


@dataclass
class DecoderLayer:
    r"""What one pre-LN block's forward pass exposes to the decomposition."""

    hidden: Tensor  # [batch, pos, d]  block input h: the real input of norm_1
    attention: AttentionInputs  # its probabilities, a block of rows at a time
    value: Tensor  # [batch, pos, kv_heads * head_dim]  v_j, bias b_V included
    output: Tensor  # [batch, pos, d]  block output h'': the next norm's input

    def to(self, dtype: torch.dtype) -> "DecoderLayer":
        r"""The layer in ``dtype`` (the decomposition's work dtype; the
        attention's blocks are computed in the values' dtype)."""
        return replace(
            self,
            hidden=self.hidden.to(dtype),
            value=self.value.to(dtype),
            output=self.output.to(dtype),
        )


def next_norms(adapter: ModelAdapter) -> List[NormParams]:
    r"""The norm that reads each block's output: block ``l + 1``'s ``norm_1``
    (``l < L``), the final norm after block ``L``."""
    blocks = range(2, adapter.num_layers + 1)
    return [adapter.pre_norm_parts(k).norm1 for k in blocks] + [adapter.final_norm()]


def capture_decoder(
    adapter: ModelAdapter, batch: TokenBatch
) -> Tuple[Tensor, List[DecoderLayer]]:
    r"""One forward pass; returns the logits ``[batch, pos, vocab]`` and every
    block's :class:`DecoderLayer` (in the model's dtype; its attention from
    the model's own query and key unless the model is eager, see
    :class:`~captum_ext.adapters.AttentionCapture`). Raises
    :class:`UnsupportedModelError` when a block is not the sequential pre-LN
    block the decomposition assumes or its attention cannot be read."""
    parts = [adapter.pre_norm_parts(k) for k in range(1, adapter.num_layers + 1)]
    capture = adapter.attention_capture("GlobEnc")
    with HookSet() as hooks, capture:
        # The stream h^0 .. h^L: the inputs of every norm_1 and of the final norm.
        stream = [hooks.capture_input(p.norm1.module) for p in parts]
        stream.append(hooks.capture_input(adapter.final_norm().module))
        values = [hooks.capture_output(p.value) for p in parts]
        sublayers = [
            (
                hooks.capture_output(p.attention_output),
                hooks.capture_input(p.norm2.module),  # h' = h + Attn(norm_1(h))
                hooks.capture_output(p.mlp),
            )
            for p in parts
        ]
        output = run_model(
            adapter, batch, attentions=capture.output_attentions, classifier=False
        )
    attention = capture.layers(output)
    states = [
        single_call(s, "GlobEnc", f"block {k}'s stream") for k, s in enumerate(stream)
    ]
    layers = []
    for k, part in enumerate(parts):
        block = k + 1
        attention_out, middle, mlp_out = (
            single_call(s, "GlobEnc", f"block {block}'s {name}")
            for s, name in zip(sublayers[k], ("attention output", "norm2", "MLP"))
        )
        _check_sequential(adapter, block, batch, (states[k], attention_out, middle))
        _check_sequential(adapter, block, batch, (middle, mlp_out, states[block]))
        value = part.values(
            single_call(values[k], "GlobEnc", f"block {block}'s value projection")
        )
        layers.append(DecoderLayer(states[k], attention[k], value, states[block]))
    return output.logits, layers


def _check_sequential(
    adapter: ModelAdapter,
    block: int,
    batch: TokenBatch,
    residual_sum: Tuple[Tensor, Tensor, Tensor],
) -> None:
    r"""Raises unless ``out = stream + sublayer`` (``residual_sum``, each
    ``[batch, pos, d]``) on the attended positions, up to one rounding in the
    model's dtype: the residual structure the decomposition relies on. NaN
    passes (the callers' NaN/inf check names it)."""
    stream, sublayer, out = (t[batch.valid] for t in residual_sum)
    finfo = torch.finfo(out.dtype)
    error = (out - (stream + sublayer)).abs()
    bound = finfo.eps * (stream.abs() + sublayer.abs()) + finfo.tiny
    if bool((error > bound).any()):
        raise UnsupportedModelError(
            f"{adapter.family_name} block {block} is not the sequential pre-LayerNorm "
            "block h' = h + Attn(norm1(h)), h'' = h' + MLP(norm2(h')) that "
            "GlobEnc's decoder decomposition assumes (parallel attention and MLP, "
            "or a part the adapter does not know); its residual sum is off by "
            f"{float(error.max()):.3g}"
        )


def decoder_factors(
    layer: DecoderLayer, parts: PreNormParts, next_norm: NormParams, variant: str
) -> Factors:
    r"""The factored decomposition of one block for ``variant`` (one of
    :data:`DECODER_VARIANTS`), in ``layer``'s dtype."""
    heads = layer.attention.num_heads
    weight = parts.output_weight  # [d, heads * head_dim]
    value = _query_head_values(layer.value, heads, weight.shape[1])
    depth = DECODER_VARIANTS.index(variant)
    residual = layer.hidden if depth >= 1 else None
    factors = Factors.of_attention(layer.attention, value, weight, residual)
    if depth >= 2:
        factors = through_norm(
            factors, layer.output, next_norm.weight, next_norm.eps, next_norm.centred
        )
    return factors


def _query_head_values(value: Tensor, heads: int, width: int) -> Tensor:
    r"""``[batch, pos, heads, head_dim]``: the value vector each query head
    reads. Grouped key/value heads are shared by consecutive query heads
    (Hugging Face's ``repeat_kv``: query head ``h`` reads kv head
    ``h // (heads // kv_heads)``)."""
    head_dim = width // heads
    kv_heads = value.shape[-1] // head_dim if head_dim else 0
    if head_dim * heads != width or kv_heads == 0 or heads % kv_heads:
        raise UnsupportedModelError(
            f"cannot split the attention into heads: {heads} heads, an output "
            f"projection reading {width} features and {value.shape[-1]} value "
            "features"
        )
    batch, pos, _ = value.shape
    grouped = value.reshape(batch, pos, kv_heads, head_dim)
    return grouped.repeat_interleave(heads // kv_heads, dim=2)

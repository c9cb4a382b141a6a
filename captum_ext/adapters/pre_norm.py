#!/usr/bin/env python3
r"""The parts of a pre-LayerNorm decoder block that GlobEnc's decoder
decomposition reads (:mod:`captum_ext.attr._utils.decoder_decomposition`)::

    h' = h + Attn(norm1(h)),   h'' = h' + MLP(norm2(h')),   final norm after L

and the per-family paths to them (GPT-2: LayerNorm and the fused ``c_attn``;
Llama-style: RMSNorm and grouped ``v_proj``)."""

from dataclasses import dataclass, replace
from typing import Callable, Optional, Tuple

import torch
from torch import nn, Tensor
from transformers.pytorch_utils import Conv1D

from captum_ext.adapters.errors import UnsupportedModelError
from captum_ext.adapters.placement import read_parameter
from captum_ext.adapters.wrappers import _effective_layer, _typed


@dataclass(frozen=True)
class NormParams:
    r"""One per-position normalisation
    ``y = weight * (x - c(x)) / sqrt(mean_d((x - c(x))^2) + eps) + bias``:
    a LayerNorm (``centred``: ``c(x)`` is the mean over the hidden dimension) or
    an RMSNorm (``c(x) = 0``, no bias; Gemma's scales by ``1 + `` its stored
    weight: ``weight_offset=1``). ``module`` is the norm itself, whose
    real input gives each position's statistics; its ``weight`` and ``bias`` are
    read when used, through accelerate's hook where the norm is offloaded
    (:func:`~captum_ext.adapters.placement.read_parameter`)."""

    module: nn.Module
    eps: float
    centred: bool
    weight_offset: float = 0.0

    @property
    def weight(self) -> Tensor:  # [d]
        weight = read_parameter(self.module, "weight")
        if weight is None:  # a LayerNorm with elementwise_affine=False
            return torch.ones(getattr(self.module, "normalized_shape"))
        return weight + self.weight_offset if self.weight_offset else weight

    @property
    def bias(self) -> Optional[Tensor]:  # [d]; None for RMSNorm
        return read_parameter(self.module, "bias") if self.centred else None


@dataclass(frozen=True)
class PreNormParts:
    r"""One pre-LayerNorm decoder block ``h' = h + Attn(norm1(h))``,
    ``h'' = h' + MLP(norm2(h'))``.

    ``value``'s output holds the value vectors (bias included) as chunk
    ``value_chunk = (index, count)`` of ``count`` equal chunks of its last
    dimension (GPT-2's fused ``c_attn`` = q | k | v: ``(2, 3)``), with
    ``kv_heads * head_dim`` features (grouped key/value heads: fewer than the
    query heads); ``attention_output``'s output is the attention sublayer's
    output before the residual, ``output_projection`` the layer whose weights
    compute it (a LoRA wrapper's base layer), ``output_weight`` its ``W_O``
    ``[d, heads * head_dim]`` in ``nn.Linear`` layout and ``output_bias`` its
    ``b_O`` (or None), read when used (through accelerate's hook where the
    projection is offloaded); ``mlp``'s output is the MLP sublayer's.
    """

    norm1: NormParams
    value: nn.Module
    value_chunk: Tuple[int, int]
    attention_output: nn.Module
    output_projection: nn.Module  # nn.Linear or GPT-2's Conv1D
    norm2: NormParams
    mlp: nn.Module

    @property
    def output_weight(self) -> Tensor:  # [d, heads * head_dim]
        weight = read_parameter(self.output_projection, "weight")
        assert weight is not None  # checked by _projection
        # GPT-2's Conv1D stores its weight as [in, out].
        return weight.T if isinstance(self.output_projection, Conv1D) else weight

    @property
    def output_bias(self) -> Optional[Tensor]:  # [d]
        return read_parameter(self.output_projection, "bias")

    def values(self, value_output: Tensor) -> Tensor:
        r"""The value vectors ``[..., kv_heads * head_dim]`` in ``value``'s
        output."""
        index, count = self.value_chunk
        return value_output.chunk(count, dim=-1)[index]


def _layer_norm(module: nn.Module, what: str) -> NormParams:
    norm = _typed(_effective_layer(module, what), nn.LayerNorm, what)
    return NormParams(norm, float(norm.eps), centred=True)


def _rms_norm(module: nn.Module, what: str) -> NormParams:
    r"""Llama's RMSNorm: ``weight * x / sqrt(mean(x^2) + variance_epsilon)``."""
    return NormParams(module, _rms_eps(module, what, "variance_epsilon"), False)


def _gemma_rms_norm(module: nn.Module, what: str) -> NormParams:
    r"""Gemma's RMSNorm: ``(1 + weight) * x / sqrt(mean(x^2) + eps)``."""
    eps = _rms_eps(module, what, "eps")
    return NormParams(module, eps, centred=False, weight_offset=1.0)


def _rms_eps(module: nn.Module, what: str, eps_name: str) -> float:
    weight = getattr(module, "weight", None)
    eps = getattr(module, eps_name, None)
    if not isinstance(weight, Tensor) or not isinstance(eps, float):
        raise UnsupportedModelError(
            f"the {what} is a {type(module).__name__}, not an RMSNorm with "
            f"weight and {eps_name}"
        )
    return eps


def _projection(module: nn.Module, what: str) -> nn.Module:
    r"""The Linear or GPT-2 Conv1D whose weights compute ``module``'s output."""
    layer = _effective_layer(module, what)
    if isinstance(layer, (nn.Linear, Conv1D)):
        return layer
    raise UnsupportedModelError(
        f"the {what} is a {type(layer).__name__}, not a Linear or Conv1D projection"
    )


@dataclass(frozen=True, kw_only=True)
class _PreNormPaths:
    r"""Paths of :class:`PreNormParts` inside one block, and the family's norm."""

    norm1: str
    value: str
    value_chunk: Tuple[int, int] = (0, 1)
    attention_output: str
    norm2: str
    mlp: str
    norm: Callable[[nn.Module, str], NormParams]  # _layer_norm or _rms_norm


_GPT2_PRE_NORM = _PreNormPaths(
    norm1="ln_1",
    value="attn.c_attn",
    value_chunk=(2, 3),
    attention_output="attn.c_proj",
    norm2="ln_2",
    mlp="mlp",
    norm=_layer_norm,
)
_LLAMA_PRE_NORM = _PreNormPaths(
    norm1="input_layernorm",
    value="self_attn.v_proj",
    attention_output="self_attn.o_proj",
    norm2="post_attention_layernorm",
    mlp="mlp",
    norm=_rms_norm,
)
_GEMMA_PRE_NORM = replace(_LLAMA_PRE_NORM, norm=_gemma_rms_norm)
_VIT_PRE_NORM = _PreNormPaths(
    norm1="layernorm_before",
    value="attention.v_proj",
    attention_output="attention.o_proj",
    norm2="layernorm_after",
    mlp="mlp",
    norm=_layer_norm,
)


def _named_part(root: nn.Module, path: str, what: str) -> nn.Module:
    try:
        return root.get_submodule(path)
    except AttributeError:
        raise UnsupportedModelError(
            f"{what} has no {path!r}; the pre-LayerNorm decomposition needs it"
        ) from None


def _pre_norm_parts(block: nn.Module, paths: _PreNormPaths, what: str) -> PreNormParts:
    def part(path: str) -> nn.Module:
        return _named_part(block, path, what)

    def norm(path: str) -> NormParams:
        return paths.norm(part(path), f"{what}'s {path}")

    output = f"{what}'s {paths.attention_output}"
    return PreNormParts(
        norm1=norm(paths.norm1),
        value=part(paths.value),
        value_chunk=paths.value_chunk,
        attention_output=part(paths.attention_output),
        output_projection=_projection(part(paths.attention_output), output),
        norm2=norm(paths.norm2),
        mlp=part(paths.mlp),
    )

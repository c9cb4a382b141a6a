#!/usr/bin/env python3
r"""The modules of one post-LayerNorm encoder block that GlobEnc's
decomposition reads (the block ``out1 = LN1(Attn(x) + x)``, ``out2 =
LN2(FFN(out1) + out1)``)."""

from dataclasses import dataclass
from typing import Tuple

import torch
from torch import nn, Tensor

__all__ = ["BlockParts"]


@dataclass(frozen=True)
class BlockParts:
    r"""Modules of one post-LN encoder block used by norm-based decompositions.

    ``value`` maps ``[batch, pos, d_model] -> [batch, pos, heads * head_dim]``
    (bias included; only its output is used, so a wrapped projection stays
    wrapped); ``attention_output`` is the projection after the heads (``W_O``,
    ``b_O``), whose weight is read; ``layernorm1`` follows attention +
    residual, ``layernorm2`` follows feed-forward + residual, and their inputs
    give each position's statistics. Weights are read when used, through
    :meth:`parameter`.
    """

    value: nn.Module
    attention_output: nn.Linear
    layernorm1: nn.LayerNorm
    layernorm2: nn.LayerNorm

    def parameter(self, module: nn.Module, name: str) -> Tensor:
        r"""``module``'s parameter ``name``, detached."""
        value: Tensor = getattr(module, name).detach()
        return value

    @property
    def output_weight(self) -> Tensor:  # [d, heads * head_dim]
        return self.parameter(self.attention_output, "weight")

    @property
    def norm1(self) -> Tuple[Tensor, float]:
        r"""LN1's ``(gamma [d], eps)``."""
        return self._layer_norm(self.layernorm1)

    @property
    def norm2(self) -> Tuple[Tensor, float]:
        r"""LN2's ``(gamma [d], eps)``."""
        return self._layer_norm(self.layernorm2)

    def _layer_norm(self, norm: nn.LayerNorm) -> Tuple[Tensor, float]:
        if getattr(norm, "weight", None) is None:  # elementwise_affine=False
            return torch.ones(norm.normalized_shape), float(norm.eps)
        return self.parameter(norm, "weight"), float(norm.eps)

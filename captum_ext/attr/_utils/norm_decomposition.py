#!/usr/bin/env python3
r"""GlobEnc's decomposition of one transformer layer in factored form, shared by
the post-LN encoder and the pre-LN decoder decompositions
(:mod:`captum_ext.attr._core.globenc`,
:mod:`captum_ext.attr._utils.decoder_decomposition`)."""

from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["Factors", "single_call", "through_norm"]


@dataclass
class Factors:
    r"""One layer's decomposition in factored form.

    Source ``j`` contributes to receiving token ``i`` the vector
    ``scale[i] * (sum_h attention[h, i, j] * source[h, j] + 1[i = j] residual[i])``
    with ``source[h, j] = w_out[h]^T value[j, h]``. A LayerNorm acts on every such
    vector as a fixed linear map (centring, then ``gamma``) times a per-receiver
    factor ``1 / sqrt(Var(pre_ln_i) + eps)``, so it is folded into ``w_out``,
    ``residual`` and ``scale`` instead of being applied to the ``n^2`` vectors.
    """

    attention: Tensor  # [batch, heads, pos, pos]
    value: Tensor  # [batch, pos, heads, head_dim]
    w_out: Tensor  # [heads, head_dim, d]
    residual: Optional[Tensor]  # [batch, pos, d]; None for variant "N"
    scale: Tensor  # [batch, pos]

    @classmethod
    def of_attention(
        cls,
        attention: Tensor,
        value: Tensor,
        output_weight: Tensor,
        residual: Optional[Tensor],
    ) -> "Factors":
        r"""The attention sublayer before any norm, ``W_O``'s bias left out,
        plus ``residual`` if given: ``value`` ``[batch, pos, heads, head_dim]``
        (one per query head), ``output_weight`` ``W_O`` ``[d, heads *
        head_dim]``."""
        batch, pos, heads, head_dim = value.shape
        weight = output_weight.to(value.dtype).view(-1, heads, head_dim)
        w_out = weight.permute(1, 2, 0)  # [heads, head_dim, d]
        return cls(attention, value, w_out, residual, value.new_ones(batch, pos))

    def _heads(self) -> Tuple[Tensor, Tensor]:
        r"""Mixing weights ``[batch, j, i, k]`` and sources ``[batch, j, k, d]``
        of ``vector_ij = scale[i] * sum_k weights[j, i, k] * sources[j, k]``. The
        residual, if any, is one more head ``k`` attending only to itself."""
        weights = self.attention.permute(0, 3, 2, 1)  # [batch, j, i, heads]
        sources = torch.einsum("bjhv,hvd->bjhd", self.value, self.w_out)  # f_h(x_j)
        if self.residual is None:
            return weights, sources
        batch, pos = self.scale.shape
        own = torch.eye(pos, dtype=weights.dtype, device=weights.device)
        weights = torch.cat([weights, own.expand(batch, pos, pos)[..., None]], -1)
        return weights, torch.cat([sources, self.residual[:, :, None]], dim=2)

    def vectors(self) -> Tensor:
        r"""Every decomposed vector, ``[batch, pos (i), pos (j), d]``. Memory is
        O(n^2 d): for inspection; :meth:`norms` never forms it."""
        weights, sources = self._heads()
        mixed = torch.einsum("bjik,bjkd->bijd", weights, sources)
        return self.scale[:, :, None, None] * mixed

    def norms(self) -> Tensor:
        r"""``||vector_ij||`` ``[batch, pos, pos]`` from per-source Gram matrices:
        ``||sum_k w_k s_k||^2 = sum_kl w_k w_l <s_k, s_l>``, O(n^2 heads^2) work
        and O(n^2 heads) memory instead of O(n^2 d)."""
        weights, sources = self._heads()
        gram = sources @ sources.transpose(-1, -2)  # [batch, j, heads, heads]
        squared = ((weights @ gram) * weights).sum(-1).transpose(1, 2)  # [b, i, j]
        return self.scale[:, :, None] * squared.clamp(min=0).sqrt()


def single_call(store: List[Tensor], name: str, layer: int) -> Tensor:
    r"""The one tensor a hook captured from block ``layer``'s ``name`` in one
    forward pass."""
    if len(store) != 1:
        raise RuntimeError(
            f"GlobEnc expected one call of block {layer}'s {name} per forward pass, "
            f"saw {len(store)}; the model reuses or skips the module"
        )
    return store[0]


def _centred(vectors: Tensor) -> Tensor:
    return vectors - vectors.mean(-1, keepdim=True)


def through_norm(
    factors: Factors, norm_input: Tensor, gamma: Tensor, eps: float, centred: bool
) -> Factors:
    r"""``N(v)`` without the norm's bias for every decomposed vector ``v`` of a
    sum whose real norm input is ``norm_input`` ``[batch, pos, d]``: a LayerNorm
    (``centred``) ``gamma * (v - mean(v)) / sqrt(Var(norm_input) + eps)``, an
    RMSNorm ``gamma * v / sqrt(mean(norm_input^2) + eps)``. Both are linear in
    ``v`` once the position's statistics are fixed, so the vectors of a sum map
    to a sum: ``sum_v N(v) + bias = N(sum_v v)``."""
    gamma = gamma.to(device=norm_input.device, dtype=norm_input.dtype)  # [d]
    if centred:
        spread = norm_input.var(-1, unbiased=False)  # [batch, pos]
    else:
        spread = norm_input.pow(2).mean(-1)
    std = (spread + eps).sqrt()  # [batch, pos]
    linear = _centred if centred else _identity
    residual = factors.residual
    return replace(
        factors,
        w_out=gamma * linear(factors.w_out),
        residual=None if residual is None else gamma * linear(residual),
        scale=factors.scale / std,
    )


def _identity(vectors: Tensor) -> Tensor:
    return vectors

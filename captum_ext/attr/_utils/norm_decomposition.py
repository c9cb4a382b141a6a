#!/usr/bin/env python3
r"""GlobEnc's decomposition of one transformer layer in factored form, shared by
the post-LN encoder and the pre-LN decoder decompositions
(:mod:`captum_ext.attr._core.globenc`,
:mod:`captum_ext.attr._utils.decoder_decomposition`)."""

from dataclasses import dataclass, replace
from functools import partial
from typing import Iterator, List, Optional, Tuple

import torch
from torch import Tensor

from captum_ext.adapters import AttentionInputs
from captum_ext.attr._utils.rollout import RowBlocks

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

    The attention comes a block of receiving rows at a time (the model's own
    map in one block for eager attention, recomputed blocks otherwise), and so
    do the norms (:meth:`norm_blocks`): no ``[pos, pos]`` matrix is needed.
    """

    attention: RowBlocks  # () -> (first row, [batch, heads, rows, pos]) blocks
    value: Tensor  # [batch, pos, heads, head_dim]
    w_out: Tensor  # [heads, head_dim, d]
    residual: Optional[Tensor]  # [batch, pos, d]; None for variant "N"
    scale: Tensor  # [batch, pos]

    @classmethod
    def of_attention(
        cls,
        attention: AttentionInputs,
        value: Tensor,
        output_weight: Tensor,
        residual: Optional[Tensor],
    ) -> "Factors":
        r"""The attention sublayer before any norm, ``W_O``'s bias left out,
        plus ``residual`` if given: ``value`` ``[batch, pos, heads, head_dim]``
        (one per query head, in the work dtype), ``output_weight`` ``W_O`` ``[d,
        heads * head_dim]``."""
        batch, pos, heads, head_dim = value.shape
        weight = output_weight.to(value.dtype).view(-1, heads, head_dim)
        w_out = weight.permute(1, 2, 0)  # [heads, head_dim, d]
        blocks = partial(attention.probability_blocks, value.dtype)
        return cls(blocks, value, w_out, residual, value.new_ones(batch, pos))

    def _sources(self) -> Tensor:
        r"""Sources ``[batch, j, k, d]``: ``f_h(x_j)`` per head ``k``; the
        residual, if any, is one more head attending only to itself."""
        sources = torch.einsum("bjhv,hvd->bjhd", self.value, self.w_out)  # f_h(x_j)
        if self.residual is None:
            return sources
        return torch.cat([sources, self.residual[:, :, None]], dim=2)

    def _weights(self, start: int, attention: Tensor) -> Tensor:
        r"""Mixing weights ``[batch, j, rows, k]`` of receiving rows ``start ..``
        from their attention ``[batch, heads, rows, pos]``:
        ``vector_ij = scale[i] * sum_k weights[j, i, k] * sources[j, k]``."""
        weights = attention.permute(0, 3, 2, 1)  # [batch, j, rows, heads]
        if self.residual is None:
            return weights
        batch, pos, rows = weights.shape[:3]
        sources = torch.arange(pos, device=weights.device)[:, None]
        receivers = torch.arange(start, start + rows, device=weights.device)
        own = (sources == receivers).to(weights.dtype)  # [j, rows]: 1[i = j]
        return torch.cat([weights, own.expand(batch, pos, rows)[..., None]], -1)

    def vectors(self) -> Tensor:
        r"""Every decomposed vector, ``[batch, pos (i), pos (j), d]``. Memory is
        O(n^2 d): for inspection; :meth:`norm_blocks` never forms it."""
        sources = self._sources()
        mixed = [
            torch.einsum("bjik,bjkd->bijd", self._weights(start, block), sources)
            for start, block in self.attention()
        ]
        return self.scale[:, :, None, None] * torch.cat(mixed, dim=1)

    def norm_blocks(self) -> Iterator[Tuple[int, Tensor]]:
        r"""``||vector_ij||`` a block of receiving rows at a time: ``(first row,
        [batch, rows, pos])``, from per-source Gram matrices,
        ``||sum_k w_k s_k||^2 = sum_kl w_k w_l <s_k, s_l>``: O(n^2 heads^2) work;
        memory O(n heads^2) plus one block (O(rows n heads)) instead of O(n^2 d)."""
        sources = self._sources()
        gram = sources @ sources.transpose(-1, -2)  # [batch, j, k, k]
        for start, block in self.attention():
            weights = self._weights(start, block)  # [batch, j, rows, k]
            # In place: the block's temporaries are what grows with the rows.
            squared = (weights @ gram).mul_(weights).sum(-1).transpose(1, 2)
            scale = self.scale[:, start : start + squared.shape[1], None]
            yield start, scale * squared.clamp(min=0).sqrt()  # [batch, rows, j]

    def norms(self) -> Tensor:
        r"""Every ``||vector_ij||``, ``[batch, pos, pos]`` (:meth:`norm_blocks`
        joined)."""
        return torch.cat([block for _, block in self.norm_blocks()], dim=1)


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

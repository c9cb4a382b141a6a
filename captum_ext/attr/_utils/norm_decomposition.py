#!/usr/bin/env python3
r"""GlobEnc's decomposition of one transformer layer in factored form, shared by
the post-LN encoder and the pre-LN decoder decompositions
(:mod:`captum_ext.attr._core.layer.globenc`,
:mod:`captum_ext.attr._utils.decoder_decomposition`)."""

from dataclasses import dataclass, replace
from functools import partial
from typing import Iterator, Optional, Tuple

import torch
from torch import Tensor

from captum_ext._utils.attention_inputs import AttentionInputs
from captum_ext.attr._utils.rollout import RowBlocks

__all__ = ["Factors", "through_norm"]


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

    def _head_sources(self) -> Tensor:
        r"""``f_h(x_j)`` per head, ``[batch, j, heads, d]``."""
        return torch.einsum("bjhv,hvd->bjhd", self.value, self.w_out)

    def _sources(self) -> Tensor:
        r"""Sources ``[batch, j, k, d]``: ``f_h(x_j)`` per head ``k``; the
        residual, if any, is one more head attending only to itself."""
        sources = self._head_sources()
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
        [batch, rows, pos])``, from per-source Gram matrices of the heads,
        ``||sum_h w_h s_h||^2 = sum_hk w_h w_k <s_h, s_k>``: O(n^2 heads^2) work;
        memory O(n heads^2) plus one block (O(rows n heads)) instead of O(n^2 d).
        The residual adds to the ``n`` vectors with ``i = j`` only, ``2 sum_h w_h
        <s_h, r_j> + ||r_j||^2``, so the blocks carry the heads alone."""
        heads = self._head_sources()  # [batch, j, heads, d]
        gram = heads @ heads.transpose(-1, -2)  # [batch, j, heads, heads]
        own = self._own_terms(heads)  # ([batch, j, heads], [batch, j]) or None
        for start, block in self.attention():  # block: [batch, heads, rows, pos]
            weights = block.permute(0, 3, 2, 1).contiguous()  # [batch, j, rows, heads]
            # In place: the block's temporaries are what grows with the rows.
            squared = (weights @ gram).mul_(weights).sum(-1).transpose(1, 2)
            if own is not None:
                _add_own_terms(squared, block, start, *own)
            scale = self.scale[:, start : start + squared.shape[1], None]
            yield start, scale * squared.clamp(min=0).sqrt()  # [batch, rows, j]

    def _own_terms(self, heads: Tensor) -> Optional[Tuple[Tensor, Tensor]]:
        r"""For the residual of source ``j``: ``(2 <s_h, r_j>`` ``[batch, j,
        heads]``, ``||r_j||^2`` ``[batch, j])``; None without a residual."""
        if self.residual is None:
            return None
        cross = 2 * (heads @ self.residual[..., None]).squeeze(-1)
        return cross, self.residual.pow(2).sum(-1)

    def norms(self) -> Tensor:
        r"""Every ``||vector_ij||``, ``[batch, pos, pos]`` (:meth:`norm_blocks`
        joined)."""
        return torch.cat([block for _, block in self.norm_blocks()], dim=1)


def _add_own_terms(
    squared: Tensor, block: Tensor, start: int, cross: Tensor, own: Tensor
) -> None:
    r"""Adds, in place, the residual's terms to the squared norms
    ``squared[:, r, start + r]`` (``[batch, rows, pos]``) of the block's rows
    ``start ..``, whose attention is ``block`` ``[batch, heads, rows, pos]``."""
    rows = squared.shape[1]
    diagonal = block.diagonal(offset=start, dim1=2, dim2=3)  # [batch, heads, rows]
    sources = slice(start, start + rows)
    terms = (diagonal.transpose(1, 2) * cross[:, sources]).sum(-1) + own[:, sources]
    squared.diagonal(offset=start, dim1=1, dim2=2).add_(terms)  # [batch, rows]


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

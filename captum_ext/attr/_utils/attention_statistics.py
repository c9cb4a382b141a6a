#!/usr/bin/env python3
r"""The attention statistics the methods read, reduced one block of query rows
at a time from
:class:`~captum_ext._utils.attention_inputs.AttentionInputs`, so that memory
stays linear in the prompt whatever the attention implementation (with eager
maps the one block is the whole map, and the results are exactly those of the
map).

Every statistic averages over the :math:`H` heads of block :math:`l`,
:math:`\bar{A}^l = \frac{1}{H}\sum_h A^l_h` ``[query, key]``.
"""

from functools import partial
from typing import Iterator, Optional, Sequence, Tuple

import torch
from torch import Tensor

from captum_ext._utils.attention_inputs import AttentionInputs
from captum_ext.attr._utils.rollout import rollout_rows_down, rollout_rows_in_blocks

__all__ = [
    "attention_received",
    "attention_received_until",
    "attention_rows_per_layer",
    "head_mean_blocks",
    "rolled_out_attention_rows",
]


def head_mean_blocks(
    layer: AttentionInputs, dtype: torch.dtype
) -> Iterator[Tuple[int, Tensor]]:
    r""":math:`\bar{A}^l` in blocks of query rows: ``(first row, [batch, rows,
    k])`` in ``dtype``."""
    for start, block in layer.probability_blocks(dtype):
        yield start, block.mean(1)


def attention_received(
    layers: Sequence[AttentionInputs], query_weights: Tensor
) -> Tensor:
    r"""Attention each key receives, weighted over the queries, per block:
    :math:`\sum_q w_q \bar{A}^l[q, k]`, ``[batch, L, k]`` in ``query_weights``'
    dtype (``query_weights`` ``[batch, q]``)."""
    dtype = query_weights.dtype
    per_layer = []
    for layer in layers:
        total: Optional[Tensor] = None
        for start, block in layer.probability_blocks(dtype):
            weights = query_weights[:, start : start + block.shape[2]]
            part = torch.einsum("bhqk,bq->bk", block, weights) / block.shape[1]
            total = part if total is None else total + part
        assert total is not None  # every layer has at least one block
        per_layer.append(total)
    return torch.stack(per_layer, dim=1)


def attention_received_until(
    layers: Sequence[AttentionInputs], query_weights: Tensor, rows: Tensor
) -> Tensor:
    r"""Cumulative attention each key receives from the queries up to each
    position of ``rows`` ``[T]``: :math:`\sum_{q \le r_t} w_q \bar{A}^l[q, k]`,
    ``[batch, T, L, k]`` in ``query_weights``' dtype (``query_weights``
    ``[batch, q]``). A running sum carries each block's total into the next."""
    dtype = query_weights.dtype
    per_layer = []
    for layer in layers:
        out, running = None, None
        for start, mean in head_mean_blocks(layer, dtype):  # [batch, rows, k]
            stop = start + mean.shape[1]
            summed = (mean * query_weights[:, start:stop, None]).cumsum(1)
            if running is not None:
                summed = summed + running[:, None]
            if out is None:
                out = summed.new_zeros(len(summed), len(rows), summed.shape[-1])
            inside = (rows >= start) & (rows < stop)  # [T]
            out[:, inside] = summed[:, rows[inside] - start]
            running = summed[:, -1]
        per_layer.append(out)
    return torch.stack(per_layer, dim=2)  # type: ignore[arg-type]


def rolled_out_attention_rows(
    layers: Sequence[AttentionInputs], positions: Tensor, dtype: torch.dtype
) -> Tensor:
    r"""Rows ``positions`` ``[batch, rows]`` of :math:`\bar{A}^L \bar{A}^{L-1}
    \cdots \bar{A}^1` (one layer: of :math:`\bar{A}^L`), ``[batch, rows, k]`` in
    ``dtype``: the shared rollout, fed a block of rows of each layer at a time."""
    return rollout_rows_in_blocks(
        [partial(head_mean_blocks, layer, dtype) for layer in layers],
        positions,
    )


def attention_rows_per_layer(
    layers: Sequence[AttentionInputs],
    positions: Tensor,
    dtype: torch.dtype,
    rollout: bool,
) -> Tensor:
    r"""Rows ``positions`` ``[batch, rows]`` of every block's
    :math:`\bar{A}^l` (``rollout=False``) or of the rollout from the top down
    to it, :math:`\bar{A}^L \cdots \bar{A}^l` (``rollout=True``), first block
    first: ``[batch, rows, L, k]`` in ``dtype``."""
    blocks = [partial(head_mean_blocks, layer, dtype) for layer in layers]
    if rollout:
        per_layer = list(rollout_rows_down(blocks, positions))[::-1]
    else:
        per_layer = [rollout_rows_in_blocks([one], positions) for one in blocks]
    return torch.stack(per_layer, dim=2)

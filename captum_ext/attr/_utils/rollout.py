#!/usr/bin/env python3
r"""Rollout: the product of per-layer token-to-token matrices, shared by GlobEnc
and the raw attention rollout baseline (one implementation, as in inseq).

Every matrix is ``[batch, pos (receiving token i), pos (source token j)]`` and
the rollout of layers ``1..L`` is the plain product

.. math::
    G^1 = M^1, \qquad G^l = M^l G^{l-1}

with no residual added and no renormalisation: callers decide what the
per-layer matrices contain (GlobEnc's norms already hold the residual).
"""

from typing import List, Sequence

import torch
from torch import Tensor

__all__ = ["rollout_products", "rollout_row", "rollout_rows"]


def _check_matrices(matrices: Sequence[Tensor]) -> None:
    if len(matrices) == 0:
        raise ValueError("rollout needs at least one layer's matrix, got none")
    shapes = {tuple(m.shape) for m in matrices}
    if len(shapes) != 1 or len(next(iter(shapes))) != 3:
        raise ValueError(
            "rollout needs per-layer matrices of one shape [batch, pos, pos], got "
            f"shapes {sorted(shapes)}"
        )


def rollout_products(matrices: Sequence[Tensor]) -> List[Tensor]:
    r"""Every partial product ``G^1 .. G^L``.

    Args:
        matrices (sequence of Tensor): ``M^1 .. M^L``, first layer first, each
            ``[batch, pos, pos]``.

    Returns:
        list of Tensor: ``G^l = M^l M^(l-1) ... M^1``, each ``[batch, pos, pos]``.
    """
    _check_matrices(matrices)
    rolled = [matrices[0]]
    for matrix in matrices[1:]:
        rolled.append(matrix @ rolled[-1])
    return rolled


def rollout_row(matrices: Sequence[Tensor], position: Tensor) -> Tensor:
    r"""Row ``position`` of ``G^L``, ``e_p^T M^L M^(L-1) ... M^1``, from
    vector-matrix products only (O(L n^2) per example instead of the O(L n^3) of
    :func:`rollout_products`).

    Args:
        matrices (sequence of Tensor): ``M^1 .. M^L``, first layer first, each
            ``[batch, pos, pos]``.
        position (Tensor): ``[batch]``, the row to read in each example (the
            position the model classifies from).

    Returns:
        Tensor: ``[batch, pos]``, how much each source token reaches ``position``
        after the last layer.
    """
    return rollout_rows(matrices, position[:, None])[:, 0]


def rollout_rows(matrices: Sequence[Tensor], positions: Tensor) -> Tensor:
    r"""Several rows of ``G^L`` per example, as :func:`rollout_row` (a causal
    LM reads one row per generated token: the predicting positions).

    Args:
        matrices (sequence of Tensor): ``M^1 .. M^L``, first layer first, each
            ``[batch, pos, pos]``.
        positions (Tensor): ``[batch, rows]``, the rows to read in each example.

    Returns:
        Tensor: ``[batch, rows, pos]``: row ``r`` is row ``positions[:, r]`` of
        ``G^L``.
    """
    _check_matrices(matrices)
    examples = torch.arange(len(positions), device=positions.device)[:, None]
    rows = matrices[-1][examples, positions]  # [batch, rows, pos]
    for matrix in reversed(matrices[:-1]):
        rows = torch.einsum("bri,bij->brj", rows, matrix)
    return rows

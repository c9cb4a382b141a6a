#!/usr/bin/env python3
r"""Rollout: the product of per-layer token-to-token matrices, shared by GlobEnc
and the raw attention rollout baseline (one implementation, as in inseq).

Every matrix is ``[batch, pos (receiving token i), pos (source token j)]`` and
the rollout of layers ``1..L`` is the plain product

.. math::
    G^1 = M^1, \qquad G^l = M^l G^{l-1}

with no residual added and no renormalisation: callers decide what the
per-layer matrices contain (GlobEnc's norms already hold the residual).

Products of unnormalised matrices grow with depth (GlobEnc's norms multiply
to about ``30^L`` on a random Llama, past float32's range at 32 layers), so
the rows carried down are kept near 1 by powers of two, which is exact: the
result is bit for bit the plain product wherever that is representable.
"""

import math
import warnings
from functools import partial
from typing import Callable, Iterator, List, Sequence, Tuple

import torch
from torch import Tensor

__all__ = [
    "rollout_products",
    "rollout_row",
    "rollout_rows",
    "rollout_rows_down",
    "rollout_rows_in_blocks",
    "RowBlocks",
]

# A layer's matrix a block of rows at a time: (first row, [batch, rows, pos]).
RowBlocks = Callable[[], Iterator[Tuple[int, Tensor]]]


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
    return rollout_rows_in_blocks(
        [partial(_one_block, matrix) for matrix in matrices], positions
    )


def _one_block(matrix: Tensor) -> Iterator[Tuple[int, Tensor]]:
    yield 0, matrix


def rollout_rows_in_blocks(layers: Sequence[RowBlocks], positions: Tensor) -> Tensor:
    r"""Rows ``positions`` of ``G^L`` as :func:`rollout_rows`, from matrices
    given a block of rows at a time, so no layer's whole ``[pos, pos]`` matrix
    needs to exist: the rows are read from the last layer's blocks, then each
    lower layer's blocks are multiplied in as they come,
    ``r <- sum_blocks r[:, :, block] M^l[block, :]``. Memory: the rows and one
    block. Each row is carried divided by a power of two (exact) and scaled
    back at the end; a row whose value would exceed its dtype's range is
    returned divided by a power of two instead, largest magnitude in
    ``[0.5, 1)``, with a warning (a positive factor per row keeps its ranking
    and every comparison within the row).

    Args:
        layers (sequence of callable): for ``M^1 .. M^L``, first layer first, a
            callable returning an iterator of ``(first row, [batch, rows,
            pos])`` blocks that together cover the matrix.
        positions (Tensor): ``[batch, rows]``, the rows to read in each example.

    Returns:
        Tensor: ``[batch, rows, pos]``: row ``r`` is row ``positions[:, r]`` of
        ``G^L``.
    """
    for rows, exponents in _carried_rows(layers, positions):
        pass  # only the last product's rows are returned
    return _scaled_back(rows, exponents, len(layers))


def rollout_rows_down(
    layers: Sequence[RowBlocks], positions: Tensor
) -> Iterator[Tensor]:
    r"""The rows ``positions`` of every partial product from the top, in turn:
    of :math:`M^L`, of :math:`M^L M^{L-1}`, ..., of :math:`G^L` (the last),
    each ``[batch, rows, pos]``, from one pass over each layer's blocks (as
    :func:`rollout_rows_in_blocks`, which keeps only the last). The
    :math:`l`-th from the end says how much each token of block :math:`l`'s
    input reaches ``positions`` after the last block. Rows are carried and
    scaled back as in :func:`rollout_rows_in_blocks`."""
    for depth, (rows, exponents) in enumerate(_carried_rows(layers, positions), 1):
        yield _scaled_back(rows, exponents, depth)


def _carried_rows(
    layers: Sequence[RowBlocks], positions: Tensor
) -> Iterator[Tuple[Tensor, Tensor]]:
    r"""For every partial product from the top, its rows ``positions`` divided
    by ``2^e`` per row (largest magnitude in ``[0.5, 1)``) and ``e`` ``[batch,
    rows, 1]``: the rows stay near 1 however deep the product."""
    if len(layers) == 0:
        raise ValueError("rollout needs at least one layer's matrix, got none")
    rows, exponents = _near_one(_read_rows(layers[-1](), positions))
    yield rows, exponents
    for blocks in reversed(layers[:-1]):
        product = None
        for start, block in blocks():
            part = torch.einsum(
                "bri,bij->brj", rows[:, :, start : start + block.shape[1]], block
            )
            product = part if product is None else product + part
        assert product is not None
        rows, exponent = _near_one(product)
        exponents = exponents + exponent
        yield rows, exponents


def _near_one(rows: Tensor) -> Tuple[Tensor, Tensor]:
    r"""``rows`` ``[batch, rows, pos]`` divided by ``2^e`` per row, largest
    magnitude in ``[0.5, 1)`` (an all-zero row keeps ``e = 0``), and ``e``
    ``[batch, rows, 1]``."""
    _, exponent = torch.frexp(rows.abs().amax(-1, keepdim=True))
    return torch.ldexp(rows, -exponent), exponent


def _scaled_back(rows: Tensor, exponents: Tensor, layers: int) -> Tensor:
    r"""``rows * 2^exponents`` where that stays in the dtype's range; the
    other rows as they are, with a warning."""
    # rows are below 1, and 2^e itself must be finite
    fits = exponents < math.frexp(torch.finfo(rows.dtype).max)[1]
    if not bool(fits.all()):
        warnings.warn(
            f"the rollout's product over {layers} layers exceeds {rows.dtype}'s "
            f"range (up to 2^{int(exponents.max())}) in "
            f"{int((~fits).sum())} row(s); those rows are returned divided by a "
            "power of two, largest magnitude in [0.5, 1): rankings and comparisons "
            "within a row hold, values across rows do not compare",
            stacklevel=3,
        )
    return torch.where(fits, torch.ldexp(rows, torch.where(fits, exponents, 0)), rows)


def _read_rows(blocks: Iterator[Tuple[int, Tensor]], positions: Tensor) -> Tensor:
    r"""Rows ``positions`` ``[batch, rows]`` of a matrix given in blocks."""
    rows = None
    for start, block in blocks:  # [batch, block rows, pos]
        inside = (positions >= start) & (positions < start + block.shape[1])
        index = (positions - start).clamp(0, block.shape[1] - 1)
        picked = block.gather(1, index[..., None].expand(-1, -1, block.shape[2]))
        rows = picked if rows is None else torch.where(inside[..., None], picked, rows)
    assert rows is not None
    return rows

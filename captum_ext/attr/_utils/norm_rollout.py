#!/usr/bin/env python3
r"""GlobEnc's per-layer norm matrices, masked and rolled out a block of
receiving rows at a time, and the check of its ``variant`` argument."""

from typing import Callable, Iterator, List, Tuple

import torch
from torch import Tensor

from captum_ext.attr._utils.norm_decomposition import Factors
from captum_ext.attr._utils.rollout import rollout_rows_in_blocks, RowBlocks

__all__ = ["check_variant", "masked_blocks", "rolled_out_rows"]


def masked_blocks(
    factors: Callable[[], Factors], valid: Tensor
) -> Iterator[Tuple[int, Tensor]]:
    r"""One layer's ``N^l`` a block of rows at a time, its factors built (in
    the work dtype) only now: zero on pad rows and pad columns (also where a
    padded row is NaN, as Llama's eager mask makes it in float64)."""
    for start, block in factors().norm_blocks():  # [batch, rows, pos]
        rows = valid[:, start : start + block.shape[1]]
        yield start, torch.where(rows[:, :, None] & valid[:, None, :], block, 0)


def rolled_out_rows(
    layers: List[RowBlocks], positions: Tensor, rollout: bool
) -> Tensor:
    r"""Rows ``positions`` ``[batch, rows]`` of ``G^L`` (of ``N^L`` alone
    without ``rollout``), ``[batch, rows, pos]``: the top layer's rows, then
    every lower layer multiplied in a block at a time."""
    return rollout_rows_in_blocks(layers if rollout else layers[-1:], positions)


def check_variant(variant: str, variants: Tuple[str, ...]) -> None:
    r"""Raises unless ``variant`` is one of ``variants``, the decompositions
    defined for the model's kind of block."""
    if variant in variants:
        return
    if variant == "N_resln":
        raise ValueError(
            'variant "N_resln" (attention + residual + the LayerNorm after them) '
            "has no counterpart in a pre-LayerNorm decoder: no norm acts on the "
            "residual stream between the attention and MLP sublayers (norm2 "
            f"only feeds the MLP); use one of {variants}"
        )
    raise ValueError(f"variant must be one of {variants}, got {variant!r}")

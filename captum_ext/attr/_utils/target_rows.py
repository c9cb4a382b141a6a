#!/usr/bin/env python3
r"""A chunk's part of a per-example target."""

from captum._utils.typing import TargetType
from torch import Tensor

__all__ = ["target_rows"]


def target_rows(target: TargetType, rows: slice, batch_size: int) -> TargetType:
    r"""The chunk's part of a per-example target (a list or a 1-d tensor); a
    target shared by every example (None, an int, a 0-d tensor) as it is."""
    if isinstance(target, list) or (isinstance(target, Tensor) and target.dim() == 1):
        if len(target) != batch_size:
            raise ValueError(
                f"target has {len(target)} entries but the batch has {batch_size} "
                "examples"
            )
        return target[rows]
    return target

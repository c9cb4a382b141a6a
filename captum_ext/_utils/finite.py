#!/usr/bin/env python3
r"""Non-finite values (NaN, inf) in a forward pass or in attributions are an
error, never a silent result: one check, one message, naming the examples."""

from typing import Optional

import torch
from torch import Tensor

__all__ = ["check_finite"]


def check_finite(values: Tensor, what: str, examples: Optional[Tensor] = None) -> None:
    r"""Raises ``FloatingPointError`` naming the examples where ``values`` holds
    NaN or inf.

    Args:
        values (Tensor): ``[rows, ...]``.
        what (str): what the values are, e.g. ``"the model's logits"``.
        examples (Tensor, optional): ``[rows]``, the example each row belongs to
            (rows of a chunk, several per example). Default: None (row ``i`` is
            example ``i``)
    """
    bad = ~values.isfinite()
    if not bool(bad.any()):
        return
    rows = bad.reshape(len(values), -1).any(-1).nonzero().flatten()
    named = rows if examples is None else torch.unique(examples[rows])
    raise FloatingPointError(
        f"{what} contain NaN or inf for example(s) {named.tolist()}; check the "
        "model's weights and dtype (float16 overflows easily: try bfloat16 or "
        "float32)"
    )

#!/usr/bin/env python3
r"""Non-finite values (NaN, inf) in a forward pass or in attributions are an
error, never a silent result: one check, one message, naming the examples."""

from torch import Tensor

__all__ = ["check_finite"]


def check_finite(values: Tensor, what: str) -> None:
    r"""Raises ``FloatingPointError`` naming the examples (rows of dimension 0)
    where ``values`` holds NaN or inf.

    Args:
        values (Tensor): ``[batch, ...]``.
        what (str): what the values are, e.g. ``"the model's logits"``.
    """
    bad = ~values.isfinite()
    if not bool(bad.any()):
        return
    rows = bad.reshape(len(values), -1).any(-1).nonzero().flatten().tolist()
    raise FloatingPointError(
        f"{what} contain NaN or inf for example(s) {rows}; check the model's "
        "weights and dtype (float16 overflows easily: try bfloat16 or float32)"
    )

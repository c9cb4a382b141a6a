#!/usr/bin/env python3
r"""The target's logit at every position."""

from torch import Tensor

__all__ = ["at_target"]


def at_target(logits: Tensor, index: Tensor) -> Tensor:
    r"""``logits[b, i, index[b]]`` for every position: ``[batch, pos]``."""
    expanded = index[:, None, None].expand(-1, logits.shape[1], 1)
    return logits.gather(2, expanded)[..., 0]

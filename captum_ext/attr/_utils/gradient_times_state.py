#!/usr/bin/env python3
r"""CAT's per-layer score: the gradient times the hidden state, summed over the
hidden dimension, accumulated in float32 or wider."""

from typing import Sequence

import torch
from torch import Tensor

from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = ["gradient_times_state", "gradients_times_states"]


def gradients_times_states(hidden: Sequence[Tensor], grads: Sequence[Tensor]) -> Tensor:
    r"""``sum_d grad * hidden`` per layer and token: ``[batch, L, pos]``, in
    float32 or wider, one layer at a time."""
    # The terms cancel strongly (after a LayerNorm the gradient is nearly
    # orthogonal to the hidden state), so half-precision products lose the sum.
    return torch.stack(
        [gradient_times_state(h, g) for g, h in zip(grads, hidden)], dim=1
    )


def gradient_times_state(hidden: Tensor, gradient: Tensor) -> Tensor:
    r"""``sum_d gradient * hidden``, ``[batch, pos]``, in float32 or wider."""
    dtype = result_dtype(hidden.dtype)
    return (gradient.to(dtype) * hidden.to(dtype)).sum(-1)

#!/usr/bin/env python3
r"""The L2 norm of each token's state."""

from torch import Tensor

from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = ["token_norms"]


def token_norms(states: Tensor) -> Tensor:
    r"""The L2 norm of each token's state ``[batch, pos, d] -> [batch, pos]``,
    in float32 or wider: a bfloat16 sum of d squares is coarse."""
    norms: Tensor = states.to(result_dtype(states.dtype)).norm(dim=-1)
    return norms

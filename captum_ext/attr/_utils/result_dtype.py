#!/usr/bin/env python3
r"""The dtype of every method's scores (CONTRIBUTING, "Precision policy")."""

import torch

__all__ = ["result_dtype"]


def result_dtype(model_dtype: torch.dtype) -> torch.dtype:
    r"""The precision policy's output dtype: float32, or the model's dtype when it
    is wider (float64 models keep float64)."""
    return torch.promote_types(model_dtype, torch.float32)

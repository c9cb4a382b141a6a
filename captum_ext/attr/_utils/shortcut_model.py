#!/usr/bin/env python3
r"""The Hugging Face model of a method's shortcut."""

from typing import Any

from torch import nn

__all__ = ["shortcut_model"]


def shortcut_model(forward_func: Any, method: str) -> nn.Module:
    r"""``forward_func`` as the Hugging Face model of the shortcut (no modules
    named): a clear error for a plain function."""
    if not isinstance(forward_func, nn.Module):
        raise TypeError(
            f"{method} built from a forward function needs the modules it reads "
            f"(layer=...); without them pass a Hugging Face model, got "
            f"{type(forward_func).__name__}"
        )
    return forward_func

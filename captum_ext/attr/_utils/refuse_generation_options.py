#!/usr/bin/env python3
r"""The refusal of the shortcut's generation options on a method built from
modules."""

from typing import Any

__all__ = ["refuse_generation_options"]


def refuse_generation_options(method: str, **options: Any) -> None:
    r"""Raises naming the first option given (not None or False) that only the
    shortcut honours: explaining a causal LM's generated text needs the
    Hugging Face model itself, not a ``forward_func`` returning ``[batch, C]``."""
    for name, value in options.items():
        if value is not None and value is not False:
            raise ValueError(
                f"{method}'s {name} explains a causal LM's generated text, which "
                f"needs the shortcut: build {method} from the Hugging Face model "
                "itself, not from forward_func and layer modules"
            )

#!/usr/bin/env python3
r"""``internal_batch_size``: Captum's name for running a batch in chunks to bound
memory. One validation and one slicing rule for every method and metric."""

from typing import Any, List, Optional, Union

from torch import Tensor

from captum_ext._utils.positive_int import check_positive_int

__all__ = ["batch_slices", "check_internal_batch_size", "take_rows"]


def check_internal_batch_size(value: Optional[int]) -> Optional[int]:
    r"""Returns ``value`` unchanged if it is ``None`` or a positive int: the
    examples per chunk (:func:`~captum_ext._utils.positive_int.check_positive_int`).

    Raises:
        TypeError: ``value`` is not an int (``bool`` included).
        ValueError: ``value`` is zero or negative.
    """
    return check_positive_int(value, "internal_batch_size", "examples per chunk")


def batch_slices(batch_size: int, internal_batch_size: Optional[int]) -> List[slice]:
    r"""Consecutive slices of ``range(batch_size)`` of at most
    ``internal_batch_size`` rows each; one slice for ``None``."""
    step = check_internal_batch_size(internal_batch_size) or max(batch_size, 1)
    return [slice(start, start + step) for start in range(0, batch_size, step)]


def take_rows(value: Any, rows: Union[slice, Tensor], batch_size: int) -> Any:
    r"""``value[rows]`` for a tensor with one row per example (first dimension
    ``batch_size``, e.g. an attention mask or Integrated Gradients'
    ``baselines``); anything else is shared by every row and returned as it is."""
    if isinstance(value, Tensor) and value.dim() > 0 and len(value) == batch_size:
        return value[rows]
    return value

#!/usr/bin/env python3
r"""Captum's ``target`` of a classifier as one class index per example."""

import torch
from captum._utils.typing import TargetType
from torch import Tensor

__all__ = ["resolve_target"]


def resolve_target(target: TargetType, logits: Tensor) -> Tensor:
    r"""Turns Captum's ``target`` into one class index per example, ``[batch]``.

    ``None`` means each example's predicted class (argmax of ``logits``); an int or
    a 0-d tensor applies to every example; a list or 1-d tensor gives one class per
    example. Raises on a class out of range or a length that is not the batch size.
    """
    batch, num_classes = logits.shape
    if target is None:
        return logits.argmax(-1)
    if isinstance(target, tuple):
        raise ValueError(
            "target as a tuple indexes a multi-dimensional output; a classifier's "
            "output is [batch, classes], so pass an int, a list or a 1-d tensor"
        )
    index = torch.as_tensor(target, device=logits.device)
    if index.dtype.is_floating_point or index.dtype == torch.bool:
        raise ValueError(f"target must be integer class indices, got {target!r}")
    if index.dim() > 1:
        raise ValueError(
            "target must be an int or a 1-d list / tensor with one class per "
            f"example, got shape {tuple(index.shape)}; continuation ids "
            "[batch, T] need a causal LM (AutoModelForCausalLM)"
        )
    index = index.long().expand(batch) if index.dim() == 0 else index.long()
    if index.shape[0] != batch:
        raise ValueError(
            f"target has {index.shape[0]} entries but the batch has {batch} examples"
        )
    if bool(((index < 0) | (index >= num_classes)).any()):
        raise IndexError(
            f"target {index.tolist()} out of range for a model with {num_classes} "
            "output(s)"
        )
    return index

#!/usr/bin/env python3
r"""The ``attribute`` of a method built Captum's way, from ``forward_func`` and
the modules it reads: the inputs (any tensor: token ids, embeddings, pixel
values) and every per-example tensor of ``additional_forward_args`` run in
chunks of ``internal_batch_size`` examples; the forward function's outputs
``[batch, C]`` and the attributions are checked for NaN/inf."""

from typing import Any, Callable, Optional, Tuple

import torch
from captum._utils.common import _format_additional_forward_args
from captum._utils.typing import TargetType
from torch import Tensor

from captum_ext._utils.finite import check_finite
from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.row_chunks import batch_slices, take_rows
from captum_ext.attr._utils.target_rows import target_rows

__all__ = [
    "attribute_with_modules",
    "forward_logits",
    "ModuleChunkFn",
]

# (chunk inputs, the chunk's target, the chunk's additional forward args)
#   -> (attributions [chunk, ...], the forward function's outputs [chunk, C])
ModuleChunkFn = Callable[[Tensor, TargetType, Tuple[Any, ...]], Tuple[Tensor, Tensor]]


def forward_logits(
    forward_func: Callable[..., Any], inputs: Tensor, args: Tuple[Any, ...], method: str
) -> Tensor:
    r"""``forward_func(inputs, *args)``, which must be one tensor ``[batch, C]``
    (the outputs a class target selects from)."""
    logits = forward_func(inputs, *args)
    if not isinstance(logits, Tensor) or logits.dim() != 2:
        got = (
            f"shape {tuple(logits.shape)}"
            if isinstance(logits, Tensor)
            else type(logits).__name__
        )
        raise ValueError(
            f"{method}'s forward_func must return one tensor [batch, C] (e.g. "
            f"logits), got {got}; wrap a Hugging Face model with "
            "captum_ext.classifier_forward(model), or pass the model itself (the "
            "shortcut) to explain a causal LM's generated text"
        )
    return logits


def attribute_with_modules(
    forward_func: Callable[..., Any],
    inputs: Any,
    target: TargetType,
    additional_forward_args: Any,
    internal_batch_size: Optional[int],
    chunk_scores: ModuleChunkFn,
    method: str,
) -> Tensor:
    r"""``chunk_scores`` on consecutive chunks of at most ``internal_batch_size``
    examples (the whole batch for None), concatenated along dim 0. A module
    ``forward_func`` runs in eval semantics (its lock held, modes restored);
    a plain function runs as it is, as in Captum.

    Raises:
        TypeError: ``inputs`` is not one tensor.
        FloatingPointError: the forward function's outputs or the
            attributions hold NaN or inf (the message names the examples).
    """
    if not isinstance(inputs, Tensor):
        raise TypeError(
            f"{method} explains one input tensor [batch, ...] (token ids, "
            f"embeddings or pixel values), got {type(inputs).__name__}"
        )
    size = len(inputs)
    args = _format_additional_forward_args(additional_forward_args) or ()
    scores, peaks = [], []
    with eval_semantics(forward_func):
        for rows in batch_slices(size, internal_batch_size):
            chunk, outputs = chunk_scores(
                inputs[rows],
                target_rows(target, rows, size),
                tuple(take_rows(arg, rows, size) for arg in args),
            )
            scores.append(chunk)
            peaks.append(outputs.detach().abs().amax(-1))
    check_finite(torch.cat(peaks), f"{method}'s forward_func outputs")
    attributions = torch.cat(scores)
    check_finite(attributions, f"{method}'s attributions")
    return attributions

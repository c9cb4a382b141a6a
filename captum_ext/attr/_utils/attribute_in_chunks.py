#!/usr/bin/env python3
r"""``internal_batch_size`` and the non-finite check of every method: the parsed
batch runs in chunks of at most ``internal_batch_size`` examples, the chunks'
results are concatenated, and the model's logits and the attributions are
checked for NaN/inf over the whole batch, so an error names the example's row
in the caller's batch, not in a chunk."""

from typing import Any, Callable, Optional, Tuple

import torch
from captum._utils.typing import TargetType
from torch import nn, Tensor

from captum_ext._utils.finite import check_finite
from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.row_chunks import batch_slices, take_rows
from captum_ext._utils.token_batch import on_device, TokenBatch
from captum_ext.adapters import get_adapter, UnsupportedModelError
from captum_ext.attr._utils.target_rows import target_rows

__all__ = ["attribute_in_chunks"]

# (chunk of the batch, the chunk's target, **the chunk's per-example options)
#   -> (attributions, the model's logits)
ChunkFn = Callable[..., Tuple[Tensor, Tensor]]


def _execution_device(model: nn.Module, batch: TokenBatch) -> torch.device:
    r"""Where a Hugging Face model embeds its ids; any other module (a plain
    forward function) runs where the batch is."""
    try:
        return get_adapter(model).input_device()
    except UnsupportedModelError:
        return batch.input_ids.device


def attribute_in_chunks(
    model: nn.Module,
    batch: TokenBatch,
    target: TargetType,
    internal_batch_size: Optional[int],
    attribute_chunk: ChunkFn,
    method: str,
    /,
    **options: Any,
) -> Tensor:
    r"""Runs ``attribute_chunk(chunk, target, **options)`` on consecutive chunks
    of at most ``internal_batch_size`` examples (the whole batch for None) in
    ``model``'s eval semantics (holding its lock; mode restored afterwards) and
    concatenates the attributions along dim 0. A per-example ``target`` (a list
    or 1-d tensor) and tensor ``options`` whose first dimension is the batch
    size are sliced with the chunk. The other arguments are positional-only, so
    an option may share their names (Integrated Gradients' ``method``).

    Raises:
        TypeError, ValueError: a bad ``internal_batch_size`` (see
            :func:`~captum_ext._utils.row_chunks.check_internal_batch_size`).
        FloatingPointError: the model's outputs (the logits, or what the
            chunk function returns in their place) or the attributions hold NaN
            or inf; the message names the examples.
    """
    size = len(batch.input_ids)
    # Each chunk runs where the model embeds its ids (a model placed by
    # accelerate computes on its execution device: given ids elsewhere, its
    # top-level hook would hand back copies of the hidden states, outside the
    # graph); the attributions come back to the caller's device.
    caller, device = batch.input_ids.device, _execution_device(model, batch)
    scores, peaks = [], []
    with eval_semantics(model):
        for rows in batch_slices(size, internal_batch_size):
            chunk_scores, outputs = attribute_chunk(
                batch.select(rows).to(device),
                on_device(target_rows(target, rows, size), device),
                **{
                    k: on_device(take_rows(v, rows, size), device)
                    for k, v in options.items()
                },
            )
            scores.append(chunk_scores.to(caller))
            # Only each row's largest magnitude is kept for the NaN/inf check
            # (NaN and inf survive it), not the outputs themselves (with a
            # decoder, hidden states [chunk, pos, d]): memory stays one chunk's.
            peaks.append(outputs.detach().abs().flatten(1).amax(1).to(caller))
    check_finite(torch.cat(peaks), "the model's outputs")
    attributions = torch.cat(scores)
    check_finite(attributions, f"{method}'s attributions")
    return attributions

#!/usr/bin/env python3
r"""Whether a gradient method on a causal LM recomputes its blocks one at a
time (:class:`~captum_ext.attr._utils.block_recomputation.BlockRecomputation`)
or keeps the whole graph of one forward pass: the ``recompute`` option."""

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from captum_ext._utils.teacher_forcing import TeacherForcedBatch
from captum_ext.adapters import ModelAdapter, UnsupportedModelError
from captum_ext.attr._utils.backward_passes import free_device_memory
from captum_ext.attr._utils.block_recomputation import BlockRecomputation

__all__ = ["check_recompute", "recompute_by_default", "recomputed_scores"]

# The whole graph of a Llama-style model at long prompts, in bytes per token,
# per layer and per model dimension of one element: issue 42's H200 figure
# (Llama-7B shape, 8,192 tokens, bf16, one step per pass: 51.8 GB over
# 8,192 x 32 x 4,096 x 2 bytes = 24).
_WHOLE_GRAPH_PER_TOKEN_LAYER_DIM = 24
# Recomputation is the default on an accelerator once the whole graph would
# take more than this share of the free memory.
_WHOLE_GRAPH_SHARE = 0.5

# (the walk, targets_per_backward) -> the method's scores
WalkScores = Callable[[BlockRecomputation, Optional[int]], Tensor]


def check_recompute(recompute: Any) -> None:
    r"""Raises ``TypeError`` unless ``recompute`` is None, True or False."""
    if recompute is not None and not isinstance(recompute, bool):
        raise TypeError(f"recompute must be None, True or False, got {recompute!r}")


def recomputed_scores(
    adapter: ModelAdapter,
    forced: TeacherForcedBatch,
    recompute: Optional[bool],
    scores: WalkScores,
    targets_per_backward: Optional[int],
    method: str,
) -> Optional[Tensor]:
    r"""``scores(walk, targets_per_backward)`` where blocks are recomputed
    (``recompute=True``, or None and :func:`recompute_by_default`); None where
    the caller keeps the whole graph: ``recompute=False``, or None and the
    model's blocks cannot run one at a time (``recompute=True`` raises
    :class:`UnsupportedModelError` there)."""
    if recompute is False:
        return None
    tokens = forced.model_inputs()[0].numel()
    if recompute is None and not recompute_by_default(adapter, tokens):
        return None
    try:
        return scores(BlockRecomputation(adapter, method), targets_per_backward)
    except UnsupportedModelError:
        if recompute:
            raise
        return None


def recompute_by_default(adapter: ModelAdapter, tokens: int) -> bool:
    r"""Whether ``recompute=None`` recomputes blocks for ``tokens`` (examples x
    positions): always on a CPU (the walk costs about one more forward pass,
    a few percent of T backward passes, and keeps one block's graph instead
    of L); on an accelerator once the whole graph's estimated size exceeds
    half its free memory (the walk is slower there, by about a third), and
    where the free memory is unknown."""
    device = adapter.input_device()
    if device.type == "cpu":
        return True
    free = free_device_memory(device)
    if free is None:
        return True
    dtype = next(adapter.model.parameters()).dtype
    size = torch.finfo(dtype).bits // 8 if dtype.is_floating_point else 4
    graph = _WHOLE_GRAPH_PER_TOKEN_LAYER_DIM * tokens * adapter.num_layers
    graph *= adapter.hidden_size * size
    return graph > _WHOLE_GRAPH_SHARE * free

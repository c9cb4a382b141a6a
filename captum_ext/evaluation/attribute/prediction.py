#!/usr/bin/env python3
r"""The model's logits taken from a method's own forward pass.

Every example's prediction is written beside its scores; a separate prediction
pass would cost a fast method (NormXLogit) half its speed. A method whose
forward pass runs the model on exactly the batch's ids and mask can lend its
logits: captum_ext's methods do (their ``target=None`` is the predicted
class), and any method does when the gold class is given. When the pass cannot
be recognised (a method that perturbs its input first), the caller runs its own
``no_grad`` prediction."""

from contextlib import contextmanager
from typing import Any, Iterator, List

import torch
from torch import nn, Tensor

from captum_ext._utils.hooks import HookSet
from captum_ext.evaluation.tokenized_batches import EncodedBatch

__all__ = ["first_logits", "predicts_with_target_none"]


def predicts_with_target_none(family: str) -> bool:
    r"""Whether methods of the registry's ``family`` explain the predicted
    class when ``target`` is None, from one forward pass on the batch itself
    (captum_ext's own methods)."""
    return family == "captum_ext"


@contextmanager
def first_logits(model: nn.Module, batch: EncodedBatch) -> Iterator[List[Tensor]]:
    r"""Collects the logits of the first model call on exactly ``batch``'s ids
    and mask; the hook is removed however the block ends."""
    seen: List[Tensor] = []

    def keep_logits(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask", batch.attention_mask)
        logits = getattr(output, "logits", output)
        if seen or not isinstance(ids, Tensor) or not isinstance(logits, Tensor):
            return
        same_rows = ids.shape == batch.input_ids.shape and torch.equal(
            ids, batch.input_ids
        )
        if same_rows and torch.equal(mask, batch.attention_mask) and logits.dim() == 2:
            seen.append(logits.detach())

    with HookSet() as hooks:
        hooks.forward(model, keep_logits, with_kwargs=True)
        yield seen

#!/usr/bin/env python3
r"""A stand-in for the captum_ext methods on causal LMs (GENERATIVE.md point 2),
written as plainly as possible so that :class:`LLMTokenAttribution` and the
generation metrics can be tested before (and independently of) the real methods.

:class:`GradientXEmbedding` follows the contract exactly:
``attribute(input_ids, target=[batch, T] ids, additional_forward_args=(mask,),
attribute_generated=False, contrast_target=None, internal_batch_size=None)`` ->
``[batch, T, P]`` (``[batch, T, P + T]`` with ``attribute_generated``), row ``t``
= gradient x input on the word embeddings of ``log p(y_t | prompt, y_<t)`` (minus
``log p(y'_t)`` with a contrast), zero where ``score_mask`` is False. One
backward pass per target step and per chunk: slow, obviously right.
"""

from typing import Any, Optional

import torch
from captum_ext._utils.row_chunks import batch_slices
from captum_ext._utils.teacher_forcing import teacher_forced_batch
from captum_ext._utils.token_batch import parse_token_ids
from captum_ext.adapters import get_adapter
from torch import nn, Tensor


class GradientXEmbedding:
    r"""Gradient x word embedding of each target's log-probability."""

    # What its rows differentiate (as CAT's objective): linear in the gradient
    # of log p(y_t), so LLMTokenAttribution's attr_target applies.
    objective = "log_prob"

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def attribute(
        self,
        inputs: Tensor,
        target: Optional[Tensor] = None,
        additional_forward_args: Any = None,
        attribute_generated: bool = False,
        contrast_target: Optional[Tensor] = None,
        internal_batch_size: Optional[int] = None,
    ) -> Tensor:
        if target is None:
            raise ValueError(
                "a causal LM needs target=the continuation's token ids [batch, T]; "
                "use LLMTokenAttribution to generate it"
            )
        ids, mask, _ = parse_token_ids(inputs, additional_forward_args)
        parts = []
        for rows in batch_slices(len(ids), internal_batch_size):
            contrast = None if contrast_target is None else contrast_target[rows]
            parts.append(
                self._chunk(
                    ids[rows], mask[rows], target[rows], contrast, attribute_generated
                )
            )
        return torch.cat(parts)

    def _chunk(
        self,
        ids: Tensor,
        mask: Tensor,
        target: Tensor,
        contrast: Optional[Tensor],
        attribute_generated: bool,
    ) -> Tensor:
        adapter = get_adapter(self.model)
        embedding = adapter.word_embeddings()
        batch = teacher_forced_batch(ids, mask, target, 0, embedding.num_embeddings)
        model_ids, model_mask = batch.model_inputs()
        embeds = embedding(model_ids).detach().requires_grad_(True)
        logits = adapter.model(
            inputs_embeds=embeds, **adapter.tokens.forward_kwargs(model_mask, None)
        ).logits
        log_probs = batch.target_log_probs(logits, contrast)  # [batch, T]
        allowed = batch.score_mask(attribute_generated)  # [batch, T, width]
        width = allowed.shape[-1]
        rows = []
        for step in range(batch.n_targets):
            (grad,) = torch.autograd.grad(
                log_probs[:, step].sum(), embeds, retain_graph=True
            )
            scores = (grad * embeds).sum(-1).detach()  # [batch, P + T - 1]
            scores = torch.nn.functional.pad(scores, (0, 1))[:, :width]
            rows.append(scores)
        scores = torch.stack(rows, 1)  # [batch, T, width]
        dtype = torch.promote_types(scores.dtype, torch.float32)
        return torch.where(allowed, scores, 0).to(dtype)

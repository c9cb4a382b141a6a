#!/usr/bin/env python3
r"""Teacher forcing for causal language models: the one layout that every
generative method and metric shares.

A prompt batch ``input_ids`` ``[batch, P]`` (left-padded, as ``generate()`` takes
it) and its continuation ``target`` ``[batch, T]`` (right-padded with
:data:`IGNORE_INDEX` = -100, Hugging Face's label convention) are joined into one
sequence per example::

    x = [ prompt (left-padded) | y_1 ... y_T (right-padded) ]    # [batch, P + T]

so that in every row the last prompt token sits at position ``P - 1`` and
``y_t`` at position ``P + t - 1`` (``t = 1..T``). Under teacher forcing the
model's output at position ``P + t - 2`` (the *predicting position* of ``y_t``)
gives

.. math::
    \log p(y_t \mid \text{prompt}, y_{<t})
    = \operatorname{log\_softmax}(\text{logits}_{P+t-2})[y_t]

computed in float32 whatever the model's dtype (float64 for a float64
model). ``y_T``'s own position never
feeds a prediction, so the forward pass reads ``x[:, :P+T-1]``
(:meth:`TeacherForcedBatch.model_inputs`). Position ids count attended tokens
only (the adapter's ``forward_kwargs``), so left padding shifts nothing.

Attributions of a generated sequence are ``[batch, T, P]``: row ``t`` explains
``y_t`` over the prompt positions (zero on padding). On request they cover
every position of ``x``, ``[batch, T, P + T]``: row ``t`` then also scores the
earlier generated tokens ``y_<t`` and is zero at ``y_t``'s own position and
after it (:meth:`TeacherForcedBatch.score_mask`). Rows of missing targets
(:data:`IGNORE_INDEX`) are zero.
"""

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

__all__ = [
    "IGNORE_INDEX",
    "TeacherForcedBatch",
    "predicted_log_probs",
    "teacher_forced_batch",
]

IGNORE_INDEX = -100  # no target at this step (a shorter continuation)


@dataclass(frozen=True)
class TeacherForcedBatch:
    r"""A prompt batch joined with its continuation (see the module docstring)."""

    input_ids: Tensor  # [batch, P + T]: prompt | targets (pad id where none)
    attention_mask: Tensor  # [batch, P + T]
    target: Tensor  # [batch, T]: y_t, IGNORE_INDEX where a row has no y_t
    prompt_len: int  # P

    @property
    def n_targets(self) -> int:
        r"""``T``, the number of target steps (columns of ``target``)."""
        return self.target.shape[1]

    @property
    def target_mask(self) -> Tensor:
        r"""Boolean ``[batch, T]``: True where the row has a target at step t."""
        return self.target != IGNORE_INDEX

    def model_inputs(self) -> "tuple[Tensor, Tensor]":
        r"""``(input_ids, attention_mask)`` ``[batch, P + T - 1]``: what the
        forward pass reads (``y_T``'s position predicts nothing)."""
        end = self.prompt_len + self.n_targets - 1
        return self.input_ids[:, :end], self.attention_mask[:, :end]

    def predicting_positions(self) -> Tensor:
        r"""``[T]``: the position whose output predicts ``y_t``, ``P - 1 + t``
        for ``t = 0..T-1`` (0-based steps), the same in every row."""
        start = self.prompt_len - 1
        return torch.arange(start, start + self.n_targets, device=self.target.device)

    def predicting_mask(self, width: int) -> Tensor:
        r"""Boolean ``[T, width]``: True at row ``t``'s predicting position
        :math:`p_t` (its own term), for the methods that may leave it out."""
        columns = torch.arange(width, device=self.target.device)
        return columns[None, :] == self.predicting_positions()[:, None]

    def target_log_probs(
        self, logits: Tensor, contrast: Optional[Tensor] = None
    ) -> Tensor:
        r"""``[batch, T]`` ``log p(y_t | prompt, y_<t)`` (float32 or wider) from
        the logits of :meth:`model_inputs` (``[batch, P + T - 1, vocab]``); with
        ``contrast`` (foil ids ``[batch, T]``), ``log p(y_t) - log p(y'_t)``.
        Zero where a row has no target."""
        predicting = logits[:, self.predicting_positions()]  # [batch, T, vocab]
        return predicted_log_probs(predicting, self.target, contrast)

    def score_mask(self, attribute_generated: bool = False) -> Tensor:
        r"""Boolean ``[batch, T, P]`` (``[batch, T, P + T]`` with
        ``attribute_generated``): the positions row ``t`` may score — attended
        prompt tokens and, on request, the generated tokens before ``y_t`` —
        in rows that have a target."""
        prompt_len, steps = self.prompt_len, self.n_targets
        width = prompt_len + steps if attribute_generated else prompt_len
        valid = self.attention_mask[:, None, :width].bool()  # [batch, 1, width]
        position = torch.arange(width, device=valid.device)
        # y_t sits at P + t (0-based t): row t sees positions before it.
        before = (
            position[None, :]
            < prompt_len + torch.arange(steps, device=valid.device)[:, None]
        )
        return valid & before[None] & self.target_mask[:, :, None]


def predicted_log_probs(
    predicting_logits: Tensor, target: Tensor, contrast: Optional[Tensor] = None
) -> Tensor:
    r"""``[batch, T]`` ``log p(y_t)`` (minus ``log p(y'_t)`` with ``contrast``)
    from the logits of the predicting positions only, ``[batch, T, vocab]``
    (e.g. a forward pass with ``logits_to_keep=T``); zero where ``target`` is
    :data:`IGNORE_INDEX`."""
    # Only the predicting positions are normalised, in float32 (float64 for a
    # float64 model: the precision policy).
    dtype = torch.promote_types(predicting_logits.dtype, torch.float32)
    log_probs = predicting_logits.to(dtype).log_softmax(-1)
    scores = _gather(log_probs, target)
    if contrast is not None:
        scores = scores - _gather(log_probs, contrast)
    return scores * (target != IGNORE_INDEX)


def _gather(log_probs: Tensor, ids: Tensor) -> Tensor:
    return log_probs.gather(-1, ids.clamp(min=0)[..., None]).squeeze(-1)


def teacher_forced_batch(
    input_ids: Tensor,
    attention_mask: Tensor,
    target: Tensor,
    pad_token_id: Optional[int],
    vocab_size: int,
) -> TeacherForcedBatch:
    r"""Joins a left-padded prompt batch and its right-padded continuation.

    Args:

        input_ids (Tensor): prompt token ids ``[batch, P]``, padded on the left.
        attention_mask (Tensor): ``[batch, P]``, 1 on tokens, 0 on padding.
        target (Tensor): continuation ids ``[batch, T]``, right-padded with
                    :data:`IGNORE_INDEX`.
        pad_token_id (int, optional): written where a row has no target (any
                    id works: those positions are masked); 0 if None.
        vocab_size (int): the model's vocabulary size, to check ``target``.

    Returns:
        TeacherForcedBatch: the joined batch.

    Raises ``ValueError`` on right-padded prompts, a target that is not integer
    ids ``[batch, T]`` for this batch, ids outside the vocabulary, a row without
    any target, and :data:`IGNORE_INDEX` anywhere but at the end of a row.
    """
    target = _check_target(target, input_ids, vocab_size)
    right_padded = (~attention_mask[:, -1].bool()).nonzero().flatten()
    if len(right_padded):
        raise ValueError(
            f"prompt(s) {right_padded.tolist()} are padded on the right; a causal "
            "LM continues from the last prompt token, so pad prompts on the left "
            '(tokenizer.padding_side = "left")'
        )
    has_target = target != IGNORE_INDEX
    filler = 0 if pad_token_id is None else pad_token_id
    joined = torch.cat([input_ids, torch.where(has_target, target, filler)], 1)
    mask = torch.cat([attention_mask, has_target.to(attention_mask.dtype)], 1)
    return TeacherForcedBatch(joined, mask, target, input_ids.shape[1])


def _check_target(target: object, input_ids: Tensor, vocab_size: int) -> Tensor:
    if not isinstance(target, Tensor) or target.dim() != 2:
        raise ValueError(
            "a causal LM's target is the continuation's token ids [batch, T] "
            f"(right-padded with {IGNORE_INDEX}); got "
            + (
                f"shape {tuple(target.shape)}"
                if isinstance(target, Tensor)
                else repr(type(target))
            )
        )
    if target.dtype.is_floating_point or target.dtype == torch.bool:
        raise ValueError(f"target must be integer token ids, got {target.dtype}")
    if target.shape[0] != input_ids.shape[0] or target.shape[1] == 0:
        raise ValueError(
            f"target has shape {tuple(target.shape)}; it needs one row per prompt "
            f"({input_ids.shape[0]}) and at least one step"
        )
    target = target.long().to(input_ids.device)
    has_target = target != IGNORE_INDEX
    out_of_vocab = has_target & ((target < 0) | (target >= vocab_size))
    if bool(out_of_vocab.any()):
        raise ValueError(
            f"target ids must be in [0, {vocab_size}) or {IGNORE_INDEX} (no target)"
        )
    if not bool(has_target[:, 0].all()):
        rows = (~has_target[:, 0]).nonzero().flatten().tolist()
        raise ValueError(f"example(s) {rows} have no target token")
    # IGNORE_INDEX only as right padding: once a row stops, it stays stopped.
    if bool((has_target[:, 1:] & ~has_target[:, :-1]).any()):
        raise ValueError(
            f"{IGNORE_INDEX} in target marks the end of a shorter continuation; "
            "it may only pad rows on the right"
        )
    return target

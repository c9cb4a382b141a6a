#!/usr/bin/env python3
r"""The shared path of every method on a causal LM (docs/generation.rst).

A method explains the continuation ``y_1..y_T`` of a left-padded prompt batch by
scoring, for each target step ``t``, the positions that come before ``y_t`` under
teacher forcing (:mod:`captum_ext._utils.teacher_forcing`). This module parses and
checks the call, chunks it by ``internal_batch_size``, runs the teacher-forced
forward pass, and turns a method's per-position scores ``[batch, T, P + T - 1]``
(one row per target, one column per position of the model's input) into the
result ``[batch, T, P]`` (``[batch, T, P + T]`` with ``attribute_generated``),
exactly zero outside :meth:`TeacherForcedBatch.score_mask`. A method supplies only
its :data:`GeneratedScores` function.
"""

from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F
from captum._utils.typing import TargetType
from torch import nn, Tensor

from captum_ext._utils.hooks import HookSet
from captum_ext._utils.teacher_forcing import (
    IGNORE_INDEX,
    predicted_log_probs,
    teacher_forced_batch,
    TeacherForcedBatch,
)
from captum_ext._utils.token_batch import parse_token_batch, TokenBatch
from captum_ext.adapters import get_adapter, ModelAdapter
from captum_ext.attr._utils.attribute_in_chunks import attribute_in_chunks
from captum_ext.attr._utils.backward_passes import (
    backward_passes,
    batched_vjp,
    choose_targets_per_backward,
)
from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = [
    "GeneratedScores",
    "TeacherForcedLogProbs",
    "attribute_generation",
    "run_teacher_forced",
    "target_gradients",
]

# (one chunk's teacher-forced batch, its foil ids [chunk, T] or None)
#   -> per-position scores [chunk, T, (extra dims,) P + T - 1]
GeneratedScores = Callable[[TeacherForcedBatch, Optional[Tensor]], Tensor]


def attribute_generation(
    adapter: ModelAdapter,
    inputs: Any,
    target: TargetType,
    additional_forward_args: Any,
    contrast_target: Optional[Tensor],
    attribute_generated: bool,
    internal_batch_size: Optional[int],
    scores: GeneratedScores,
    method: str,
) -> Tensor:
    r"""Runs ``scores`` on teacher-forced chunks of at most
    ``internal_batch_size`` prompts (in the model's eval semantics, holding its
    lock) and returns ``[batch, T, P]`` (``[batch, T, P + T]`` with
    ``attribute_generated``) in float32 (float64 for a float64 model), exactly
    zero outside the score mask.

    Raises ``ValueError`` for ``target=None`` (a causal LM explains given
    continuation ids), bad prompts or targets (see
    :func:`~captum_ext._utils.teacher_forcing.teacher_forced_batch`), a
    ``contrast_target`` that is not foil ids of the target's shape, and a
    prompt + continuation longer than the model's positions.
    """
    if target is None:
        raise ValueError(
            f"{method} on a causal LM explains a given continuation: pass its "
            f"token ids as target [batch, T] (right-padded with {IGNORE_INDEX}), "
            "or use LLMTokenAttribution, which generates it"
        )
    prompts = parse_token_batch(adapter, inputs, additional_forward_args)
    if prompts.token_type_ids is not None:
        raise ValueError("a causal LM takes no token_type_ids")
    # The whole batch is checked once, so errors name the caller's rows.
    whole = _join(adapter, prompts, target)
    contrast = _check_contrast(contrast_target, whole, adapter.config.vocab_size)

    def chunk(
        batch: TokenBatch,
        _target: TargetType,
        target_ids: Tensor,
        foils: Any,
        examples: Tensor,
    ) -> "tuple[Tensor, Tensor]":
        forced = _join(adapter, batch, target_ids)
        with HookSet() as hooks:
            hooks.forward(adapter.model, _finite_predictions(forced, examples))
            masked = _to_rows(scores(forced, foils), forced, attribute_generated)
        return masked, masked

    return attribute_in_chunks(
        adapter.model,
        prompts,
        None,
        internal_batch_size,
        chunk,
        method,
        target_ids=whole.target,
        foils=contrast,
        examples=torch.arange(len(whole.target), device=whole.target.device),
    )


def _finite_predictions(
    forced: TeacherForcedBatch, examples: Tensor
) -> Callable[..., None]:
    r"""A forward hook on the model that raises ``FloatingPointError`` naming
    the example and the target step where the logits of a predicting position
    (the whole vocabulary: :math:`\log p(y_t)` normalises over it) hold NaN or
    inf: the one policy of every method on a causal LM, whichever logits it
    reads. Passes over a larger batch (a Captum method's expanded inputs) are
    left to the check of the attributions."""

    def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
        logits = getattr(output, "logits", None)
        steps = forced.n_targets
        if (
            not isinstance(logits, Tensor)
            or logits.dim() != 3
            or logits.shape[0] != len(examples)
            or logits.shape[1] < steps
        ):
            return
        bad = ~logits[:, -steps:].detach().isfinite().all(-1)  # [chunk, T]
        bad &= forced.target_mask
        if bool(bad.any()):
            rows, step = bad.nonzero(as_tuple=True)
            where = ", ".join(
                f"example {int(examples[r])} target step {int(t)}"
                for r, t in zip(rows[:5], step[:5])
            )
            raise FloatingPointError(
                "the model's logits predicting the continuation hold NaN or inf "
                f"({where}); check the model's weights and dtype (float16 "
                "overflows easily: try bfloat16 or float32)"
            )

    return hook


def run_teacher_forced(
    adapter: ModelAdapter,
    forced: TeacherForcedBatch,
    hidden_states: bool = False,
    attentions: bool = False,
    predicting_logits_only: bool = False,
) -> Any:
    r"""One forward pass over ``prompt + y_<T`` (Hugging Face output object),
    without a key-value cache.
    With ``predicting_logits_only`` the logits are those of the T predicting
    positions only, ``[batch, T, vocab]`` (``logits_to_keep``: the LM head
    runs on T positions instead of P + T - 1)."""
    input_ids, attention_mask = forced.model_inputs()
    kwargs: Dict[str, Any] = dict(adapter.tokens.forward_kwargs(attention_mask, None))
    if predicting_logits_only:
        kwargs["logits_to_keep"] = forced.n_targets
    return adapter.model(
        input_ids=input_ids,
        use_cache=False,  # nothing is generated; blocks can run again alone
        output_hidden_states=hidden_states,
        output_attentions=attentions,
        return_dict=True,
        **kwargs,
    )


def target_gradients(
    log_probs: Tensor,
    wrt: Tuple[Tensor, ...],
    target_mask: Tensor,
    targets_per_backward: Optional[int] = None,
) -> Iterator[Tuple[Tensor, ...]]:
    r"""For each target step ``t``: the gradients of ``log_probs[:, t].sum()``
    (``log_probs`` ``[batch, T]``) w.r.t. each tensor of ``wrt`` (hidden
    states ``[batch, pos, d]``), through the retained graph of one forward pass
    (examples do not interact, so the batch sum's gradient is every example's
    own; only ``wrt`` gets gradients, never a parameter's ``.grad``). A step
    that no row of the batch has (``target_mask`` ``[batch, T]``) gets zeros
    without a backward pass.

    ``targets_per_backward`` steps share one backward pass batched over them
    (``torch.autograd.grad(..., is_grads_batched=True)``), which holds that
    many gradients of every tensor of ``wrt`` at once. None chooses
    (:func:`~captum_ext.attr._utils.backward_passes.choose_targets_per_backward`):
    one step per pass on a CPU and on long prompts, up to
    :data:`~captum_ext.attr._utils.backward_passes.ACCELERATOR_TARGETS_PER_BACKWARD`
    on short prompts on an accelerator, as many as the free memory holds,
    halving the group on ``OutOfMemoryError`` and going back to one step per
    pass where the model cannot be batched (an ``autograd.Function`` without
    vmap support): the gradients are the same either way, up to the order of
    float sums."""
    with torch.enable_grad():  # the caller may consume this under no_grad
        objectives = log_probs.sum(0)  # [T]
    has_step = target_mask.any(0).tolist()  # [T]
    steps = [step for step, has in enumerate(has_step) if has]
    per_pass = targets_per_backward or _targets_per_backward(wrt)
    computed = backward_passes(
        partial(_batched_gradients, objectives, wrt),
        steps,
        per_pass,
        adapt=targets_per_backward is None,
    )
    for has in has_step:
        yield next(computed) if has else tuple(torch.zeros_like(t) for t in wrt)


# The extra memory of one more step in a batched pass over the whole graph, in
# bytes of the differentiated tensors: issue 42's H200 figures (Llama-7B shape,
# 8,192 tokens) put 15 more steps at 37.3 GB, 1.2x the 2.1 GB of the hidden
# states differentiated; 2 leaves a margin.
_WHOLE_GRAPH_BYTES_PER_TARGET = 2


def _targets_per_backward(wrt: Tuple[Tensor, ...]) -> int:
    tokens = wrt[0].shape[0] * wrt[0].shape[1]  # [batch, pos, d]
    held = sum(tensor.numel() * tensor.element_size() for tensor in wrt)
    per_target = _WHOLE_GRAPH_BYTES_PER_TARGET * held
    return choose_targets_per_backward(wrt[0].device, tokens, per_target)


def _batched_gradients(
    objectives: Tensor, wrt: Tuple[Tensor, ...], group: List[int]
) -> Tuple[Tensor, ...]:
    r"""``[len(group), *tensor.shape]`` per tensor of ``wrt``: one backward pass
    (a plain one for a single step)."""
    with torch.enable_grad():  # the caller may consume this under no_grad
        chosen = objectives[group]  # [k]
    one_hot = torch.eye(len(group), dtype=chosen.dtype, device=chosen.device)
    return batched_vjp(chosen, wrt, one_hot)


class TeacherForcedLogProbs(nn.Module):
    r"""A causal LM as a Captum ``forward_func`` for one target step at a time:
    ``f(input_ids, attention_mask, target, contrast=None) -> [batch, T]``
    teacher-forced ``log p(y_t)`` (minus ``log p(y'_t)``), so ``target=t`` of a
    Captum method explains step ``t``. ``input_ids`` ``[batch, P + T - 1]`` are
    :meth:`TeacherForcedBatch.model_inputs` (word embeddings with
    ``inputs_embeds=True``); ``target`` and ``contrast`` travel as additional
    forward arguments, so methods that expand the batch expand them too."""

    def __init__(self, model: nn.Module, inputs_embeds: bool = False) -> None:
        super().__init__()
        self._adapter = get_adapter(model)
        self.model = self._adapter.model
        self.inputs_embeds = inputs_embeds

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        target: Tensor,
        contrast: Optional[Tensor] = None,
    ) -> Tensor:
        kwargs: Dict[str, Any] = dict(
            self._adapter.tokens.forward_kwargs(attention_mask, None)
        )
        kwargs["inputs_embeds" if self.inputs_embeds else "input_ids"] = input_ids
        logits = self.model(**kwargs, logits_to_keep=target.shape[1]).logits
        return predicted_log_probs(logits, target, contrast)  # [batch, T]


def _join(
    adapter: ModelAdapter, prompts: TokenBatch, target: Any
) -> TeacherForcedBatch:
    forced = teacher_forced_batch(
        prompts.input_ids,
        prompts.attention_mask,
        target,
        adapter.tokens.pad_token_id,
        adapter.config.vocab_size,
    )
    length = forced.model_inputs()[0].shape[1]
    if adapter.max_positions is not None and length > adapter.max_positions:
        raise ValueError(
            f"prompt + continuation take {length} positions but the model has only "
            f"{adapter.max_positions}; shorten the prompt or the continuation"
        )
    return forced


def _check_contrast(
    contrast: Any, forced: TeacherForcedBatch, vocab_size: int
) -> Optional[Tensor]:
    r"""Foil ids ``[batch, T]`` (any value where the row has no target), or None."""
    if contrast is None:
        return None
    target = forced.target
    if not isinstance(contrast, Tensor) or contrast.shape != target.shape:
        got = tuple(contrast.shape) if isinstance(contrast, Tensor) else type(contrast)
        raise ValueError(
            f"contrast_target must be foil ids of the target's shape "
            f"{tuple(target.shape)}, got {got}"
        )
    if contrast.dtype.is_floating_point or contrast.dtype == torch.bool:
        raise ValueError(f"contrast_target must be integer ids, got {contrast.dtype}")
    contrast = contrast.long().to(target.device)
    outside = forced.target_mask & ((contrast < 0) | (contrast >= vocab_size))
    if bool(outside.any()):
        raise ValueError(
            f"contrast_target ids must be in [0, {vocab_size}) wherever the target "
            "has a token"
        )
    ids: Tensor = contrast.masked_fill(~forced.target_mask, IGNORE_INDEX)
    return ids


def _to_rows(
    scores: Tensor, forced: TeacherForcedBatch, attribute_generated: bool
) -> Tensor:
    r"""Per-position scores ``[batch, T, ..., P + T - 1]`` -> the result's width
    (P, or P + T: ``y_T``'s own position is never scored), in the result dtype,
    exactly zero outside the score mask (``masked_fill``, so a NaN on padding
    does not survive)."""
    scores = scores.to(result_dtype(scores.dtype))
    if attribute_generated:
        scores = F.pad(scores, (0, 1))  # y_T's position: zero
    else:
        scores = scores[..., : forced.prompt_len]
    mask = forced.score_mask(attribute_generated)  # [batch, T, width]
    extra = scores.dim() - mask.dim()
    mask = mask.reshape(*mask.shape[:2], *([1] * extra), mask.shape[-1])
    return scores.masked_fill(~mask, 0)

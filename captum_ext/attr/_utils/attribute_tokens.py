#!/usr/bin/env python3
r"""The one dispatch of the token-attribution methods: a call on a causal LM
explains a given continuation, a call on a classifier a class. It is decided
here, once, so that a method's ``attribute`` passes only its own scoring for
each kind of model:

- causal LM: the per-step scores ``(teacher-forced chunk, foil ids) ->
  [chunk, T, ..., P + T - 1]`` run by
  :func:`~captum_ext.attr._utils.teacher_forced_attribution.attribute_generation`
  (docs/generation.rst);
- classifier: the per-chunk scores ``(chunk, target, **per_example) ->
  (scores [chunk, ..., pos], logits)`` run by
  :func:`~captum_ext.attr._utils.attribute_in_chunks.attribute_in_chunks` on the
  batch that :func:`~captum_ext._utils.token_batch.parse_token_batch` checked, exactly
  zero on padding.
"""

from typing import Any, Mapping, Optional

from captum._utils.typing import TargetType
from torch import Tensor

from captum_ext._utils.token_batch import parse_token_batch
from captum_ext.adapters import ModelAdapter
from captum_ext.attr._utils.attribute_in_chunks import attribute_in_chunks, ChunkFn
from captum_ext.attr._utils.teacher_forced_attribution import (
    attribute_generation,
    GeneratedScores,
)

__all__ = ["attribute_classes", "attribute_tokens", "explains_generation"]


def attribute_tokens(
    adapter: ModelAdapter,
    inputs: Any,
    target: TargetType,
    additional_forward_args: Any,
    internal_batch_size: Optional[int],
    *,
    attribute_generated: bool,
    contrast_target: Optional[Tensor],
    chunk_scores: ChunkFn,
    generated_scores: Optional[GeneratedScores],
    method: str,
    per_example: Optional[Mapping[str, Any]] = None,
) -> Tensor:
    r"""The attributions of one ``attribute`` call, whose arguments the method
    passes as it received them: ``[batch, T, ..., P]`` (``[batch, T, ..., P +
    T]`` with ``attribute_generated``) from ``generated_scores`` when
    :func:`explains_generation`, else ``[batch, ..., pos]`` from
    ``chunk_scores`` (:func:`attribute_classes`, ``per_example`` being the
    options it slices with each chunk). ``generated_scores`` is None for a
    method that explains no generated text: its calls always go to
    ``chunk_scores``. ``method`` names the method in error messages."""
    if generated_scores is not None and explains_generation(
        adapter, target, contrast_target, attribute_generated, method
    ):
        return attribute_generation(
            adapter,
            inputs,
            target,
            additional_forward_args,
            contrast_target,
            attribute_generated,
            internal_batch_size,
            generated_scores,
            method,
        )
    return attribute_classes(
        adapter,
        inputs,
        target,
        additional_forward_args,
        internal_batch_size,
        chunk_scores,
        method,
        per_example,
    )


def attribute_classes(
    adapter: ModelAdapter,
    inputs: Any,
    target: TargetType,
    additional_forward_args: Any,
    internal_batch_size: Optional[int],
    chunk_scores: ChunkFn,
    method: str,
    per_example: Optional[Mapping[str, Any]] = None,
) -> Tensor:
    r"""The classifier half of :func:`attribute_tokens`: ``chunk_scores`` on the
    checked batch in chunks of ``internal_batch_size`` examples, ``[batch, ...,
    pos]``, exactly zero where ``attention_mask`` is 0."""
    batch = parse_token_batch(adapter, inputs, additional_forward_args)
    scores = attribute_in_chunks(
        adapter.model,
        batch,
        target,
        internal_batch_size,
        chunk_scores,
        method,
        **(per_example or {}),
    )  # [batch, ..., pos]
    padding = ~batch.valid.reshape(len(scores), *[1] * (scores.dim() - 2), -1)
    return scores.masked_fill(padding, 0)


def explains_generation(
    adapter: ModelAdapter,
    target: TargetType,
    contrast_target: Optional[Tensor],
    attribute_generated: bool,
    method: str,
) -> bool:
    r"""True when the call explains generated text: the model is a causal LM.
    Raises :class:`~captum_ext.UnsupportedModelError` (naming what the model
    lacks) when a model that is not a causal LM gets a ``contrast_target`` or
    ``attribute_generated``, or continuation ids ``[batch, T]`` without having
    a classification head (a classifier's own target check names the shape)."""
    if adapter.is_causal_lm:
        return True
    sequence_target = isinstance(target, Tensor) and target.dim() == 2
    if sequence_target and not adapter.is_classifier:
        adapter.require_causal_lm(method)
    if contrast_target is not None or attribute_generated:
        adapter.require_causal_lm(method)
    return False

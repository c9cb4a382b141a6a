#!/usr/bin/env python3
r"""The ``attribute`` of every method that scores tokens from forward passes
alone (EmbeddingNorm, LastLayerAttention, AttentionRollout, LogAt, NormXLogit):
they differ only in what one chunk's forward pass is reduced to."""

from typing import Any, Optional, Tuple, Union

import torch
from captum._utils.typing import TargetType
from captum.attr._utils.attribution import Attribution
from torch import nn, Tensor

from captum_ext._utils.log import log_usage
from captum_ext._utils.teacher_forcing import TeacherForcedBatch
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.adapters import get_adapter
from captum_ext.attr._utils.attribute_tokens import attribute_tokens

__all__ = ["ForwardOnlyAttribution"]


class ForwardOnlyAttribution(Attribution):  # type: ignore[misc]  # untyped captum
    r"""
    Base of the token-attribution methods that need no gradient. A subclass
    states its equation, what ``target`` selects and what its scores are in its
    class docstring, and implements :meth:`_chunk_scores`; :meth:`attribute`
    parses the inputs, runs the chunks without autograd in eval semantics
    (holding the model's lock) and zeroes the scores on padding.
    """

    # Methods that explain generated text implement _generated_scores.
    _explains_generation = False

    def __init__(self, model: nn.Module) -> None:
        r"""
        Args:

            model (torch.nn.Module): A Hugging Face
                        ``*ForSequenceClassification`` model of a family
                        supported by :func:`captum_ext.get_adapter`.
        """
        Attribution.__init__(self, model)
        self.model = model
        self.adapter = get_adapter(model)

    @log_usage()
    def attribute(
        self,
        inputs: Union[Tensor, Tuple[Tensor]],
        target: TargetType = None,
        additional_forward_args: Any = None,
        internal_batch_size: Optional[int] = None,
        attribute_generated: bool = False,
        contrast_target: Optional[Tensor] = None,
    ) -> Tensor:
        r"""
        Args:

            inputs (Tensor): Token ids ``[batch, pos]``, padded on the right
                        (encoders) or on either side (decoder-only models, which
                        get ``position_ids`` counted from the mask, so left and
                        right padding give the same scores).
            target (int, list, or Tensor, optional): The class explained (what
                        the score reads of it is in the class docstring): an
                        int or 0-d tensor for every example, or a list / 1-d
                        tensor with one class per example; an out-of-range
                        class raises. A class-agnostic method only validates
                        it: its result is the same for every target.
                        Default: None (the model's predicted class of each
                        example)
            additional_forward_args (Tensor or tuple, optional): ``attention_mask``
                        ``[batch, pos]`` (1 on real tokens, 0 on padding) or
                        ``(attention_mask, token_type_ids)``.
                        Default: None (every position is a real token)
            internal_batch_size (int, optional): Run the batch in chunks of at
                        most this many examples, one forward pass per chunk, so
                        that only one chunk's hidden states (and attentions) of
                        every layer are held at a time; the scores are those of
                        the whole batch.
                        Default: None (the whole batch at once)
            attribute_generated (bool, optional): Causal LMs (methods that
                        explain generated text): also score the generated
                        tokens before each target (docs/generation.rst).
                        Default: False (prompt positions only)
            contrast_target (Tensor, optional): Causal LMs: foil ids
                        ``[batch, T]``; each row then explains ``y_t`` against
                        ``y'_t`` (see the class docstring).
                        Default: None

        Returns:
            *Tensor* of **attributions**:
            - **attributions** (*Tensor*): ``[batch, pos]`` scores (their sign
                        and range are in the class docstring) in float32
                        (float64 for a float64 model), exactly zero where
                        ``attention_mask`` is 0. For a causal LM (``inputs``
                        the left-padded prompts, ``target`` the continuation's
                        ids ``[batch, T]`` right-padded with -100):
                        ``[batch, T, P]`` (``[batch, T, P + T]`` with
                        ``attribute_generated``), row ``t`` explaining
                        ``y_t``, exactly zero outside the score mask.

        Examples::

            >>> # any attention implementation (sdpa by default, eager, flash)
            >>> model = AutoModelForSequenceClassification.from_pretrained(name)
            >>> enc = tokenizer(texts, padding=True, return_tensors="pt")
            >>> for method in (LogAt(model), EmbeddingNorm(model),
            ...                AttentionRollout(model)):
            ...     attr = method.attribute(enc["input_ids"],
            ...         additional_forward_args=(enc["attention_mask"],))
        """
        with torch.no_grad():
            return attribute_tokens(
                self.adapter,
                inputs,
                target,
                additional_forward_args,
                internal_batch_size,
                attribute_generated=attribute_generated,
                contrast_target=contrast_target,
                chunk_scores=self._chunk_scores,
                generated_scores=(
                    self._generated_scores if self._explains_generation else None
                ),
                method=type(self).__name__,
            )  # [batch, pos]; causal LMs: [batch, T, width]

    def _chunk_scores(
        self, batch: TokenBatch, target: TargetType
    ) -> Tuple[Tensor, Tensor]:
        r"""One chunk's scores ``[batch, pos]`` in float32 or wider, and the
        model output checked for NaN/inf (its logits ``[batch, C]``)."""
        raise NotImplementedError

    def _generated_scores(
        self, forced: TeacherForcedBatch, contrast: Optional[Tensor]
    ) -> Tensor:
        r"""Causal LMs: per-position scores ``[batch, T, P + T - 1]`` of one
        teacher-forced chunk (see
        :mod:`captum_ext.attr._utils.teacher_forced_attribution`)."""
        raise NotImplementedError

#!/usr/bin/env python3
r"""The base of every captum_ext token-attribution method: the one public
``attribute`` (input parsing, the choice between a classifier and a causal LM,
chunks, padding, the NaN/inf checks), so that a method writes only its scoring.

A method is built one of two ways:

- **Captum's way**, from ``forward_func`` (``inputs -> [batch, C]``) and the
  modules it reads (``layer``, ``attention``, ...): any model, any input
  tensor (token ids, embeddings, pixel values); the scores are over the
  sequence axis of the states the modules give. The method's class of
  ``captum_ext/attr/_core/layer/`` (what upstream/export.py exports to
  Captum; the public class subclasses it) implements ``_module_scores``.
- **The shortcut**, from a Hugging Face model of a family that
  :func:`~captum_ext.get_adapter` knows: the adapter finds the modules, the
  token ids and masks are checked, padding scores exactly zero, and a causal
  LM explains its generated text. The method implements
  :meth:`TokenAttribution._chunk_scores` (classifiers) and, if it
  :attr:`~TokenAttribution.explains_generation`,
  :meth:`TokenAttribution._generated_scores` (causal LMs; docs/generation.rst).
"""

from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any, Callable, Iterator, Mapping, Optional, Tuple, Union

import torch
from captum._utils.typing import TargetType
from torch import nn, Tensor

from captum_ext._utils.log import log_usage
from captum_ext._utils.model_forward import ImageClassifierLogits
from captum_ext._utils.teacher_forcing import TeacherForcedBatch
from captum_ext._utils.token_batch import parse_token_batch, TokenBatch
from captum_ext.adapters import get_adapter, ModelAdapter, UnsupportedModelError
from captum_ext.attr._utils.attribute_in_chunks import attribute_in_chunks
from captum_ext.attr._utils.layer_states import RecordedAttention
from captum_ext.attr._utils.refuse_generation_options import refuse_generation_options
from captum_ext.attr._utils.shortcut_model import shortcut_model
from captum_ext.attr._utils.teacher_forced_attribution import attribute_generation

__all__ = ["IMAGE_METHODS", "TokenAttribution"]

# The methods that explain a vision transformer through the shortcut.
IMAGE_METHODS = (
    "CAT",
    "AttCAT",
    "LogAt",
    "NormXLogit",
    "EmbeddingNorm",
    "LastLayerAttention",
    "AttentionRollout",
)


class TokenAttribution:
    r"""
    Mixed into Captum's ``Attribution`` / ``GradientAttribution`` /
    ``LayerAttribution`` by each method, as Captum mixes its bases. A method
    declares what it needs as class attributes, which the evaluation engine
    reads too, and overrides the scoring hooks of the routes it supports.
    """

    #: The method explains a causal LM's generated text (the shortcut).
    explains_generation: bool = False
    #: The method runs backward passes (else it runs under ``torch.no_grad``).
    needs_gradients: bool = False
    #: The method reads attention probabilities.
    reads_attention: bool = False

    #: The shortcut's adapter (a method built from named modules has none).
    adapter: ModelAdapter
    forward_func: Callable[..., Any]
    #: True for a method built Captum's way, from forward_func and modules.
    built_from_modules: bool = False
    # A vision transformer's shortcut: its adapter, which can read attention
    # that sdpa or flash attention does not return.
    _image_adapter: Optional[ModelAdapter] = None
    # Built from modules, one chunk's scores and forward_func's outputs
    # (:class:`~captum_ext.attr._utils.attribute_with_modules.ModuleChunkFn`):
    # the method's upstream class, built Captum's way, defines it.
    _module_scores: Callable[..., Tuple[Tensor, Tensor]]
    # Built from modules, the scores of every chunk: the upstream class's base,
    # LayerTokenAttribution, defines it.
    _attribute_modules: Callable[..., Tensor]

    @log_usage()
    def attribute(
        self,
        inputs: Union[Tensor, Tuple[Tensor]],
        target: TargetType = None,
        additional_forward_args: Any = None,
        *,
        internal_batch_size: Optional[int] = None,
        attribute_generated: bool = False,
        contrast_target: Optional[Tensor] = None,
    ) -> Tensor:
        r"""
        Args:

            inputs (Tensor): Built from ``forward_func`` and modules: the
                        first argument of ``forward_func``, ``[batch, ...]``
                        (token ids, embeddings, pixel values). The shortcut:
                        token ids ``[batch, pos]``, padded on the right
                        (encoders) or on either side (decoder-only models,
                        which get ``position_ids`` counted from the mask, so
                        left and right padding give the same scores).
            target (int, list, or Tensor, optional): The class explained (what
                        the score reads of it is in the class docstring): an
                        int or 0-d tensor for every example, or a list / 1-d
                        tensor with one class per example; an out-of-range
                        class raises. A class-agnostic method only validates
                        it: its result is the same for every target. For a
                        causal LM (the shortcut): the continuation's ids
                        ``[batch, T]``, right-padded with -100.
                        Default: None (the predicted class of each example)
            additional_forward_args (Any, optional): Built from
                        ``forward_func``: its arguments after ``inputs``
                        (tensors with one row per example are chunked with
                        them). The shortcut: ``attention_mask`` ``[batch,
                        pos]`` (1 on real tokens, 0 on padding) or
                        ``(attention_mask, token_type_ids)``.
                        Default: None (every position is a real token)
            internal_batch_size (int, optional): Run the batch in chunks of at
                        most this many examples, one forward pass per chunk, so
                        that only one chunk's states are held at a time; the
                        scores are those of the whole batch.
                        Default: None (the whole batch at once)
            attribute_generated (bool, optional): Causal LMs (the shortcut,
                        methods that explain generated text): also score the
                        generated tokens before each target
                        (docs/generation.rst).
                        Default: False (prompt positions only)
            contrast_target (Tensor, optional): Causal LMs: foil ids
                        ``[batch, T]``; each row then explains ``y_t`` against
                        ``y'_t`` (see the class docstring).
                        Default: None

        Returns:
            *Tensor* of **attributions**:
            - **attributions** (*Tensor*): ``[batch, pos]`` scores (their sign
                        and range are in the class docstring) in float32
                        (float64 for a float64 model), ``pos`` the sequence
                        axis of the states read (for a vision transformer: its
                        class token and patches). The shortcut gives exactly
                        zero where ``attention_mask`` is 0, and for a causal
                        LM ``[batch, T, P]`` (``[batch, T, P + T]`` with
                        ``attribute_generated``), row ``t`` explaining
                        ``y_t``, exactly zero outside the score mask.

        Examples::

            >>> # the shortcut: any attention implementation (sdpa, eager, flash)
            >>> model = AutoModelForSequenceClassification.from_pretrained(name)
            >>> enc = tokenizer(texts, padding=True, return_tensors="pt")
            >>> for method in (LogAt(model), EmbeddingNorm(model),
            ...                AttentionRollout(model)):
            ...     attr = method.attribute(enc["input_ids"],
            ...         additional_forward_args=(enc["attention_mask"],))
        """
        return self._attribute(
            inputs,
            target,
            additional_forward_args,
            internal_batch_size=internal_batch_size,
            attribute_generated=attribute_generated,
            contrast_target=contrast_target,
        )

    def _use_shortcut(self, forward_func: Any, images: bool = False) -> ModelAdapter:
        r"""Sets ``self.model`` and ``self.adapter`` from the Hugging Face model
        ``forward_func`` (a clear error for anything else, and for a vision
        transformer unless the method explains ``images``)."""
        name = type(self).__name__
        self.model: nn.Module = shortcut_model(forward_func, name)
        self.adapter = get_adapter(self.model)
        if self.adapter.reads_images and not images:
            raise UnsupportedModelError(
                f"{name} reads token ids, and {self.adapter.family_name} is a "
                "vision transformer; explain it with " + ", ".join(IMAGE_METHODS)
            )
        return self.adapter

    def _fill_image_modules(self) -> None:
        r"""The shortcut of a vision transformer: the method runs built from
        the modules its adapter names (:meth:`_image_modules`), on
        ``pixel_values``."""
        if self.adapter.reads_images:
            self.forward_func = ImageClassifierLogits(self.model)
            self.built_from_modules = True
            self._image_adapter = self.adapter
            self._image_modules(self.adapter)

    @contextmanager
    def _recorded_attention(self) -> Iterator[RecordedAttention]:
        r"""A vision transformer's shortcut: around the forward pass, the
        capture that reads the attention its sdpa or flash attention returns
        none of, giving every block's after it; None where the attention
        modules return their probabilities (eager) and built from modules."""
        if self._image_adapter is None:
            yield None
            return
        name = type(self).__name__
        with self._image_adapter.attention_capture(name) as capture:
            yield None if capture.output_attentions else partial(capture.layers, None)

    def _image_modules(self, adapter: ModelAdapter) -> None:
        r"""Sets the modules the method reads from a vision transformer."""
        raise NotImplementedError

    def _attribute(
        self,
        inputs: Any,
        target: TargetType,
        additional_forward_args: Any,
        *,
        internal_batch_size: Optional[int],
        attribute_generated: bool,
        contrast_target: Optional[Tensor],
        options: Optional[Mapping[str, Any]] = None,
        generation_options: Optional[Mapping[str, Any]] = None,
        per_example: Optional[Mapping[str, Any]] = None,
    ) -> Tensor:
        r"""The attributions of one ``attribute`` call. ``options`` go to every
        scoring hook (a method's hooks take them as keywords with defaults);
        ``generation_options`` (those set, not None) only to
        :meth:`_generated_scores`, and are refused by name elsewhere;
        ``per_example`` go to :meth:`_chunk_scores` with their tensors of one
        row per example sliced with each chunk, and whole to
        :meth:`_generated_scores` (a causal LM runs on prompt + continuation)
        and :meth:`_module_scores`."""
        name, options = type(self).__name__, dict(options or {})
        asked = {k: v for k, v in (generation_options or {}).items() if v is not None}
        grad = nullcontext() if self.needs_gradients else torch.no_grad()
        if self.built_from_modules:
            refuse_generation_options(
                name,
                attribute_generated=attribute_generated,
                contrast_target=contrast_target,
                **asked,
            )
            return self._attribute_modules(
                inputs,
                target,
                additional_forward_args,
                internal_batch_size,
                {**options, **(per_example or {})},
            )
        generation = self.explains_generation and self._explains_generation(
            self.adapter, target, contrast_target, attribute_generated
        )
        for option in asked if not generation else ():
            self.adapter.require_causal_lm(f"{name}'s {option}")
        with grad:
            if generation:
                return attribute_generation(
                    self.adapter,
                    inputs,
                    target,
                    additional_forward_args,
                    contrast_target,
                    attribute_generated,
                    internal_batch_size,
                    partial(
                        self._generated_scores,
                        **options,
                        **asked,
                        **(per_example or {}),
                    ),
                    name,
                )
            return self._attribute_classes(
                inputs,
                target,
                additional_forward_args,
                internal_batch_size,
                partial(self._chunk_scores, **options),
                per_example,
            )

    def _attribute_classes(
        self,
        inputs: Any,
        target: TargetType,
        additional_forward_args: Any,
        internal_batch_size: Optional[int],
        chunk_scores: Callable[..., Tuple[Tensor, Tensor]],
        per_example: Optional[Mapping[str, Any]] = None,
    ) -> Tensor:
        r"""The classifier route: ``chunk_scores`` on the checked batch in
        chunks of ``internal_batch_size`` examples, ``[batch, ..., pos]``,
        exactly zero where ``attention_mask`` is 0."""
        batch = parse_token_batch(self.adapter, inputs, additional_forward_args)
        scores = attribute_in_chunks(
            self.adapter.model,
            batch,
            target,
            internal_batch_size,
            chunk_scores,
            type(self).__name__,
            **(per_example or {}),
        )  # [batch, ..., pos]
        padding = ~batch.valid.reshape(len(scores), *[1] * (scores.dim() - 2), -1)
        return scores.masked_fill(padding, 0)

    def _explains_generation(
        self,
        adapter: ModelAdapter,
        target: TargetType,
        contrast_target: Optional[Tensor],
        attribute_generated: bool,
    ) -> bool:
        r"""True when the call explains generated text: the model is a causal
        LM. Raises :class:`~captum_ext.UnsupportedModelError` (naming what the
        model lacks) when a model that is not a causal LM gets a
        ``contrast_target`` or ``attribute_generated``, or continuation ids
        ``[batch, T]`` without having a classification head."""
        if adapter.is_causal_lm:
            return True
        method = type(self).__name__
        sequence_target = isinstance(target, Tensor) and target.dim() == 2
        if sequence_target and not adapter.is_classifier:
            adapter.require_causal_lm(method)
        if contrast_target is not None or attribute_generated:
            adapter.require_causal_lm(method)
        return False

    def _chunk_scores(
        self, batch: TokenBatch, target: TargetType
    ) -> Tuple[Tensor, Tensor]:
        r"""The shortcut on a classifier: one chunk's scores ``[batch, ...,
        pos]`` in float32 or wider, and the model output checked for NaN/inf
        (its logits ``[batch, C]``)."""
        raise NotImplementedError

    def _generated_scores(
        self, forced: TeacherForcedBatch, contrast: Optional[Tensor]
    ) -> Tensor:
        r"""The shortcut on a causal LM: per-position scores ``[batch, T, ...,
        P + T - 1]`` of one teacher-forced chunk (see
        :mod:`captum_ext.attr._utils.teacher_forced_attribution`)."""
        raise NotImplementedError

#!/usr/bin/env python3
r"""Decoded layer attribution: any Captum layer attribution on ``hidden_states[l]``,
decoded onto the input tokens through the vocabulary (Hou & Castanon, ICML 2023,
https://proceedings.mlr.press/v202/hou23a.html)."""

from functools import partial
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import torch
from captum._utils.typing import TargetType
from captum.attr import LayerConductance, LayerGradientShap, LayerGradientXActivation
from captum.attr._utils.attribution import LayerAttribution
from torch import nn, Tensor

from captum_ext._utils.log import log_usage
from captum_ext._utils.model_forward import (
    classifier_forward,
    resolve_target,
    run_model,
)
from captum_ext._utils.teacher_forcing import TeacherForcedBatch
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.adapters import get_adapter, UnsupportedModelError
from captum_ext.attr._core.layer.decoded_layer_attribution import (
    DecodedLayerAttribution as LayerDecodedLayerAttribution,
    LayerMethod,
    shared_options,
)
from captum_ext.attr._utils.decoded_aggregation import (
    _with_relu,
    aggregate,
    check_aggregation_options,
)
from captum_ext.attr._utils.decoded_probabilities import (
    decoded_input_probabilities,
    decoded_token_sums,
    Decoder,
)
from captum_ext.attr._utils.recomputed_scores import check_recompute
from captum_ext.attr._utils.teacher_forced_attribution import (
    run_teacher_forced,
    TeacherForcedLogProbs,
)
from captum_ext.attr._utils.token_attribution import TokenAttribution

__all__ = ["DecodedLayerAttribution"]

# Captum layer methods that interpolate or add noise in input space: token ids
# cannot be interpolated, so they get word embeddings as inputs.
_INPUT_SPACE_METHODS = (LayerConductance, LayerGradientShap)
_INPUT_SPACES = ("ids", "embeddings")


def _method_type(method: LayerMethod) -> type:
    return method if isinstance(method, type) else type(method)


def _input_space(method: LayerMethod, input_space: Optional[str]) -> str:
    if input_space is None:
        perturbs = issubclass(_method_type(method), _INPUT_SPACE_METHODS)
        return "embeddings" if perturbs else "ids"
    if input_space not in _INPUT_SPACES:
        raise ValueError(
            f"input_space must be one of {_INPUT_SPACES} or None, got {input_space!r}"
        )
    return input_space


class DecodedLayerAttribution(TokenAttribution, LayerDecodedLayerAttribution):
    r"""
    Decoded layer attribution (Hou & Castanon, *Decoding Layer Saliency in
    Language Transformers*, ICML 2023,
    https://proceedings.mlr.press/v202/hou23a.html), generalised from Grad-CAM to
    any Captum layer attribution method: the equations (the wrapped method's
    ``a_j``, the decoded ``D``, the top-tau mask, the ReLU modes) are those of
    the class built from ``forward_func``, the layer module and a decoder
    (:mod:`captum_ext.attr._core.layer.decoded_layer_attribution`). This class
    adds the shortcut from a Hugging Face model, where ``h_l`` is
    ``hidden_states[l]`` (``0`` = embedding output, ``L`` = last block), the
    unique tokens exclude pads (special tokens kept) and pads score 0, and
    causal language models.

    The decoder is any module mapping hidden states to vocabulary logits: a
    pre-trained MLM head (the paper's setting, e.g.
    ``get_adapter(mlm_model).mlm_head()``), the tied input embeddings
    (:class:`~captum_ext.attr.EmbeddingDecoder`), or a decoder fitted on the
    frozen encoder (:func:`~captum_ext.defaults.decoders.load_fitted_decoder`).

    The wrapped method receives the token ids, or their word embeddings for
    methods that interpolate or add noise in input space (``LayerConductance``,
    ``LayerGradientShap``; see ``input_space``), together with the resolved target
    and ``additional_forward_args`` as ``(attention_mask[, token_type_ids])``.

    **Causal LMs** (``*ForCausalLM``; docs/generation.rst): ``target`` is the
    continuation ``[batch, T]``, ``y`` of row ``t`` is ``log p(y_t | prompt,
    y_<t)`` under teacher forcing (minus ``log p(y'_t)`` with a contrast
    target), and the decoder defaults to the model's own final norm + LM head
    (no fitting), so ``D[j, i]`` is the probability the logit lens at position
    ``j`` puts on the token at ``i``. Row ``t`` sums over the positions up to
    ``y_t``'s predicting position and scores the tokens before ``y_t`` (the
    top-tau candidates too). The wrapped method runs once per target step,
    through a forward function returning every step's ``log p`` (``target=t``
    selects the step); :class:`DecodedLayerGradCam` needs one forward and T
    backward passes. The result is ``[batch, T, P]``.
    """

    explains_generation = True
    needs_gradients = True

    def __init__(
        self,
        model: Callable[..., Any],
        layer: Optional[Union[int, nn.Module]],
        decoder: Optional[Decoder] = None,
        method: LayerMethod = LayerGradientXActivation,
        method_kwargs: Optional[Dict[str, Any]] = None,
        input_space: Optional[str] = None,
    ) -> None:
        r"""
        Args:
            model (Callable): ``forward_func(input_ids, *additional_forward_args)
                -> [batch, C]`` with ``layer`` a module of it (built Captum's
                way, any model), or a Hugging Face sequence classifier or causal
                LM of a family :func:`captum_ext.get_adapter` knows (the
                shortcut).
            layer (int or nn.Module or None): the module whose output is
                ``h_l``, or (the shortcut) the index ``l`` into
                ``hidden_states`` (negative counts from the end). None: the
                layer of the ``method`` instance.
            decoder (Callable, optional): maps ``[batch, pos, d]`` hidden states
                to ``[batch, pos, vocab]`` logits over the model's vocabulary.
                Required for a classifier and with ``forward_func``; for a
                causal LM None means the model's own final norm + LM head (no
                fitting).
            method (type or LayerAttribution, optional): a Captum layer
                attribution class, built here as
                ``method(forward_func, module, **method_kwargs)`` with a forward
                function returning the model's logits, or an instance already aimed
                at the module of ``h_l``. Default: ``LayerGradientXActivation``.
            method_kwargs (dict, optional): constructor arguments of a ``method``
                class (e.g. ``{"multiply_by_inputs": False}``).
            input_space (str, optional): ``"ids"`` or ``"embeddings"``: what the
                wrapped method receives as inputs (integer ``baselines`` are then
                embedded too). None: ``"embeddings"`` for ``LayerConductance`` and
                ``LayerGradientShap`` (which interpolate or add noise to inputs),
                else ``"ids"``. An instance's forward function must accept it.
        """
        is_class = isinstance(method, type)
        self._set_method(method, method_kwargs)
        self.input_space = _input_space(method, input_space)
        if isinstance(layer, nn.Module) and not _registered(model):
            self._build_from_modules(model, layer, decoder)
            return
        self._use_shortcut(model)
        module = self._layer_module(layer, method)
        embeddings = self.input_space == "embeddings"
        if not is_class:
            if self.adapter.is_causal_lm:
                raise ValueError(
                    "for a causal LM pass the Captum method's class (and "
                    "method_kwargs): captum_ext builds its forward function, "
                    "which returns the teacher-forced log p of each target"
                )
            forward = method.forward_func
        elif self.adapter.is_causal_lm:
            forward = TeacherForcedLogProbs(self.model, embeddings)
        else:
            forward = classifier_forward(self.model, embeddings)
        LayerAttribution.__init__(self, forward, module)
        self.decoder = self._own_decoder(module) if decoder is None else decoder

    def _build_from_modules(
        self, forward_func: Any, layer: nn.Module, decoder: Optional[Decoder]
    ) -> None:
        r"""Captum's way (:class:`LayerDecodedLayerAttribution`), on token ids:
        the word embeddings of ``input_space="embeddings"`` are the
        shortcut's."""
        if decoder is not None and self.input_space != "ids":
            raise ValueError(
                f"{type(self).__name__}'s input_space='embeddings' embeds the ids "
                "with a Hugging Face model's word embeddings: build it from the "
                "model (the shortcut), or give forward_func and a method that "
                "takes ids"
            )
        LayerDecodedLayerAttribution.__init__(
            self, forward_func, layer, decoder, self._method, self._method_kwargs
        )
        self.built_from_modules = True

    def _layer_module(
        self, layer: Optional[Union[int, nn.Module]], method: LayerMethod
    ) -> nn.Module:
        r"""The module of ``h_l``; the shortcut's index ``l`` names the module
        whose output is ``hidden_states[l]``."""
        if layer is not None and not isinstance(layer, nn.Module):
            layer = self.adapter.hidden_state_module(layer)  # checks the index
        return LayerDecodedLayerAttribution._layer_module(self, layer, method)

    def _own_decoder(self, module: nn.Module) -> Decoder:
        r"""A causal LM's own next-token head (final norm + LM head) as the
        decoder of the states ``module`` outputs; the final norm is not applied
        twice to ``hidden_states[L]``, which is already its output."""
        if not self.adapter.is_causal_lm:
            raise ValueError(
                f"decoder is required for {type(self.adapter.model).__name__}: "
                "the MLM head (get_adapter(mlm_model).mlm_head()), "
                "EmbeddingDecoder(model) or a fitted decoder "
                "(load_fitted_decoder); only a causal LM (AutoModelForCausalLM) "
                "brings its own (final norm + LM head)"
            )
        layers = range(self.adapter.num_layers + 1)
        index = next(
            (i for i in layers if self.adapter.hidden_state_module(i) is module),
            None,  # another module: a state before the final norm
        )
        return partial(self.adapter.lm_head_on_every_position, layer=index)

    @property
    def vocab_size(self) -> int:
        return int(self.adapter.config.vocab_size)

    def _probe(self, batch: TokenBatch) -> Tuple[Tensor, Tensor, nn.Module]:
        r"""One forward pass without gradients: ``h_l`` ``[batch, pos, d]``, the
        logits ``[batch, C]`` and the module whose tensor output is ``h_l``."""
        with torch.no_grad():
            hidden, out, module = self._captured(lambda: run_model(self.adapter, batch))
        return hidden, out.logits, module

    def _method_inputs(
        self, batch: TokenBatch, kwargs: Dict[str, Any]
    ) -> Tuple[Tensor, Dict[str, Any]]:
        if self.input_space == "ids":
            return LayerDecodedLayerAttribution._method_inputs(self, batch, kwargs)
        embed = self.adapter.word_embeddings()
        with torch.no_grad():
            inputs = embed(batch.input_ids)
            baselines = kwargs.get("baselines")
            if isinstance(baselines, Tensor) and not baselines.is_floating_point():
                kwargs = {**kwargs, "baselines": embed(baselines)}
        return inputs, kwargs

    @log_usage()
    def attribute(
        self,
        inputs: Union[Tensor, Tuple[Tensor]],
        target: TargetType = None,
        additional_forward_args: Any = None,
        *,
        tau: Optional[int] = None,
        relu: Optional[str] = "outside",
        internal_batch_size: Optional[int] = None,
        attribute_generated: bool = False,
        contrast_target: Optional[Tensor] = None,
        recompute: Optional[bool] = None,
        **attribute_kwargs: Any,
    ) -> Tensor:
        r"""
        Args:
            inputs (Tensor): token ids ``[batch, pos]`` (left or right padding).
            target (int, list or Tensor, optional): the class whose pre-softmax
                logit is explained, per example or for all. None: each example's
                predicted class. Default: None.
            additional_forward_args (Tensor or tuple, optional): ``attention_mask``
                or ``(attention_mask, token_type_ids)``. Default: None (no padding).
            tau (int, optional): keep, per position, only the ``tau`` unique input
                tokens it decodes to most probably (Alg. 1's top-tau). None: no
                limit. Default: None.
            relu (str, optional): ``"outside"`` (Eq. 6), ``"inside"`` (Alg. 1 read
                literally) or None (signed). Default: ``"outside"``.
            internal_batch_size (int, optional): run the batch in chunks of at
                most this many examples (probe, wrapped method and decoding per
                chunk), with the scores of the whole batch. A wrapped method
                that has its own ``internal_batch_size`` (Integrated Gradients,
                Conductance: rows of expanded inputs per forward pass) gets the
                same value, so no forward pass holds more than this many rows.
                Tensor options with one row per example (``baselines``
                ``[batch, pos]``) are sliced with the chunk. Default: None (the
                whole batch at once).
            attribute_generated (bool, optional): causal LMs: also score the
                generated tokens before each target. Default: False.
            contrast_target (Tensor, optional): causal LMs: foil ids
                ``[batch, T]``; row ``t`` explains ``log p(y_t) - log p(y'_t)``.
                Default: None.
            recompute (bool, optional): causal LMs, :class:`DecodedLayerGradCam`
                without options for the wrapped method: take the gradients by
                per-block recomputation (a forward pass without a graph, then
                one block at a time with gradients from the top down to the
                layer, docs/generation.rst, "Per-block recomputation"): the
                same scores in the memory of one block's graph. False keeps
                the whole graph of one forward pass; a generic Captum method
                runs its own passes and takes only None or False. Default:
                None (recompute on a CPU, and on an accelerator where the
                whole graph would take more than half the free memory).
            **attribute_kwargs (Any, optional): passed to the wrapped method's
                ``attribute`` (e.g. ``baselines``, ``n_steps``).

        Returns:
            Tensor ``[batch, pos]`` in float32 (float64 for a float64 model): one
            score per position; positions holding the same token share it; zero
            on padding. For a causal LM (``target`` the continuation's ids
            ``[batch, T]``, right-padded with -100): ``[batch, T, P]``
            (``[batch, T, P + T]`` with ``attribute_generated``), zero outside
            the score mask.
        """
        check_aggregation_options(tau, relu)
        check_recompute(recompute)
        return self._attribute(
            inputs,
            target,
            additional_forward_args,
            internal_batch_size=internal_batch_size,
            attribute_generated=attribute_generated,
            contrast_target=contrast_target,
            options={
                "tau": tau,
                "relu": relu,
                "internal_batch_size": internal_batch_size,
            },
            generation_options={"recompute": recompute},
            per_example=attribute_kwargs,
        )

    def _generated_scores(
        self,
        forced: TeacherForcedBatch,
        contrast: Optional[Tensor],
        tau: Optional[int] = None,
        relu: Optional[str] = "outside",
        internal_batch_size: Optional[int] = None,
        recompute: Optional[bool] = None,
        **attribute_kwargs: Any,
    ) -> Tensor:
        r"""Causal LMs: decoded scores ``[batch, T, P + T - 1]``: the wrapped
        method explains ``log p(y_t)`` once per step ``t`` (its own forward and
        backward passes: a generic Captum method takes one target at a time)."""
        if recompute:
            raise ValueError(
                "recompute=True needs DecodedLayerGradCam without options for "
                "the wrapped method; a generic Captum method runs its own "
                "forward and backward passes (pass recompute=None or False)"
            )
        kwargs = dict(shared_options(attribute_kwargs))
        with torch.no_grad():
            hidden, _, module = self._captured(
                lambda: run_teacher_forced(
                    self.adapter, forced, predicting_logits_only=True
                )
            )
        kwargs = self._with_batch_size(module, kwargs, internal_batch_size)
        batch = TokenBatch(*forced.model_inputs())
        forward_args = (batch.attention_mask, forced.target, contrast)
        rows = [
            self._position_scores(module, batch, step, kwargs, forward_args)
            for step in range(forced.n_targets)
        ]  # [batch, pos] each
        return self._decode_rows(hidden, forced, rows, tau, relu)

    def _decode_rows(
        self,
        hidden: Tensor,
        forced: TeacherForcedBatch,
        rows: Sequence[Tensor],
        tau: Optional[int],
        relu: Optional[str],
    ) -> Tensor:
        r"""Causal LMs: the decoded scores of every target row, ``[batch, T, pos]``.

        ``D`` is decoded once from ``hidden`` ``[batch, pos, d]`` over the model's
        input (``prompt + y_<T``); row ``t`` aggregates ``rows[t]`` ``[batch,
        pos]`` (``a_{t,j}``, zero after ``y_t``'s predicting position) onto the
        tokens before ``y_t``, which are the candidates of the top-tau mask,
        exactly as the single-target run on ``prompt + y_<t`` does. Without
        ``tau`` no ``D`` is formed (:func:`decoded_token_sums`)."""
        input_ids, attention_mask = forced.model_inputs()
        model_batch = TokenBatch(input_ids, attention_mask)
        width = input_ids.shape[1]
        # [batch, T, pos]: the positions before each target.
        visible = forced.score_mask(attribute_generated=True)[..., :width]
        if tau is None:
            # No top-tau mask: the same sums over j without the [pos, pos] map,
            # so a long prompt costs memory linear in its length.
            tokens = _with_relu(
                torch.stack(list(rows), dim=1),
                relu,
                partial(
                    decoded_token_sums,
                    self.decoder,
                    hidden,
                    model_batch,
                    vocab_size=self.vocab_size,
                ),
            )  # [batch, T, pos]
            return tokens * visible.to(tokens.dtype)
        decoded = decoded_input_probabilities(
            self.decoder, hidden, model_batch, self.vocab_size
        )  # [batch, pos_j, pos_i]
        decoded_rows = [
            aggregate(decoded, scores, TokenBatch(input_ids, seen), tau, relu)
            for scores, seen in zip(rows, visible.unbind(1))
        ]
        return torch.stack(decoded_rows, dim=1)

    def _chunk_scores(
        self,
        batch: TokenBatch,
        target: TargetType,
        tau: Optional[int] = None,
        relu: Optional[str] = "outside",
        internal_batch_size: Optional[int] = None,
        **attribute_kwargs: Any,
    ) -> Tuple[Tensor, Tensor]:
        r"""Token scores ``[batch, pos]`` and the logits ``[batch, C]``."""
        hidden, logits, module = self._probe(batch)
        index = resolve_target(target, logits)
        kwargs = self._with_batch_size(module, attribute_kwargs, internal_batch_size)
        scores = self._position_scores(module, batch, index, kwargs)
        decoded = decoded_input_probabilities(
            self.decoder, hidden, batch, self.vocab_size
        )
        return aggregate(decoded, scores, batch, tau, relu), logits


def _registered(model: Any) -> bool:
    r"""Whether the adapter table knows ``model`` (the shortcut)."""
    try:
        get_adapter(model)
    except UnsupportedModelError:
        return False
    return True

#!/usr/bin/env python3
r"""LogAt: the model's own head applied to every token's final hidden state."""

from typing import Any, Callable, Optional, Tuple, Union

import torch
from captum._utils.typing import TargetType
from captum.attr._utils.attribution import Attribution
from torch import nn, Tensor

from captum_ext._utils.decoder_vocabulary import check_decoder_vocabulary
from captum_ext._utils.model_forward import resolve_target, run_model
from captum_ext._utils.teacher_forcing import TeacherForcedBatch
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.adapters import check_head_reproduces, ModelAdapter
from captum_ext.attr._core.layer.logat import LogAt as LayerLogAt
from captum_ext.attr._utils.at_target import at_target
from captum_ext.attr._utils.result_dtype import result_dtype
from captum_ext.attr._utils.teacher_forced_attribution import run_teacher_forced
from captum_ext.attr._utils.token_attribution import TokenAttribution

__all__ = ["LogAt"]


class LogAt(TokenAttribution, LayerLogAt):
    r"""
    LogAt ("logit attribution") scores token :math:`i` with the logit the model's
    own head-on-top (HoT) gives when it reads token :math:`i`'s final hidden state
    :math:`x_i^L` instead of the classification position:

    .. math::
        \mathrm{LogAt}(x_i) = \mathrm{HoT}(x_i^L)[c]

    where :math:`c` is the target class (by default the model's predicted class)
    and the logit is taken before softmax. For a regression model
    (``num_labels == 1``, where ``target`` can only be 0 or None) the score is
    the distance to the model's output:

    .. math::
        \mathrm{LogAt}(x_i) = \left|\mathrm{HoT}(x_i^L) - \mathrm{HoT}(x_{cls}^L)
        \right|

    where :math:`cls` is the position the model predicts from ([CLS]/<s> for
    encoders, the last real token for causal classifiers), so
    :math:`\mathrm{HoT}(x_{cls}^L)` is the model's output.

    **Per-layer variant.** With ``layer=l`` the head reads ``hidden_states[l]``
    instead; with a ``decoder`` (any module mapping hidden states to vocabulary
    logits, e.g. a masked-LM head) the score is
    :math:`\mathrm{decoder}(x_i^l)[t]` for a vocabulary id :math:`t` (``target``,
    which must then be given). For causal models, whose ``hidden_states[L]`` has
    passed the final norm but whose earlier hidden states have not, the final
    norm is applied to ``hidden_states[l]``, ``l < L``, before the head or
    decoder, so it reads what it was trained on.

    Scores are signed, computed in the model's dtype from one forward pass
    (per chunk of ``internal_batch_size`` examples) without gradients, returned
    in float32, and exactly zero on padding. All tokens, special ones included,
    are scored. Without a decoder, every call checks that the adapter's head at
    the classification position reproduces the model's own logits, so a
    non-standard head (mean pooling, say) raises
    :class:`~captum_ext.UnsupportedModelError` instead of giving wrong scores.

    The HoT of each family is :meth:`ModelAdapter.head_on_every_position`, e.g.
    ``classifier(tanh(pooler.dense(x_i)))`` for BERT, ``score(x_i)`` for
    GPT-2 / Llama.

    **Causal LMs** (``*ForCausalLM``; docs/generation.rst): ``target`` is the
    continuation ``y_1..y_T`` ``[batch, T]`` and row :math:`t` of the result
    ``[batch, T, P]`` scores position :math:`i` with the logit of :math:`y_t`
    that the model's own head (final norm + LM head) gives at :math:`i`:

    .. math::
        \mathrm{LogAt}_t(x_i) = \mathrm{logits}_i[y_t]
        \quad (- \mathrm{logits}_i[y'_t] \text{ with a contrast target})

    read from ``model(prompt + y_<T).logits`` itself: all T rows come from one
    teacher-forced forward pass, with no softmax (a logit, as for classifiers:
    a log-probability at position :math:`i` would subtract a log-sum-exp that
    depends on :math:`i` but not on :math:`y_t`). Row :math:`t` is zero at
    :math:`y_t`'s position and after it; ``layer`` / ``decoder`` apply as above.

    The position that predicts :math:`y_t`, :math:`p_t`, would score the
    logit the model actually outputs, and on a copy task it ranks first (the
    queried key of a recall prompt); so by default that own term is left out
    (zero, as outside the score mask) and row :math:`t` ranks the other
    positions (``score_predicting_position=True`` scores it; the choice is
    measured in docs/generation.rst). Either way row :math:`t` keeps the
    consistency law.

    LogAt is defined in the NormXLogit paper: see :class:`NormXLogit` for the
    reference and the authors' code.
    """

    explains_generation = True

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: Union[None, int, nn.Module] = None,
        decoder: Optional[nn.Module] = None,
        head: Optional[nn.Module] = None,
        *,
        score_predicting_position: bool = False,
    ) -> None:
        r"""
        Args:

            forward_func (Callable): With a ``layer`` module,
                        ``forward_func(inputs, *additional_forward_args) ->
                        [batch, C]`` (e.g. logits; a module runs in eval
                        mode). Else a Hugging Face transformer of a family
                        supported by :func:`captum_ext.get_adapter` (the
                        shortcut), a ``*ForSequenceClassification`` model
                        unless a ``decoder`` is given.
            layer (int or torch.nn.Module, optional): A module whose output is
                        the final hidden states ``[batch, pos, d]`` the
                        ``head`` reads (built Captum's way); or, for the
                        shortcut, the index into ``hidden_states`` (0 =
                        embedding output, L = last block; negative counts
                        from L) the head or decoder reads.
                        Default: None (the shortcut, L: the paper's setting)
            decoder (torch.nn.Module, optional): The shortcut: maps hidden
                        states ``[batch, pos, d_model]`` to vocabulary logits
                        ``[batch, pos, V]`` and replaces the classification
                        head, e.g. ``get_adapter(mlm_model).mlm_head()``. Then
                        ``target`` is a vocabulary id and must be given.
                        Default: None (the model's classification head)
            head (torch.nn.Module, optional): With a ``layer`` module: the
                        model's own head applied to every position, ``[batch,
                        pos, d] -> [batch, pos, C]``, ``C`` the outputs of
                        ``forward_func``.
                        Default: None (required with a ``layer`` module)
            score_predicting_position (bool, optional): Causal LMs: False
                        leaves row ``t``'s predicting position out (zero);
                        True scores it.
                        Default: False (chosen by measurement,
                        docs/generation.rst)
        """
        self.score_predicting_position = score_predicting_position
        self.decoder = decoder
        self.built_from_modules = isinstance(layer, nn.Module)
        if isinstance(layer, nn.Module):
            if decoder is not None:
                raise ValueError(
                    f"{type(self).__name__} built from a layer module applies "
                    "head=; decoder= belongs to the shortcut (pass a decoder as "
                    "head= and a vocabulary id as target)"
                )
            self._from_modules(forward_func, layer, head)
            return
        Attribution.__init__(self, forward_func)
        self.head, self.layer_module = head, None
        if head is not None:
            raise ValueError(
                f"{type(self).__name__}'s head goes with a layer module (and "
                "forward_func); the shortcut applies the model's own head"
            )
        adapter = self._use_shortcut(forward_func, images=True)
        self.layer = adapter.num_layers if layer is None else adapter.check_layer(layer)
        self._fill_image_modules()

    def _from_modules(
        self,
        forward_func: Callable[..., Any],
        layer: nn.Module,
        head: Optional[nn.Module],
    ) -> None:
        r"""Builds the method Captum's way (:class:`LayerLogAt`)."""
        LayerLogAt.__init__(self, forward_func, layer, head)

    def _image_modules(self, adapter: ModelAdapter) -> None:
        r"""A vision transformer: the classifier on every position of
        ``hidden_states[layer]``, after the final norm for an earlier layer."""
        if self.decoder is not None:
            raise ValueError(
                f"{type(self).__name__}'s decoder maps hidden states to a "
                "vocabulary; a vision transformer has none"
            )
        last, classifier = adapter.num_layers, adapter.classifier_module()
        self.layer_module = adapter.hidden_state_module(self.layer)
        self.head = classifier
        if self.layer < last:
            self.head = nn.Sequential(adapter.hidden_state_module(last), classifier)

    def _chunk_scores(
        self, batch: TokenBatch, target: TargetType
    ) -> Tuple[Tensor, Tensor]:
        r"""Scores ``[batch, pos]`` in float32 or wider, and the model output
        checked for NaN/inf: its logits ``[batch, C]``, or with a decoder the
        hidden state decoded ``[batch, pos, d]``."""
        out = run_model(
            self.adapter, batch, hidden_states=True, classifier=self.decoder is None
        )
        if self.decoder is None:
            self._check_head(batch, out)
        scores = self._scores(batch, out, target)
        checked = out.logits if self.decoder is None else out.hidden_states[self.layer]
        return scores.to(result_dtype(scores.dtype)), checked

    def _check_head(self, batch: TokenBatch, out: Any) -> None:
        r"""The adapter's head on the final hidden state at the classification
        position must give the model's own logits: a custom head (mean pooling,
        say) would make every score a wrong number."""
        position = self.adapter.tokens.classification_position(
            batch.input_ids, batch.attention_mask
        )  # [batch]
        rows = torch.arange(len(position), device=position.device)
        final = out.hidden_states[self.adapter.num_layers][rows, position]  # [b, d]
        head = self.adapter.head_on_every_position(final[:, None])[:, 0]  # [b, C]
        check_head_reproduces(self.adapter, head.float(), out.logits.float())

    def _scores(self, batch: TokenBatch, out: Any, target: TargetType) -> Tensor:
        r"""Per-position target logits ``[batch, pos]`` (subclasses rescale them),
        in the model's dtype."""
        logits = self._position_logits(out.hidden_states[self.layer])  # [b, pos, C]
        if self.decoder is not None:
            check_decoder_vocabulary(logits, self.adapter.config.vocab_size)
            return at_target(logits, _vocabulary_target(target, logits))
        index = resolve_target(target, out.logits)  # [batch]
        if not self.adapter.is_regression:
            return at_target(logits, index)
        position = self.adapter.tokens.classification_position(
            batch.input_ids, batch.attention_mask
        )
        values = logits[..., 0]  # [batch, pos]
        at_cls = values.gather(1, position[:, None])  # [batch, 1]
        return (values - at_cls).abs()

    def _generated_scores(
        self, forced: TeacherForcedBatch, contrast: Optional[Tensor]
    ) -> Tensor:
        r"""``logits_i[y_t]`` (minus ``logits_i[y'_t]``) at every position of the
        model's input: ``[batch, T, P + T - 1]``, from one forward pass."""
        out = run_teacher_forced(self.adapter, forced, hidden_states=True)
        if self.layer == self.adapter.num_layers and self.decoder is None:
            logits = out.logits  # the model's own: no second pass over the vocabulary
        else:
            logits = self._position_logits(out.hidden_states[self.layer])
            check_decoder_vocabulary(logits, self.adapter.config.vocab_size)
        scores = _logits_of(logits, forced.target)  # [batch, T, pos]
        if contrast is not None:
            scores = scores - _logits_of(logits, contrast)
        input_ids, attention_mask = forced.model_inputs()
        factor = self._generated_factor(TokenBatch(input_ids, attention_mask), out)
        scores = scores if factor is None else factor[:, None] * scores
        if self.score_predicting_position:
            return scores
        return scores.masked_fill(forced.predicting_mask(scores.shape[-1]), 0)

    def _generated_factor(self, batch: TokenBatch, out: Any) -> Optional[Tensor]:
        r"""A per-position factor ``[batch, pos]`` of every row (NormXLogit's
        norms); LogAt has none."""
        return None

    def _position_logits(self, hidden: Tensor) -> Tensor:
        r"""Head or decoder on every position: ``[batch, pos, d] -> [b, pos, C]``."""
        if self.decoder is None and self.adapter.is_causal_lm:
            return self.adapter.lm_head_on_every_position(hidden, self.layer)
        last = self.adapter.num_layers
        if self.adapter.is_causal and self.layer < last:
            # For causal families hidden_states[L] is the final norm's output, and
            # the head was trained on normalised states only.
            hidden = self.adapter.hidden_state_module(last)(hidden)
        if self.decoder is not None:
            decoded: Tensor = self.decoder(hidden)
            return decoded
        return self.adapter.head_on_every_position(hidden)


def _logits_of(logits: Tensor, ids: Tensor) -> Tensor:
    r"""``logits[b, i, ids[b, t]]`` as ``[batch, T, pos]`` in float32 or wider:
    the logit of each target at every position (no softmax)."""
    index = ids.clamp(min=0)[:, None, :].expand(-1, logits.shape[1], -1)
    chosen = logits.gather(2, index).transpose(1, 2)  # [batch, T, pos]
    return chosen.to(result_dtype(chosen.dtype))


def _vocabulary_target(target: TargetType, logits: Tensor) -> Tensor:
    if target is None:
        raise ValueError(
            "with a decoder, target is the vocabulary id to explain (e.g. the gold "
            "token at the masked position) and must be given; there is no single "
            "predicted class for the whole sequence"
        )
    # Only the shape [batch, V] matters for validating the ids.
    return resolve_target(target, logits[:, 0])

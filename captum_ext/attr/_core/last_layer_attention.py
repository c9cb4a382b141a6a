#!/usr/bin/env python3
r"""Last-layer attention: the classification position's row of the last layer's
head-averaged attention (the AttCAT paper's "Attention" baseline)."""

from typing import Any, Callable, Optional, Tuple

from captum._utils.typing import ModuleOrModuleList, TargetType
from captum.attr._utils.attribution import Attribution
from torch import Tensor

from captum_ext._utils.model_forward import resolve_target, run_model
from captum_ext._utils.teacher_forcing import TeacherForcedBatch
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.adapters import ModelAdapter
from captum_ext.attr._core.layer.last_layer_attention import (
    LastLayerAttention as LayerLastLayerAttention,
)
from captum_ext.attr._utils.teacher_forced_attribution import run_teacher_forced
from captum_ext.attr._utils.token_attribution import TokenAttribution

__all__ = ["LastLayerAttention"]


class LastLayerAttention(TokenAttribution, LayerLastLayerAttention):
    r"""
    Scores token :math:`i` with the attention the position the model classifies
    from, :math:`p` ([CLS] / <s> for encoders, the last real token for causal
    classifiers), pays to it in the last layer :math:`L`, averaged over the
    :math:`H` heads:

    .. math::
        \mathrm{Attention}(x_i) = \bar{A}^L[p, i], \qquad
        \bar{A}^l = \frac{1}{H} \sum_{h=1}^{H} A^l_h

    where :math:`A^l_h` ``[pos (query), pos (key)]`` are the attention
    probabilities of head :math:`h` in block :math:`l`.

    The method is class-agnostic: ``target`` is validated but does not change
    the result. Scores are non-negative, sum to 1 over the real tokens, are
    computed from one forward pass (per chunk of ``internal_batch_size``
    examples) without gradients in float32 (float64 for a float64 model), and
    are exactly zero on padding. Any attention implementation works (eager,
    sdpa, flash): with sdpa and flash the rows are recomputed from the model's
    own query and key, a block of rows at a time
    (:class:`~captum_ext.adapters.AttentionCapture`), so memory stays linear in
    the length.

    **Causal LMs**: row :math:`t` is the predicting position :math:`p_t` of
    :math:`y_t`, :math:`\bar{A}^L[p_t, i]` (the attention the position that
    predicts :math:`y_t` pays to token :math:`i`; row :math:`t` equals the
    single-target run on ``prompt + y_<t``, as causal attention reads no later
    token). Scores of one row sum to 1 over the prompt and the generated tokens
    before :math:`y_t`.

    This is the "Attention" baseline of the AttCAT paper (Qiang et al.,
    "AttCAT: Explaining Transformers via Attentive Class Activation Tokens",
    NeurIPS 2022):
    https://papers.nips.cc/paper_files/paper/2022/hash/20e45668fefa793bd9f2edf19be12c4b-Abstract-Conference.html
    """

    explains_generation = True
    reads_attention = True

    def __init__(
        self,
        forward_func: Callable[..., Any],
        attention: Optional[ModuleOrModuleList] = None,
        position: Optional[int] = None,
    ) -> None:
        r"""
        Args:

            forward_func (Callable): With ``attention``,
                        ``forward_func(inputs, *additional_forward_args) ->
                        [batch, C]`` (its outputs validate ``target``); else a
                        Hugging Face model of a family supported by
                        :func:`captum_ext.get_adapter` (the shortcut).
            attention (nn.Module or list of nn.Module, optional): The
                        modules, first layer first, whose outputs are the
                        attention probabilities ``[batch, heads, pos, pos]``
                        (or a tuple ``(output, probabilities)``, as a Hugging
                        Face attention module returns in eager attention);
                        the product reads the last one alone
                        (:class:`LastLayerAttention`) or all of them
                        (:class:`AttentionRollout`).
                        Default: None (the shortcut)
            position (int, optional): With ``attention``: the position the
                        model classifies from, whose row is read (negative
                        counts from the end: -1 for a causal classifier).
                        Default: None (0, a class token; the shortcut reads
                        the model's own classification position)
        """
        self.built_from_modules = attention is not None
        if attention is not None:
            LayerLastLayerAttention.__init__(self, forward_func, attention, position)
            return
        Attribution.__init__(self, forward_func)
        name = type(self).__name__
        self.position, self.attention = 0, None
        if position is not None:
            raise ValueError(
                f"{name}'s position goes with attention modules (and "
                "forward_func); the shortcut reads the model's own "
                "classification position"
            )
        self._use_shortcut(forward_func, images=True)
        self._fill_image_modules()

    def _image_modules(self, adapter: ModelAdapter) -> None:
        r"""A vision transformer: every block's attention, read at its class
        token (position 0)."""
        self.attention = adapter.attention_modules()

    def _chunk_scores(
        self, batch: TokenBatch, target: TargetType
    ) -> Tuple[Tensor, Tensor]:
        with self.adapter.attention_capture(type(self).__name__) as capture:
            out = run_model(self.adapter, batch, attentions=capture.output_attentions)
        resolve_target(target, out.logits)  # validated only: class-agnostic
        position = self.adapter.tokens.classification_position(
            batch.input_ids, batch.attention_mask
        )  # [batch]
        rows = self._rows(capture.layers(out), position[:, None])  # [batch, 1, pos]
        return rows[:, 0], out.logits

    def _generated_scores(
        self, forced: TeacherForcedBatch, contrast: Optional[Tensor]
    ) -> Tensor:
        r"""Rows of the predicting positions, ``[batch, T, P + T - 1]``; the
        scores read no logit, so ``contrast`` changes nothing."""
        with self.adapter.attention_capture(type(self).__name__) as capture:
            out = run_teacher_forced(
                self.adapter,
                forced,
                attentions=capture.output_attentions,
                predicting_logits_only=True,
            )
        predicting = forced.predicting_positions()  # [T]
        positions = predicting[None].expand(len(forced.target), -1)  # [batch, T]
        return self._rows(capture.layers(out), positions)

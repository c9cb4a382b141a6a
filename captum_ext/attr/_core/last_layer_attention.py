#!/usr/bin/env python3
r"""Last-layer attention: the classification position's row of the last layer's
head-averaged attention (the AttCAT paper's "Attention" baseline)."""

from typing import List, Tuple

from captum._utils.typing import TargetType
from torch import Tensor

from captum_ext._utils.common import resolve_target, run_model, TokenBatch
from captum_ext.attr._utils.attribute_in_chunks import result_dtype
from captum_ext.attr._utils.forward_only_attribution import ForwardOnlyAttribution
from captum_ext.attr._utils.rollout import rollout_row

__all__ = ["LastLayerAttention"]


class LastLayerAttention(ForwardOnlyAttribution):
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
    are exactly zero on padding. The model must return attention weights
    (``attn_implementation="eager"``).

    This is the "Attention" baseline of the AttCAT paper (Qiang et al.,
    "AttCAT: Explaining Transformers via Attentive Class Activation Tokens",
    NeurIPS 2022):
    https://papers.nips.cc/paper_files/paper/2022/hash/20e45668fefa793bd9f2edf19be12c4b-Abstract-Conference.html
    """

    _uses_attention = True

    def _chunk_scores(
        self, batch: TokenBatch, target: TargetType
    ) -> Tuple[Tensor, Tensor]:
        out = run_model(self.adapter, batch, attentions=True)
        resolve_target(target, out.logits)  # validated only: class-agnostic
        # the head average is taken in float32 at least: bfloat16 sums of
        # probabilities lose the small weights
        rolled_out = self._rolled_out(list(out.attentions))
        dtype = result_dtype(rolled_out[0].dtype)
        weights = [layer.to(dtype).mean(1) for layer in rolled_out]
        position = self.adapter.tokens.classification_position(
            batch.input_ids, batch.attention_mask
        )  # [batch]
        return rollout_row(weights, position), out.logits

    def _rolled_out(self, attentions: List[Tensor]) -> List[Tensor]:
        r"""The layers whose attentions ``[batch, heads, query, key]`` (first
        layer first) are head-averaged and multiplied: the last one alone."""
        return attentions[-1:]

#!/usr/bin/env python3
r"""Last-layer attention: the classification position's row of the last layer's
head-averaged attention (the AttCAT paper's "Attention" baseline)."""

from typing import Any, List, Optional, Tuple, Union

from captum._utils.typing import TargetType
from captum.attr._utils.attribution import Attribution
from captum.log import log_usage
from torch import nn, Tensor

from captum_ext._utils.common import resolve_target, run_model, TokenBatch
from captum_ext.adapters import get_adapter
from captum_ext.attr._core.chunked import attribute_forward_only, result_dtype
from captum_ext.attr._utils.rollout import rollout_row

__all__ = ["LastLayerAttention"]


class LastLayerAttention(Attribution):
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

    def __init__(self, model: nn.Module) -> None:
        r"""
        Args:

            model (torch.nn.Module): A Hugging Face
                        ``*ForSequenceClassification`` model of a family
                        supported by :func:`captum_ext.get_adapter`, loaded with
                        ``attn_implementation="eager"``.
        """
        Attribution.__init__(self, model)
        self.adapter = get_adapter(model)

    @log_usage()
    def attribute(
        self,
        inputs: Union[Tensor, Tuple[Tensor]],
        target: TargetType = None,
        additional_forward_args: Any = None,
        internal_batch_size: Optional[int] = None,
    ) -> Tensor:
        r"""
        Args:

            inputs (Tensor): Token ids ``[batch, pos]``.
            target (int, list, or Tensor, optional): Accepted for compatibility
                        with Captum's API and validated (an out-of-range class
                        raises), but the method is class-agnostic: the result
                        is the same for every target.
                        Default: None
            additional_forward_args (Tensor or tuple, optional): ``attention_mask``
                        ``[batch, pos]`` (1 on real tokens, 0 on padding) or
                        ``(attention_mask, token_type_ids)``.
                        Default: None (every position is a real token)
            internal_batch_size (int, optional): Run the batch in chunks of at
                        most this many examples, one forward pass per chunk,
                        so that only one chunk's attentions of every layer are
                        held at a time; the scores are those of the whole batch.
                        Default: None (the whole batch at once)

        Returns:
            *Tensor* of **attributions**:
            - **attributions** (*Tensor*): ``[batch, pos]`` non-negative
                        scores in float32 (float64 for a float64 model), the
                        classification position's row (see the class
                        docstring); exactly zero where ``attention_mask`` is 0.

        Examples::

            >>> model = AutoModelForSequenceClassification.from_pretrained(
            ...     name, attn_implementation="eager")
            >>> enc = tokenizer(texts, padding=True, return_tensors="pt")
            >>> attention = LastLayerAttention(model)
            >>> attr = attention.attribute(
            ...     enc["input_ids"],
            ...     additional_forward_args=(enc["attention_mask"],))
        """
        self.adapter.require_attention_weights(type(self).__name__)
        return attribute_forward_only(
            self.adapter,
            inputs,
            target,
            additional_forward_args,
            internal_batch_size,
            self._chunk_scores,
            type(self).__name__,
        )

    def _chunk_scores(
        self, batch: TokenBatch, target: TargetType
    ) -> Tuple[Tensor, Tensor]:
        r"""One chunk's scores ``[batch, pos]`` in float32 or wider, and its
        logits ``[batch, C]``."""
        out = run_model(self.adapter, batch, attentions=True)
        resolve_target(target, out.logits)  # validated only: class-agnostic
        # the head average is taken in float32 at least: bfloat16 sums of
        # probabilities lose the small weights
        dtype = result_dtype(out.attentions[0].dtype)
        weights = [layer.to(dtype).mean(1) for layer in out.attentions]
        position = self.adapter.tokens.classification_position(
            batch.input_ids, batch.attention_mask
        )  # [batch]
        return rollout_row(self._rolled_out(weights), position), out.logits

    def _rolled_out(self, weights: List[Tensor]) -> List[Tensor]:
        r"""The layers whose head-averaged attentions ``[batch, query, key]``
        (first layer first) are multiplied: the last one alone."""
        return weights[-1:]

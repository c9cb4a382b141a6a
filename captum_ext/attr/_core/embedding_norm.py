#!/usr/bin/env python3
r"""Embedding norm: the L2 norm of each token's embedding-layer output (the
NormXLogit paper's "Norm" baseline)."""

from typing import Any, Optional, Tuple, Union

from captum._utils.typing import TargetType
from captum.attr._utils.attribution import Attribution
from captum.log import log_usage
from torch import nn, Tensor

from captum_ext._utils.common import resolve_target, run_model, TokenBatch
from captum_ext.adapters import get_adapter
from captum_ext.attr._core.chunked import attribute_forward_only, result_dtype

__all__ = ["EmbeddingNorm"]


class EmbeddingNorm(Attribution):
    r"""
    Scores token :math:`i` with the L2 norm of its representation after the
    embedding layer, ``hidden_states[0]``:

    .. math::
        \mathrm{Norm}(x_i) = \lVert x_i^0 \rVert_2

    (for BERT, :math:`x_i^0` is the LayerNorm of the word, position and segment
    embeddings). This is the factor :class:`~captum_ext.attr.NormXLogit`
    multiplies the LogAt logit by, alone: the NormXLogit paper's "Norm"
    baseline.

    The method is class-agnostic: ``target`` is validated but does not change
    the result. Scores are positive, computed from one forward pass (per chunk
    of ``internal_batch_size`` examples) without gradients in float32 (float64
    for a float64 model), and are exactly zero on padding.

    More details can be found in the NormXLogit paper (Abbasi, Modarres and
    Pilehvar, "NormXLogit: The Head-on-Top Never Lies", EMNLP 2025):
    https://aclanthology.org/2025.emnlp-main.1769/ (arXiv:
    https://arxiv.org/abs/2411.16252)
    """

    def __init__(self, model: nn.Module) -> None:
        r"""
        Args:

            model (torch.nn.Module): A Hugging Face
                        ``*ForSequenceClassification`` model of a family
                        supported by :func:`captum_ext.get_adapter`.
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
                        most this many examples, one forward pass per chunk;
                        the scores are those of the whole batch.
                        Default: None (the whole batch at once)

        Returns:
            *Tensor* of **attributions**:
            - **attributions** (*Tensor*): ``[batch, pos]`` positive norms in
                        float32 (float64 for a float64 model), exactly zero
                        where ``attention_mask`` is 0.

        Examples::

            >>> enc = tokenizer(texts, padding=True, return_tensors="pt")
            >>> attr = EmbeddingNorm(model).attribute(
            ...     enc["input_ids"],
            ...     additional_forward_args=(enc["attention_mask"],))
        """
        return attribute_forward_only(
            self.adapter,
            inputs,
            target,
            additional_forward_args,
            internal_batch_size,
            self._chunk_norms,
            type(self).__name__,
        )

    def _chunk_norms(
        self, batch: TokenBatch, target: TargetType
    ) -> Tuple[Tensor, Tensor]:
        r"""One chunk's norms ``[batch, pos]`` in float32 or wider, and its
        logits ``[batch, C]``."""
        out = run_model(self.adapter, batch, hidden_states=True)
        resolve_target(target, out.logits)  # validated only: class-agnostic
        embedded = out.hidden_states[0]  # [batch, pos, d_model]
        # norms in float32 at least: a bfloat16 sum of d squares is coarse
        norms = embedded.to(result_dtype(embedded.dtype)).norm(dim=-1)
        return norms, out.logits

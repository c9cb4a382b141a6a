#!/usr/bin/env python3
r"""Embedding norm: the L2 norm of each token's embedding-layer output (the
NormXLogit paper's "Norm" baseline)."""

from typing import Any, Callable, Optional, Tuple

from captum._utils.typing import TargetType
from captum.attr._utils.attribution import Attribution
from torch import nn, Tensor

from captum_ext._utils.model_forward import resolve_target, run_model
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.adapters import ModelAdapter
from captum_ext.attr._core.layer.embedding_norm import (
    EmbeddingNorm as LayerEmbeddingNorm,
)
from captum_ext.attr._utils.token_attribution import TokenAttribution
from captum_ext.attr._utils.token_norms import token_norms

__all__ = ["EmbeddingNorm"]


class EmbeddingNorm(TokenAttribution, LayerEmbeddingNorm):
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

    def __init__(
        self, forward_func: Callable[..., Any], embedding: Optional[nn.Module] = None
    ) -> None:
        r"""
        Args:

            forward_func (Callable): With ``embedding``,
                        ``forward_func(inputs, *additional_forward_args) ->
                        [batch, C]`` (its outputs validate ``target``); else a
                        Hugging Face model of a family supported by
                        :func:`captum_ext.get_adapter` (the shortcut).
            embedding (torch.nn.Module, optional): The module whose output is
                        :math:`x^0` ``[batch, pos, d]``.
                        Default: None (the shortcut: ``hidden_states[0]``)
        """
        self.built_from_modules = embedding is not None
        if embedding is not None:
            LayerEmbeddingNorm.__init__(self, forward_func, embedding)
            return
        Attribution.__init__(self, forward_func)
        self.embedding = None
        self._use_shortcut(forward_func, images=True)
        self._fill_image_modules()

    def _image_modules(self, adapter: ModelAdapter) -> None:
        self.embedding = adapter.hidden_state_module(0)

    def _chunk_scores(
        self, batch: TokenBatch, target: TargetType
    ) -> Tuple[Tensor, Tensor]:
        out = run_model(self.adapter, batch, hidden_states=True)
        resolve_target(target, out.logits)  # validated only: class-agnostic
        return token_norms(out.hidden_states[0]), out.logits

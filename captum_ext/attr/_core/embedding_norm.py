#!/usr/bin/env python3
r"""Embedding norm: the L2 norm of each token's embedding-layer output (the
NormXLogit paper's "Norm" baseline)."""

from typing import Tuple

from captum._utils.typing import TargetType
from torch import Tensor

from captum_ext._utils.model_forward import resolve_target, run_model
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.attr._utils.attribute_in_chunks import result_dtype
from captum_ext.attr._utils.forward_only_attribution import ForwardOnlyAttribution

__all__ = ["EmbeddingNorm"]


class EmbeddingNorm(ForwardOnlyAttribution):
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

    def _chunk_scores(
        self, batch: TokenBatch, target: TargetType
    ) -> Tuple[Tensor, Tensor]:
        out = run_model(self.adapter, batch, hidden_states=True)
        resolve_target(target, out.logits)  # validated only: class-agnostic
        embedded = out.hidden_states[0]  # [batch, pos, d_model]
        # norms in float32 at least: a bfloat16 sum of d squares is coarse
        norms = embedded.to(result_dtype(embedded.dtype)).norm(dim=-1)
        return norms, out.logits

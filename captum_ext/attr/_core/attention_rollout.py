#!/usr/bin/env python3
r"""Raw attention rollout: the plain product of every layer's head-averaged
attention, read at the classification position (the GlobEnc paper's baseline)."""

from captum_ext.attr._core.last_layer_attention import LastLayerAttention
from captum_ext.attr._core.layer.attention_rollout import (
    AttentionRollout as LayerAttentionRollout,
)

__all__ = ["AttentionRollout"]


class AttentionRollout(LastLayerAttention, LayerAttentionRollout):
    r"""
    Scores token :math:`i` with the classification position :math:`p`'s row of
    the product of the head-averaged attentions of all :math:`L` layers:

    .. math::
        \mathrm{Rollout}(x_i) = \left(\bar{A}^L \bar{A}^{L-1} \cdots
        \bar{A}^1\right)[p, i], \qquad
        \bar{A}^l = \frac{1}{H} \sum_{h=1}^{H} A^l_h

    where :math:`A^l_h` ``[pos (query), pos (key)]`` are the attention
    probabilities of head :math:`h` in block :math:`l` and :math:`p` is the
    position the model classifies from ([CLS] / <s> for encoders, the last real
    token for causal classifiers). Unlike Abnar and Zuidema's rollout, no
    identity (residual) is added and the rows are not renormalised: this is the
    raw attention rollout ("W") the GlobEnc paper compares against (its reference
    notebook reports a Spearman correlation of -0.11 with gradient x input on
    SST-2). The product is :func:`captum_ext.attr._utils.rollout.rollout_row`,
    the one GlobEnc rolls its norm matrices out with.

    The method is class-agnostic: ``target`` is validated but does not change
    the result. Scores are non-negative, computed from one forward pass (per
    chunk of ``internal_batch_size`` examples, see
    :meth:`LastLayerAttention.attribute`) without gradients in float32 (float64
    for a float64 model), and are exactly zero on padding. Any attention
    implementation works; with sdpa and flash each layer is multiplied in a
    block of rows at a time from the model's own query and key, so no
    ``[pos, pos]`` matrix is formed and memory stays linear in the length.

    **Causal LMs**: row :math:`t` is row :math:`p_t` (the predicting position of
    :math:`y_t`) of the product, as in :class:`LastLayerAttention`.

    More details can be found in the GlobEnc paper (Modarressi et al., NAACL
    2022): https://aclanthology.org/2022.naacl-main.19/ and, for attention
    rollout, Abnar and Zuidema (ACL 2020):
    https://aclanthology.org/2020.acl-main.385/
    """

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
    Raw attention rollout: the row of the classification position :math:`p`
    in the product of every layer's head-averaged attention, without identity
    or renormalisation (the equation and the paper's reasons are
    :class:`captum_ext.attr._core.layer.attention_rollout.AttentionRollout`'s,
    built from ``forward_func`` and the attention modules). This class adds
    the shortcut from a Hugging Face model: :math:`p` is [CLS] / <s> for
    encoders and the last real token for causal classifiers, scores are
    exactly zero on padding, and any attention implementation works (with
    sdpa and flash each layer is multiplied in a block of rows at a time from
    the model's own query and key, so no ``[pos, pos]`` matrix is formed).
    The product is :func:`captum_ext.attr._utils.rollout.rollout_row`, the one
    GlobEnc rolls its norm matrices out with.

    **Causal LMs**: row :math:`t` is row :math:`p_t` (the predicting position of
    :math:`y_t`) of the product, as in :class:`LastLayerAttention`.
    """

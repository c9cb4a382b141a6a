#!/usr/bin/env python3
r"""Decoded Grad-CAM built from ``forward_func`` on token ids, the module
whose states are decoded and a decoder onto the vocabulary."""

from typing import Any, Callable, Optional

from captum.attr._core.layer.layer_gradient_x_activation import LayerGradientXActivation
from torch import nn

from captum_ext.attr._core.layer.decoded_layer_attribution import (
    DecodedLayerAttribution,
)
from captum_ext.attr._utils.decoded_probabilities import Decoder

__all__ = ["DecodedLayerGradCam"]


class DecodedLayerGradCam(DecodedLayerAttribution):
    r"""
    Decoded Grad-CAM, the configuration of Hou & Castanon (*Decoding Layer
    Saliency in Language Transformers*, ICML 2023):
    :class:`DecodedLayerAttribution` with Captum's
    ``LayerGradientXActivation``, so that :math:`\alpha = (\partial y /
    \partial h_l) \odot h_l` (Eq. 1), ``[n, d]``, with :math:`y` the target's
    output of ``forward_func`` and :math:`h_l` the output of ``layer``, and
    :math:`a_j = \sum_k \alpha[j, k]`. (This is not Captum's ``LayerGradCam``,
    which mean-pools the gradients.) The decoding, the top-``tau`` mask and
    the ReLU are :class:`DecodedLayerAttribution`'s.

    More details can be found in the original paper:
    https://proceedings.mlr.press/v202/hou23a.html
    """

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: nn.Module,
        decoder: Optional[Decoder],
        multiply_by_inputs: bool = True,
    ) -> None:
        r"""
        Args:

            forward_func (Callable): ``forward_func(input_ids,
                        *additional_forward_args) -> [batch, C]``, with
                        ``layer`` one of its modules.
            layer (torch.nn.Module): The module whose output is :math:`h_l`
                        ``[batch, pos, d]``.
            decoder (Callable): Maps ``[batch, pos, d]`` states to ``[batch,
                        pos, vocab]`` logits, as in
                        :class:`DecodedLayerAttribution`.
            multiply_by_inputs (bool, optional): False drops the activation
                        factor (:math:`\alpha = \partial y / \partial h_l`).
                        Default: True
        """
        DecodedLayerAttribution.__init__(
            self,
            forward_func,
            layer,
            decoder,
            LayerGradientXActivation,
            {"multiply_by_inputs": multiply_by_inputs},
        )
        self.multiply_by_inputs = multiply_by_inputs

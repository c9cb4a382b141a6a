#!/usr/bin/env python3
r"""Embedding norm built from ``forward_func`` and the embedding module."""

from typing import Any, Callable, Optional, Tuple

from captum._utils.typing import TargetType
from captum.attr._utils.attribution import Attribution
from torch import nn, Tensor

from captum_ext._utils.hooks import HookSet
from captum_ext._utils.target import resolve_target
from captum_ext.attr._utils.attribute_with_modules import forward_logits
from captum_ext.attr._utils.layer_states import capture_states, read_states
from captum_ext.attr._utils.layer_token_attribution import LayerTokenAttribution
from captum_ext.attr._utils.token_norms import token_norms

__all__ = ["EmbeddingNorm"]


class EmbeddingNorm(LayerTokenAttribution):
    r"""
    Scores token :math:`i` with the L2 norm of its representation :math:`x_i^0`
    after the embedding layer (the output of ``embedding``):

    .. math::
        \mathrm{Norm}(x_i) = \lVert x_i^0 \rVert_2

    This is the factor :class:`NormXLogit` multiplies the LogAt logit by,
    alone: the NormXLogit paper's "Norm" baseline.

    The method is class-agnostic: ``target`` is validated against
    ``forward_func``'s outputs but does not change the result. Scores are
    non-negative and computed from one forward pass (per chunk of
    ``internal_batch_size`` examples) without gradients in float32 (float64
    for a float64 model).

    More details can be found in the NormXLogit paper (Abbasi, Modarres and
    Pilehvar, "NormXLogit: The Head-on-Top Never Lies", EMNLP 2025):
    https://aclanthology.org/2025.emnlp-main.1769/ (arXiv:
    https://arxiv.org/abs/2411.16252)
    """

    def __init__(self, forward_func: Callable[..., Any], embedding: nn.Module) -> None:
        r"""
        Args:

            forward_func (Callable): ``forward_func(inputs,
                        *additional_forward_args) -> [batch, C]`` (its outputs
                        validate ``target``).
            embedding (torch.nn.Module): The module whose output is
                        :math:`x^0` ``[batch, pos, d]``.
        """
        Attribution.__init__(self, forward_func)
        self.embedding: Optional[nn.Module] = embedding

    def _module_scores(
        self, inputs: Tensor, target: TargetType, args: Tuple[Any, ...]
    ) -> Tuple[Tensor, Tensor]:
        r"""The norm of each position's embedding ``[batch, pos]`` and
        ``forward_func``'s outputs ``[batch, C]``."""
        assert self.embedding is not None  # built from modules
        with HookSet() as hooks:
            stores = capture_states(hooks, [self.embedding], False, False)
            logits = forward_logits(self.forward_func, inputs, args, "EmbeddingNorm")
        resolve_target(target, logits)  # validated only: class-agnostic
        (embedded,) = read_states(stores, len(logits), "EmbeddingNorm")
        return token_norms(embedded), logits

#!/usr/bin/env python3
r"""NormXLogit built from ``forward_func``, the modules whose states it reads
and the head."""

from typing import Any, Callable, List, Optional, Tuple

from torch import nn, Tensor

from captum_ext.attr._core.layer.logat import LogAt
from captum_ext.attr._utils.token_norms import token_norms

__all__ = ["NormXLogit"]


class NormXLogit(LogAt):
    r"""
    NormXLogit multiplies the L2 norm of each token's input representation
    :math:`x_i^0` (the output of ``embedding``) by the logit the model's own
    head-on-top gives that token's final hidden state :math:`x_i^L` (the
    output of ``layer``; :class:`LogAt`):

    .. math::
        \mathrm{NormXLogit}(x_i) = \lVert x_i^0 \rVert_2 \cdot
        \mathrm{LogAt}(x_i) = \lVert x_i^0 \rVert_2 \cdot
        \mathrm{HoT}(x_i^L)[c]

    where :math:`c` is the target class (by default the model's predicted
    class), taken before softmax. The authors' code reads :math:`x^0` after the
    embedding layer (for BERT: the LayerNorm of word + position + segment
    embeddings).

    Scores are signed and come from one forward pass (per chunk of
    ``internal_batch_size`` examples) without gradients in the model's dtype;
    the norm and the product are taken in float32 (float64 for a float64
    model), the dtype of the result.

    More details can be found in the original paper (Abbasi, Modarres and
    Pilehvar, "NormXLogit: The Head-on-Top Never Lies", EMNLP 2025):
    https://aclanthology.org/2025.emnlp-main.1769/ (arXiv:
    https://arxiv.org/abs/2411.16252) and the authors' code:
    https://github.com/sinaabbasi1/NormXLogit
    """

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: nn.Module,
        head: Optional[nn.Module],
        embedding: Optional[nn.Module],
    ) -> None:
        r"""
        Args:

            forward_func (Callable): ``forward_func(inputs,
                        *additional_forward_args) -> [batch, C]``, as in
                        :class:`LogAt`.
            layer (torch.nn.Module): The module whose output is the final
                        hidden states the ``head`` reads, as in
                        :class:`LogAt`.
            head (torch.nn.Module): The model's head on every position, as in
                        :class:`LogAt`.
            embedding (torch.nn.Module): The module whose output is
                        :math:`x^0` ``[batch, pos, d]``, whose norms multiply
                        the logits.
        """
        LogAt.__init__(self, forward_func, layer, head)
        if embedding is None:
            raise ValueError(
                "NormXLogit built from a layer module needs embedding=: the "
                "module whose output is the input representation x^0"
            )
        self.embedding: Optional[nn.Module] = embedding

    def _read_modules(self) -> List[nn.Module]:
        assert self.embedding is not None  # checked by the constructor
        return [*LogAt._read_modules(self), self.embedding]

    def _module_factor(self, states: Tuple[Tensor, ...]) -> Optional[Tensor]:
        return token_norms(states[1])  # [batch, pos]

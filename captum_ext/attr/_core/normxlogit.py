#!/usr/bin/env python3
r"""NormXLogit: input-embedding norm times the LogAt logit of every token."""

from typing import Any, Callable, Optional, Union

from captum._utils.typing import TargetType
from torch import nn, Tensor

from captum_ext._utils.token_batch import TokenBatch
from captum_ext.adapters import ModelAdapter
from captum_ext.attr._core.layer.normxlogit import NormXLogit as LayerNormXLogit
from captum_ext.attr._core.logat import LogAt
from captum_ext.attr._utils.result_dtype import result_dtype
from captum_ext.attr._utils.token_norms import token_norms

__all__ = ["NormXLogit"]

_NORMS = ("embedding_output", "word_embedding")


class NormXLogit(LogAt, LayerNormXLogit):
    r"""
    NormXLogit: the L2 norm of each token's input representation times the
    logit the model's own head-on-top gives its final hidden state (the
    equation and the paper are
    :class:`captum_ext.attr._core.layer.normxlogit.NormXLogit`'s, built from
    ``forward_func`` and modules). This class adds the shortcut from a Hugging
    Face model, where :math:`x_i^0` is ``hidden_states[0]`` (the authors'
    code) or, with ``norm="word_embedding"``, the raw row of the input
    word-embedding table (the paper's wording; for Llama the two coincide).
    For a regression model (``num_labels == 1``) :math:`\mathrm{LogAt}(x_i)
    = |\mathrm{HoT}(x_i^L) - \mathrm{HoT}(x_{cls}^L)|`, the distance to the
    model's output. The per-layer variant (``layer`` and ``decoder``, see
    :class:`LogAt`) keeps the norm of layer 0: :math:`\lVert x_i^0 \rVert_2
    \cdot \mathrm{decoder}(x_i^l)[t]`. Scores are exactly zero on padding.

    **Causal LMs** (docs/generation.rst): row :math:`t` of ``[batch, T, P]`` is
    :math:`\lVert x_i^0 \rVert_2 \cdot \mathrm{logits}_i[y_t]`, the causal
    :class:`LogAt` row times the same norms, all rows from one forward pass
    (``score_predicting_position`` as in :class:`LogAt`).
    """

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: Union[None, int, nn.Module] = None,
        decoder: Optional[nn.Module] = None,
        head: Optional[nn.Module] = None,
        embedding: Optional[nn.Module] = None,
        *,
        norm: str = "embedding_output",
        score_predicting_position: bool = False,
    ) -> None:
        r"""
        Args:

            forward_func (Callable): ``forward_func(inputs,
                        *additional_forward_args) -> [batch, C]`` with a
                        ``layer`` module, else a Hugging Face model, as in
                        :class:`LogAt`.
            layer (int or torch.nn.Module, optional): The module whose output
                        is the final hidden states the ``head`` reads, or the
                        shortcut's index into ``hidden_states`` (see
                        :class:`LogAt`).
                        Default: None (the shortcut, L: the paper's setting)
            decoder (torch.nn.Module, optional): The shortcut: hidden states
                        to vocabulary logits, replacing the classification
                        head (see :class:`LogAt`); then ``target`` is a
                        vocabulary id.
                        Default: None
            head (torch.nn.Module, optional): With a ``layer`` module: the
                        model's head on every position, as in :class:`LogAt`.
                        Default: None (required with a ``layer`` module)
            embedding (torch.nn.Module, optional): With a ``layer`` module:
                        the module whose output is :math:`x^0` ``[batch, pos,
                        d]``, whose norms multiply the logits.
                        Default: None (required with a ``layer`` module)
            norm (str, optional): The shortcut: ``"embedding_output"`` for
                        :math:`\lVert` ``hidden_states[0]`` :math:`_i\rVert_2`
                        (the authors' code) or ``"word_embedding"`` for
                        :math:`\lVert` ``word_embeddings(input_ids)`` :math:`_i
                        \rVert_2`.
                        Default: ``"embedding_output"``
            score_predicting_position (bool, optional): Causal LMs: False
                        leaves row ``t``'s predicting position out (zero), as
                        in :class:`LogAt`; True scores it.
                        Default: False
        """
        if norm not in _NORMS:
            raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
        self.norm = norm
        self.embedding = embedding
        LogAt.__init__(
            self,
            forward_func,
            layer,
            decoder,
            head,
            score_predicting_position=score_predicting_position,
        )
        if embedding is not None and self.layer_module is None:
            raise ValueError(
                "NormXLogit's embedding goes with a layer module (and "
                "forward_func); the shortcut picks the embeddings with norm="
            )

    def _image_modules(self, adapter: ModelAdapter) -> None:
        if self.embedding is not None or self.norm != "embedding_output":
            raise ValueError(
                "NormXLogit's embedding and norm belong to the route built from "
                "modules and to text models; a vision transformer's norms are "
                "those of its embedding output"
            )
        LogAt._image_modules(self, adapter)
        self.embedding = adapter.hidden_state_module(0)

    def _from_modules(
        self,
        forward_func: Callable[..., Any],
        layer: nn.Module,
        head: Optional[nn.Module],
    ) -> None:
        LayerNormXLogit.__init__(self, forward_func, layer, head, self.embedding)
        if self.norm != "embedding_output":
            raise ValueError(
                "NormXLogit's norm picks the shortcut's embeddings; built from "
                "modules, name the module whose output is normed as embedding="
            )

    def _scores(self, batch: TokenBatch, out: Any, target: TargetType) -> Tensor:
        logits = LogAt._scores(self, batch, out, target)  # [batch, pos]
        return self._input_norms(batch, out) * logits.to(result_dtype(logits.dtype))

    def _generated_factor(self, batch: TokenBatch, out: Any) -> Optional[Tensor]:
        return self._input_norms(batch, out)  # [batch, pos]

    def _input_norms(self, batch: TokenBatch, out: Any) -> Tensor:
        r"""L2 norm of each token's input representation, ``[batch, pos]``, in
        float32 or wider (a sum of d squares)."""
        if self.norm == "word_embedding":
            embedded: Tensor = self.adapter.word_embeddings()(batch.input_ids)
        else:
            embedded = out.hidden_states[0]  # [batch, pos, d_model]
        return token_norms(embedded)

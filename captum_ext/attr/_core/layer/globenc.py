#!/usr/bin/env python3
r"""GlobEnc built from ``forward_func``, the blocks of a post-LayerNorm encoder,
their attention modules and the parts the decomposition reads."""

from functools import partial
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
from captum._utils.typing import ModuleOrModuleList, TargetType
from captum.attr._utils.attribution import Attribution
from torch import nn, Tensor

from captum_ext._utils.block_parts import BlockParts
from captum_ext._utils.hooks import HookSet
from captum_ext._utils.log import log_usage
from captum_ext._utils.target import resolve_target
from captum_ext.attr._utils.attribute_with_modules import forward_logits
from captum_ext.attr._utils.encoder_decomposition import (
    capture_parts,
    encoder_layers,
    encoder_work_factors,
    VARIANTS,
)
from captum_ext.attr._utils.layer_states import (
    as_modules,
    AttentionReader,
    capture_states,
    read_states,
    row_index,
)
from captum_ext.attr._utils.layer_token_attribution import LayerTokenAttribution
from captum_ext.attr._utils.norm_rollout import (
    check_variant,
    masked_blocks,
    rolled_out_rows,
)
from captum_ext.attr._utils.rollout import RowBlocks

__all__ = ["GlobEnc"]


class GlobEnc(LayerTokenAttribution):
    r"""
    GlobEnc attributes a prediction to the input tokens by decomposing every
    post-LayerNorm encoder block into one vector per source token, taking the
    vectors' norms as a token-to-token matrix per layer, and rolling the
    matrices out across layers.

    For block :math:`l` with input :math:`x` (the input of ``layer[l]``),
    attention probabilities :math:`A_h` (the output of ``attention[l]``),
    value vectors :math:`v_{h,j} = x_j W_{V,h} + b_{V,h}` (the output of
    ``parts[l].value``) and output projection :math:`W_{O,h}`
    (``parts[l].attention_output``), let :math:`f_h(x_j) = v_{h,j} W_{O,h}`
    (:math:`b_O` is left out). Source token :math:`j`'s share of receiving
    token :math:`i` is

    .. math::
        z_{ij} = \sum_h A_h[i,j] f_h(x_j) + 1[i=j]\, x_i

        y_{ij} = \gamma_1 \odot \frac{z_{ij} - m(z_{ij})}
                 {\sqrt{\mathrm{Var}(p^{(1)}_i) + \epsilon_1}}  \quad \text{(LN1)}

        e_{ij} = \gamma_2 \odot \frac{y_{ij} - m(y_{ij})}
                 {\sqrt{\mathrm{Var}(p^{(2)}_i) + \epsilon_2}}  \quad \text{(LN2)}

    where :math:`m` is the mean over the hidden dimension, :math:`\mathrm{Var}`
    the population variance, and :math:`p^{(1)}`, :math:`p^{(2)}` the *real*
    inputs of the two LayerNorms (:math:`p^{(2)} = \mathrm{FFN}(out_1) +
    out_1`: the feed-forward network is not decomposed but enters through the
    variance). :math:`\beta_1`, :math:`\beta_2` and :math:`b_O` are dropped.
    The per-layer matrix is :math:`N^l[i, j] = \lVert e_{ij} \rVert` (variant
    ``"N_enc"``). The layers are rolled out without normalisation or identity
    (as the reference code does):

    .. math::
        G^1 = N^1, \qquad G^l = N^l G^{l-1}

    and the attribution is the row of :math:`G^L` at ``position``, the
    position the model classifies from.

    Variants (``variant=``): ``"N"`` uses :math:`\lVert \sum_h A_h[i,j]
    f_h(x_j) \rVert` (attention only); ``"N_res"`` uses :math:`\lVert z_{ij}
    \rVert` (plus residual); ``"N_resln"`` uses :math:`\lVert y_{ij} \rVert`
    (plus LN1, Kobayashi et al. 2021); ``"N_enc"`` uses :math:`\lVert e_{ij}
    \rVert` (the whole encoder block: GlobEnc, the default).

    GlobEnc is class-agnostic: ``target`` is validated but does not change the
    result. Scores are non-negative and come from one forward pass (per chunk
    of ``internal_batch_size`` examples) without gradients. The :math:`n^2`
    decomposed vectors are never formed: their norms come from the per-source
    Gram matrices of the heads, a block of receiving rows at a time, and the
    rollout carries only the row it reads down from the last layer. The
    decomposition runs in float32, one layer at a time, and the scores are
    float32 (float64 for a float64 model).

    More details can be found in the original paper (Modarressi et al., NAACL
    2022): https://aclanthology.org/2022.naacl-main.19/
    """

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: ModuleOrModuleList,
        attention: Optional[ModuleOrModuleList],
        parts: Optional[Sequence[BlockParts]],
        position: Optional[int] = None,
    ) -> None:
        r"""
        Args:

            forward_func (Callable): ``forward_func(inputs,
                        *additional_forward_args) -> [batch, C]`` of a
                        post-LayerNorm encoder (its outputs validate
                        ``target``).
            layer (torch.nn.Module or list of torch.nn.Module): The L blocks,
                        whose inputs :math:`x` ``[batch, pos, d]`` are
                        decomposed.
            attention (torch.nn.Module or list of torch.nn.Module): Each
                        block's module whose output is its attention
                        probabilities ``[batch, heads, pos, pos]`` (or
                        ``(output, probabilities)``).
            parts (sequence of BlockParts): Each block's
                        :class:`~captum_ext._utils.block_parts.BlockParts`
                        (value projection, output projection, LN1, LN2).
            position (int, optional): The position the model classifies from,
                        whose row is read.
                        Default: None (0)
        """
        Attribution.__init__(self, forward_func)
        self.position = 0 if position is None else position
        self.layer: Optional[List[nn.Module]] = as_modules(layer, "layer", "GlobEnc")
        self.attention = as_modules(
            _required(attention, "attention"), "attention", "GlobEnc"
        )
        self.parts = list(_required(parts, "parts"))
        _check_one_per_block(len(self.layer), len(self.attention), len(self.parts))

    @log_usage()
    def attribute(
        self,
        inputs: Tensor,
        target: TargetType = None,
        additional_forward_args: Any = None,
        *,
        variant: str = "N_enc",
        rollout: bool = True,
        internal_batch_size: Optional[int] = None,
    ) -> Tensor:
        r"""
        Args:

            inputs (Tensor): ``forward_func``'s first argument ``[batch,
                        ...]`` (token ids, embeddings).
            target (int, list, or Tensor, optional): Validated against
                        ``forward_func``'s outputs (an out-of-range index
                        raises); the result is the same for every target.
                        Default: None
            additional_forward_args (Any, optional): ``forward_func``'s
                        arguments after ``inputs``; tensors with one row per
                        example are chunked with them.
                        Default: None
            variant (str, optional): ``"N_enc"`` (GlobEnc), ``"N_resln"``,
                        ``"N_res"`` or ``"N"``; see the class docstring.
                        Default: "N_enc"
            rollout (bool, optional): If True, the row of the rolled-out
                        :math:`G^L`; if False, the row of the last layer's
                        :math:`N^L` alone.
                        Default: True
            internal_batch_size (int, optional): Run the batch in chunks of
                        at most this many examples, one forward pass and one
                        decomposition per chunk; the scores are those of the
                        whole batch.
                        Default: None (the whole batch at once)

        Returns:
            *Tensor* of **attributions**:
            - **attributions** (*Tensor*): ``[batch, pos]`` non-negative
                        scores, the row of ``position``, in float32 (float64
                        for a float64 model).

        Examples::

            >>> parts = [
            ...     BlockParts(b.attention.value, b.attention.out, b.ln1, b.ln2)
            ...     for b in model.blocks
            ... ]
            >>> probabilities = [b.attention.probabilities for b in model.blocks]
            >>> globenc = GlobEnc(model, list(model.blocks), probabilities, parts)
            >>> attr = globenc.attribute(input_ids)
        """
        check_variant(variant, VARIANTS)
        return self._attribute_modules(
            inputs,
            target,
            additional_forward_args,
            internal_batch_size,
            {"variant": variant, "rollout": rollout},
        )

    def _module_scores(
        self,
        inputs: Tensor,
        target: TargetType,
        args: Tuple[Any, ...],
        variant: str = "N_enc",
        rollout: bool = True,
    ) -> Tuple[Tensor, Tensor]:
        r"""Row ``position`` of :math:`G^L` (:math:`N^L` without ``rollout``),
        ``[batch, pos]``, and ``forward_func``'s outputs ``[batch, C]``."""
        assert self.layer is not None  # set by the constructor
        with HookSet() as hooks:
            inputs_of = capture_states(hooks, self.layer, True, False)
            attention = AttentionReader(hooks, self.attention)
            captures = capture_parts(hooks, self.parts)
            logits = forward_logits(self.forward_func, inputs, args, "GlobEnc")
        resolve_target(target, logits)  # validated only: GlobEnc is class-agnostic
        hidden = read_states(inputs_of, len(logits), "GlobEnc")
        positions = hidden[0].shape[1]
        maps = attention.maps("GlobEnc", positions)
        valid = torch.ones(hidden[0].shape[:2], dtype=torch.bool, device=logits.device)
        layers: List[RowBlocks] = [
            partial(
                masked_blocks,
                partial(encoder_work_factors, layer, parts, variant),
                valid,
            )
            for layer, parts in zip(encoder_layers(hidden, maps, captures), self.parts)
        ]
        row = torch.full(
            (len(logits), 1), row_index(self.position, positions, "GlobEnc")
        )
        return rolled_out_rows(layers, row, rollout)[:, 0], logits


def _required(value: Any, name: str) -> Any:
    if value is None:
        raise ValueError(
            f"GlobEnc built from layer modules needs {name}=: "
            + (
                "each block's attention probabilities module"
                if name == "attention"
                else "each block's BlockParts (value, attention_output, "
                "layernorm1, layernorm2)"
            )
        )
    return value


def _check_one_per_block(blocks: int, attention: int, parts: int) -> None:
    if not blocks == attention == parts:
        raise ValueError(
            f"GlobEnc needs one attention module and one BlockParts per block: "
            f"got {blocks} blocks, {attention} attention modules, {parts} parts"
        )

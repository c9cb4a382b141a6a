#!/usr/bin/env python3
r"""GlobEnc: global token attribution from norms of the decomposed encoder blocks."""

from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any, Callable, List, Optional, Tuple, Union

import torch
from captum._utils.typing import TargetType
from captum.attr._utils.attribution import Attribution
from captum.log import log_usage
from torch import nn, Tensor

from captum_ext._utils.common import (
    parse_token_batch,
    resolve_target,
    run_model,
    TokenBatch,
)
from captum_ext._utils.hooks import HookSet
from captum_ext.adapters import BlockParts, get_adapter, ModelAdapter
from captum_ext.attr._utils.attribute_in_chunks import attribute_in_chunks, result_dtype
from captum_ext.attr._utils.rollout import rollout_products, rollout_row

__all__ = ["GlobEnc", "VARIANTS"]

# Decomposition depth, in order: attention only, + residual, + LN1, + LN2.
VARIANTS = ("N", "N_res", "N_resln", "N_enc")


@dataclass
class _LayerInputs:
    r"""What one block's forward pass exposes to the decomposition."""

    hidden: Tensor  # [batch, pos, d]  block input x = hidden_states[l - 1]
    attention: Tensor  # [batch, heads, pos, pos]
    value: Tensor  # [batch, pos, d]  value projection output, bias b_V included
    pre_ln1: Tensor  # [batch, pos, d]  real LN1 input: dense(context) + b_O + x
    pre_ln2: Tensor  # [batch, pos, d]  real LN2 input: FFN(out1) + out1


@dataclass
class _Factors:
    r"""One layer's decomposition in factored form.

    Source ``j`` contributes to receiving token ``i`` the vector
    ``scale[i] * (sum_h attention[h, i, j] * source[h, j] + 1[i = j] residual[i])``
    with ``source[h, j] = w_out[h]^T value[j, h]``. A LayerNorm acts on every such
    vector as a fixed linear map (centring, then ``gamma``) times a per-receiver
    factor ``1 / sqrt(Var(pre_ln_i) + eps)``, so it is folded into ``w_out``,
    ``residual`` and ``scale`` instead of being applied to the ``n^2`` vectors.
    """

    attention: Tensor  # [batch, heads, pos, pos]
    value: Tensor  # [batch, pos, heads, head_dim]
    w_out: Tensor  # [heads, head_dim, d]
    residual: Optional[Tensor]  # [batch, pos, d]; None for variant "N"
    scale: Tensor  # [batch, pos]

    def _heads(self) -> Tuple[Tensor, Tensor]:
        r"""Mixing weights ``[batch, j, i, k]`` and sources ``[batch, j, k, d]``
        of ``vector_ij = scale[i] * sum_k weights[j, i, k] * sources[j, k]``. The
        residual, if any, is one more head ``k`` attending only to itself."""
        weights = self.attention.permute(0, 3, 2, 1)  # [batch, j, i, heads]
        sources = torch.einsum("bjhv,hvd->bjhd", self.value, self.w_out)  # f_h(x_j)
        if self.residual is None:
            return weights, sources
        batch, pos = self.scale.shape
        own = torch.eye(pos, dtype=weights.dtype, device=weights.device)
        weights = torch.cat([weights, own.expand(batch, pos, pos)[..., None]], -1)
        return weights, torch.cat([sources, self.residual[:, :, None]], dim=2)

    def vectors(self) -> Tensor:
        r"""Every decomposed vector, ``[batch, pos (i), pos (j), d]``. Memory is
        O(n^2 d): for inspection; :meth:`norms` never forms it."""
        weights, sources = self._heads()
        mixed = torch.einsum("bjik,bjkd->bijd", weights, sources)
        return self.scale[:, :, None, None] * mixed

    def norms(self) -> Tensor:
        r"""``||vector_ij||`` ``[batch, pos, pos]`` from per-source Gram matrices:
        ``||sum_k w_k s_k||^2 = sum_kl w_k w_l <s_k, s_l>``, O(n^2 heads^2) work
        and O(n^2 heads) memory instead of O(n^2 d)."""
        weights, sources = self._heads()
        gram = sources @ sources.transpose(-1, -2)  # [batch, j, heads, heads]
        squared = ((weights @ gram) * weights).sum(-1).transpose(1, 2)  # [b, i, j]
        return self.scale[:, :, None] * squared.clamp(min=0).sqrt()


def _single_call(store: List[Tensor], name: str, layer: int) -> Tensor:
    if len(store) != 1:
        raise RuntimeError(
            f"GlobEnc expected one call of block {layer}'s {name} per forward pass, "
            f"saw {len(store)}; the model reuses or skips the module"
        )
    return store[0]


def _capture(
    adapter: ModelAdapter, batch: TokenBatch
) -> Tuple[Tensor, List[_LayerInputs]]:
    r"""One forward pass; returns the logits and every block's inputs."""
    blocks = range(1, adapter.num_layers + 1)
    parts = [adapter.block_parts(layer) for layer in blocks]
    with HookSet() as hooks:
        values = [hooks.capture_output(p.value) for p in parts]
        pre_ln1 = [hooks.capture_input(p.layernorm1) for p in parts]
        pre_ln2 = [hooks.capture_input(p.layernorm2) for p in parts]
        output = run_model(adapter, batch, hidden_states=True, attentions=True)
    # In the model's dtype: each layer goes to float32 only when it is decomposed.
    layers = [
        _LayerInputs(
            output.hidden_states[k],
            output.attentions[k],
            _single_call(values[k], "value projection", layer),
            _single_call(pre_ln1[k], "first LayerNorm", layer),
            _single_call(pre_ln2[k], "second LayerNorm", layer),
        )
        for k, layer in enumerate(blocks)
    ]
    return output.logits, layers


def _in_work_dtype(layer: _LayerInputs) -> _LayerInputs:
    r"""One layer's inputs in float32 (or wider), where its decomposition runs:
    norms of half-precision sums lose too many digits."""
    dtype = result_dtype(layer.hidden.dtype)
    return _LayerInputs(
        *(getattr(layer, field.name).to(dtype) for field in fields(_LayerInputs))
    )


def _centred(vectors: Tensor) -> Tensor:
    return vectors - vectors.mean(-1, keepdim=True)


def _through_layernorm(
    factors: _Factors, pre_ln: Tensor, norm: nn.LayerNorm
) -> _Factors:
    r"""LN(v) without beta for every decomposed vector v of a sum whose real
    LayerNorm input is ``pre_ln``: ``gamma * (v - mean(v)) / sqrt(Var(pre_ln) + eps)``.
    """
    gamma = norm.weight.to(pre_ln.dtype)  # [d]
    std = (pre_ln.var(-1, unbiased=False) + norm.eps).sqrt()  # [batch, pos]
    residual = factors.residual
    return replace(
        factors,
        w_out=gamma * _centred(factors.w_out),
        residual=None if residual is None else gamma * _centred(residual),
        scale=factors.scale / std,
    )


def _factors(layer: _LayerInputs, parts: BlockParts, variant: str) -> _Factors:
    r"""The decomposition of one block for ``variant`` (one of :data:`VARIANTS`)."""
    batch, pos, d = layer.value.shape
    heads = layer.attention.shape[1]
    value = layer.value.view(batch, pos, heads, d // heads)
    weight = parts.attention_output.weight.to(value.dtype)  # [d, d], b_O left out
    w_out = weight.view(d, heads, d // heads).permute(1, 2, 0)  # [heads, dh, d]
    factors = _Factors(layer.attention, value, w_out, None, value.new_ones(batch, pos))
    depth = VARIANTS.index(variant)
    if depth >= 1:
        factors = replace(factors, residual=layer.hidden)
    if depth >= 2:
        factors = _through_layernorm(factors, layer.pre_ln1, parts.layernorm1)
    if depth >= 3:
        factors = _through_layernorm(factors, layer.pre_ln2, parts.layernorm2)
    return factors


def _masked(matrix: Tensor, valid: Tensor) -> Tensor:
    r"""Zeroes pad rows and pad columns of ``[batch, pos, pos]``."""
    mask = valid.to(matrix.dtype)
    return matrix * mask[:, :, None] * mask[:, None, :]


class GlobEnc(Attribution):
    r"""
    GlobEnc (Modarressi et al., NAACL 2022) attributes a prediction to the input
    tokens by decomposing every post-LayerNorm encoder block into one vector per
    source token, taking the vectors' norms as a token-to-token matrix per layer,
    and rolling the matrices out across layers.

    For block ``l`` with input ``x`` (``hidden_states[l - 1]``), attention
    probabilities ``A_h``, value vectors ``v_h,j = x_j W_V,h + b_V,h`` and output
    projection ``W_O,h``, let ``f_h(x_j) = v_h,j W_O,h`` (``b_O`` is left out).
    Source token ``j``'s share of receiving token ``i`` is

    .. math::
        z_{ij} = \sum_h A_h[i,j] f_h(x_j) + 1[i=j]\, x_i

        y_{ij} = \gamma_1 \odot \frac{z_{ij} - m(z_{ij})}
                 {\sqrt{\mathrm{Var}(p^{(1)}_i) + \epsilon_1}}  \quad \text{(LN1)}

        e_{ij} = \gamma_2 \odot \frac{y_{ij} - m(y_{ij})}
                 {\sqrt{\mathrm{Var}(p^{(2)}_i) + \epsilon_2}}  \quad \text{(LN2)}

    where ``m`` is the mean over the hidden dimension, ``Var`` the population
    variance, and ``p^(1)``, ``p^(2)`` the *real* inputs of the two LayerNorms
    (``p^(2) = FFN(out1) + out1``: the feed-forward network is not decomposed but
    enters through the variance). ``beta_1``, ``beta_2`` and ``b_O`` are dropped.
    The per-layer matrix is ``N^l[i, j] = ||e_ij||`` (variant ``"N_enc"``), zeroed
    on pad rows and columns. The layers are rolled out without normalisation or
    identity (as the reference code does):

    .. math::
        G^1 = N^1, \qquad G^l = N^l G^{l-1}

    and the attribution is the row of ``G^L`` at the position the model
    classifies from ([CLS] / <s> for these encoders).

    Variants (``variant=``): ``"N"`` uses ``||sum_h A_h[i,j] f_h(x_j)||`` (attention
    only); ``"N_res"`` uses ``||z_ij||`` (plus residual); ``"N_resln"`` uses
    ``||y_ij||`` (plus LN1, Kobayashi et al. 2021); ``"N_enc"`` uses ``||e_ij||``
    (the whole encoder block: GlobEnc, the default).

    GlobEnc is class-agnostic: the attribution does not depend on ``target``.

    Supported families: BERT, RoBERTa (and XLM-R, CamemBERT), ELECTRA, DistilBERT,
    loaded with ``attn_implementation="eager"`` (the method reads the attention
    probabilities). The ``n^2`` decomposed vectors are never formed: their norms
    come from the per-source Gram matrices of the heads, so the memory on top of
    the forward pass is O(batch * heads * n^2), like one layer's attention.
    The forward pass runs in the model's dtype; the decomposition runs in
    float32, one layer at a time, and the scores are float32 (float64 for a
    float64 model). ``internal_batch_size`` bounds the batch of each forward
    pass and decomposition.

    More details can be found in the original paper:
    https://aclanthology.org/2022.naacl-main.19/
    """

    def __init__(self, model: nn.Module) -> None:
        r"""
        Args:

            model (torch.nn.Module): A Hugging Face post-LayerNorm encoder
                        (``*ForSequenceClassification`` of the BERT, RoBERTa,
                        ELECTRA or DistilBERT family). Other families raise
                        :class:`~captum_ext.UnsupportedModelError`.
        """
        adapter = get_adapter(model)
        adapter.block_parts(1)  # raises UnsupportedModelError for other families
        Attribution.__init__(self, model)
        self.model = model
        self.adapter = adapter

    @log_usage()
    def attribute(
        self,
        inputs: Union[Tensor, Tuple[Tensor]],
        target: TargetType = None,
        additional_forward_args: Any = None,
        variant: str = "N_enc",
        rollout: bool = True,
        internal_batch_size: Optional[int] = None,
    ) -> Tensor:
        r"""
        Args:

            inputs (Tensor): Token ids ``[batch, pos]``.
            target (int, list, or Tensor, optional): Accepted for compatibility with
                        Captum's API and validated (an out-of-range class raises),
                        but GlobEnc is class-agnostic: the result is the same for
                        every target. ``None`` means each example's predicted
                        class (scores taken before softmax).
                        Default: None
            additional_forward_args (Tensor or tuple, optional): The masks, as
                        in :meth:`LogAt.attribute`. Pad on the right: a padded
                        classification position raises.
                        Default: None (no padding)
            variant (str, optional): ``"N_enc"`` (GlobEnc), ``"N_resln"``,
                        ``"N_res"`` or ``"N"``; see the class docstring.
                        Default: "N_enc"
            rollout (bool, optional): If True, the row of the rolled-out ``G^L``;
                        if False, the row of the last layer's ``N^L`` alone.
                        Default: True
            internal_batch_size (int, optional): Run the batch in chunks of at
                        most this many examples (one forward pass and one
                        decomposition per chunk); the result is that of the
                        whole batch.
                        Default: None (the whole batch at once)

        Returns:
            *Tensor* of **attributions**:
            - **attributions** (*Tensor*):
                        ``[batch, pos]`` non-negative scores in the input's
                        shape, the classification position's row; zero on
                        padding.

        Examples::

            >>> model = AutoModelForSequenceClassification.from_pretrained(
            ...     name, attn_implementation="eager")
            >>> enc = tokenizer(texts, padding=True, return_tensors="pt")
            >>> globenc = GlobEnc(model)
            >>> attr = globenc.attribute(
            ...     enc["input_ids"],
            ...     additional_forward_args=(enc["attention_mask"],))
        """
        batch = self._parse(inputs, additional_forward_args, variant)
        row = partial(self._row, variant=variant, rollout=rollout)
        return self._in_chunks(batch, target, internal_batch_size, row)

    @log_usage()
    def attribute_matrices(
        self,
        inputs: Union[Tensor, Tuple[Tensor]],
        *,
        additional_forward_args: Any = None,
        variant: str = "N_enc",
        rollout: bool = True,
        internal_batch_size: Optional[int] = None,
    ) -> Tensor:
        r"""
        The full token-to-token matrices of every layer.

        Args:

            inputs (Tensor): Token ids ``[batch, pos]``.
            additional_forward_args (Tensor or tuple, optional): As in
                        :meth:`attribute`.
                        Default: None
            variant (str, optional): As in :meth:`attribute`.
                        Default: "N_enc"
            rollout (bool, optional): If True, the rolled-out ``G^1 .. G^L``; if
                        False, the per-layer ``N^1 .. N^L``.
                        Default: True
            internal_batch_size (int, optional): As in :meth:`attribute`.
                        Default: None (the whole batch at once)

        Returns:
            *Tensor* ``[batch, layers, pos, pos]``: entry ``[b, l - 1, i, j]``
            is how much source token ``j`` contributes to token ``i`` after block
            ``l``; zero on pad rows and pad columns.
        """
        batch = self._parse(inputs, additional_forward_args, variant)
        matrices = partial(self._layer_matrices, variant=variant, rollout=rollout)
        return self._in_chunks(batch, None, internal_batch_size, matrices)

    def _parse(
        self, inputs: Any, additional_forward_args: Any, variant: str
    ) -> TokenBatch:
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        self.adapter.require_attention_weights("GlobEnc")
        return parse_token_batch(self.adapter, inputs, additional_forward_args)

    def _in_chunks(
        self,
        batch: TokenBatch,
        target: TargetType,
        internal_batch_size: Optional[int],
        chunk_fn: Callable[..., Tuple[Tensor, Tensor]],
    ) -> Tensor:
        with torch.no_grad():
            return attribute_in_chunks(
                self.model, batch, target, internal_batch_size, chunk_fn, "GlobEnc"
            )

    def _row(
        self, batch: TokenBatch, target: TargetType, variant: str, rollout: bool
    ) -> Tuple[Tensor, Tensor]:
        r"""The classification position's row ``[batch, pos]`` and the logits."""
        matrices, logits = self._matrices(batch, target, variant)
        position = self.adapter.tokens.classification_position(
            batch.input_ids, batch.attention_mask
        )
        if not rollout:
            matrices = matrices[:, -1:]
        return rollout_row(matrices.unbind(1), position), logits

    def _layer_matrices(
        self, batch: TokenBatch, target: TargetType, variant: str, rollout: bool
    ) -> Tuple[Tensor, Tensor]:
        r"""``G^1 .. G^L`` (or ``N^1 .. N^L``) ``[batch, layers, pos, pos]`` and
        the logits."""
        matrices, logits = self._matrices(batch, target, variant)
        return (
            torch.stack(rollout_products(matrices.unbind(1)), dim=1)
            if rollout
            else matrices
        ), logits

    def _matrices(
        self, batch: TokenBatch, target: TargetType, variant: str
    ) -> Tuple[Tensor, Tensor]:
        r"""Per-layer ``N^l`` ``[batch, layers, pos, pos]`` (float32) and the
        logits ``[batch, C]``."""
        adapter = self.adapter
        logits, layers = _capture(adapter, batch)
        resolve_target(target, logits)  # validated only: GlobEnc is class-agnostic
        norms = [
            _masked(
                _factors(
                    _in_work_dtype(layer), adapter.block_parts(k + 1), variant
                ).norms(),
                batch.valid,
            )
            for k, layer in enumerate(layers)
        ]
        return torch.stack(norms, dim=1), logits

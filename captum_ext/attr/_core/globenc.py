#!/usr/bin/env python3
r"""GlobEnc: global token attribution from norms of the decomposed transformer
blocks (post-LN encoders; pre-LN decoders explaining generated tokens)."""

from functools import partial
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import torch
from captum._utils.typing import ModuleOrModuleList, TargetType
from captum.attr._utils.attribution import Attribution
from torch import Tensor

from captum_ext._utils.log import log_usage
from captum_ext._utils.model_forward import resolve_target
from captum_ext._utils.teacher_forcing import TeacherForcedBatch
from captum_ext._utils.token_batch import parse_token_batch, TokenBatch
from captum_ext.adapters import BlockParts, NormParams, PreNormParts
from captum_ext.attr._core.layer.globenc import GlobEnc as LayerGlobEnc
from captum_ext.attr._utils.attribute_in_chunks import attribute_in_chunks
from captum_ext.attr._utils.decoder_decomposition import (
    capture_decoder,
    decoder_factors,
    DECODER_VARIANTS,
    DecoderLayer,
    next_norms,
)
from captum_ext.attr._utils.encoder_capture import capture_encoder
from captum_ext.attr._utils.encoder_decomposition import encoder_work_factors, VARIANTS
from captum_ext.attr._utils.norm_decomposition import Factors
from captum_ext.attr._utils.norm_rollout import (
    check_variant,
    masked_blocks,
    rolled_out_rows,
)
from captum_ext.attr._utils.result_dtype import result_dtype
from captum_ext.attr._utils.rollout import rollout_products, RowBlocks
from captum_ext.attr._utils.token_attribution import TokenAttribution

__all__ = ["GlobEnc", "VARIANTS"]


class GlobEnc(TokenAttribution, LayerGlobEnc):
    r"""
    GlobEnc (Modarressi et al., NAACL 2022) attributes a prediction to the input
    tokens from the norms of every block decomposed into one vector per source
    token, rolled out across layers. The post-LayerNorm encoder's
    decomposition, its variants and the rollout are
    :class:`captum_ext.attr._core.layer.globenc.GlobEnc`'s (built from
    ``forward_func`` and modules); this class adds the shortcut from a Hugging
    Face model (the modules found by its adapter, the row read at the position
    the model classifies from, zero on pad rows and columns,
    :meth:`attribute_matrices`) and causal language models.

    **Causal language models** (``*ForCausalLM`` of GPT-2 and the Llama family:
    Llama, Mistral, Qwen2, Qwen3, Gemma) explain a given continuation ``y_1 ..
    y_T`` under teacher forcing (:mod:`captum_ext._utils.teacher_forcing`). Their
    pre-LN block ``h' = h + Attn(norm_1(h))``, ``h'' = h' + MLP(norm_2(h'))`` is
    decomposed as (derivation and choices: ``docs/generation_globenc.rst``)

    .. math::
        z_{ij} = \sum_h A_h[i,j]\, W_{O,h} v_{h,j} + 1[i=j]\, h_i, \qquad
        v_j = W_V\, \mathrm{norm}_1(h_j) + b_V

        e_{ij} = \gamma \odot \frac{c(z_{ij})}{\sqrt{s(h''_i) + \epsilon}}

    where ``norm_1(h_j)`` belongs wholly to source ``j`` (it reads token ``j``
    alone), the MLP's output and ``b_O`` stay undistributed as GlobEnc leaves the
    encoder's FFN and ``b_O`` out (they enter through the statistics only), and
    ``e`` applies the norm that reads the block's output ``h''`` next (the next
    block's ``norm_1``; the final norm after the last block) as a linear map with
    position ``i``'s real statistics: ``c`` centres and ``s`` is the variance for
    a LayerNorm (GPT-2); ``c`` is the identity and ``s`` the mean square for an
    RMSNorm (Llama). Its bias is dropped. Variants: ``"N"`` (attention only),
    ``"N_res"`` (``||z_ij||``), ``"N_enc"`` (``||e_ij||``, the default);
    ``"N_resln"`` has no counterpart (no norm acts on the residual stream
    between the two sublayers) and raises. The matrices are lower triangular
    and rolled out as above; row ``t`` of the result is the row of ``G^L`` at the
    predicting position of ``y_t``, ``[batch, T, P]`` (``[batch, T, P + T]`` with
    ``attribute_generated``), zero outside the teacher-forcing score mask. The
    target only selects the positions and ``contrast_target`` has no effect:
    the attribution is class-agnostic. A family whose blocks are not sequential
    pre-LN blocks (parallel attention and MLP, missing parts) raises
    :class:`~captum_ext.UnsupportedModelError`.

    Row :math:`t`'s own term, the predicting position :math:`p_t`, carries its
    own residual stream through every layer (for the first target the last
    prompt token, a recall prompt's queried key, which it would put first), so
    by default that column is left out (zero, as outside the score mask;
    ``score_predicting_position=True`` keeps it; the choice is measured in
    docs/generation.rst); the consistency law holds either way.

    Supported families: BERT, RoBERTa (and XLM-R, CamemBERT), ELECTRA, DistilBERT
    classifiers; GPT-2, Llama, Mistral (sliding windows included), Qwen2, Qwen3
    and Gemma causal LMs; with any attention implementation of transformers'
    attention interface (``"sdpa"``, the default of ``from_pretrained``, flash
    kernels) or ``"eager"``. With eager attention the model's own maps are
    used; otherwise the probabilities are recomputed from the query and key the
    model computes, a block of receiving rows at a time
    (:class:`~captum_ext.adapters.AttentionCapture`; a family whose attention
    does not go through the interface raises
    :class:`~captum_ext.UnsupportedModelError`). The ``n^2`` decomposed vectors
    are never formed: their norms come from the per-source Gram matrices of the
    heads, one block of rows of ``N^l`` at a time, and the rollout carries only
    the rows it reads (the classification position; the ``T`` predicting
    positions) down from the last layer, so on a non-eager model the memory on
    top of the forward pass is linear in ``n`` (the blocks are bounded by
    :data:`~captum_ext._utils.attention_inputs.BLOCK_ELEMENTS` on the CPU,
    :data:`~captum_ext._utils.attention_inputs.ACCELERATOR_BLOCK_ELEMENTS` on an
    accelerator). The forward pass runs
    in the model's dtype; the decomposition runs in float32, one layer at a
    time, and the scores are float32 (float64 for a float64 model).
    ``internal_batch_size`` bounds the batch of each forward pass and
    decomposition.

    More details can be found in the original paper:
    https://aclanthology.org/2022.naacl-main.19/
    """

    explains_generation = True
    reads_attention = True

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: Optional[ModuleOrModuleList] = None,
        attention: Optional[ModuleOrModuleList] = None,
        parts: Optional[Sequence[BlockParts]] = None,
        position: Optional[int] = None,
        *,
        score_predicting_position: bool = False,
    ) -> None:
        r"""
        Args:

            forward_func (Callable): With ``layer``, ``forward_func(inputs,
                        *additional_forward_args) -> [batch, C]`` of a
                        post-LayerNorm encoder (its outputs validate
                        ``target``). Else a Hugging Face post-LayerNorm
                        encoder (``*ForSequenceClassification`` of the BERT,
                        RoBERTa, ELECTRA or DistilBERT family) or a
                        pre-LayerNorm causal LM (``*ForCausalLM`` of GPT-2,
                        Llama, Mistral, Qwen2, Qwen3, Gemma), with any
                        attention implementation (the shortcut); other
                        families raise :class:`~captum_ext.UnsupportedModelError`.
            layer (torch.nn.Module or list of torch.nn.Module, optional): The
                        L blocks, whose inputs ``x`` ``[batch, pos, d]`` are
                        decomposed.
                        Default: None (the shortcut)
            attention (nn.Module or list of nn.Module, optional): With
                        ``layer``: each block's module whose output is its
                        attention probabilities ``[batch, heads, pos,
                        pos]`` (or ``(output, probabilities)``).
                        Default: None (required with ``layer``)
            parts (sequence of BlockParts, optional): With ``layer``: each
                        block's :class:`~captum_ext.adapters.BlockParts`
                        (value projection, output projection, LN1, LN2).
                        Default: None (required with ``layer``)
            position (int, optional): With ``layer``: the position the model
                        classifies from, whose row is read.
                        Default: None (0)
            score_predicting_position (bool, optional): Causal LMs: False
                        leaves row ``t``'s predicting position out (zero);
                        True scores it.
                        Default: False (chosen by measurement,
                        docs/generation.rst)
        """
        self.score_predicting_position = score_predicting_position
        if layer is not None:
            LayerGlobEnc.__init__(self, forward_func, layer, attention, parts, position)
            self.built_from_modules = True
            return
        if (attention, parts, position) != (None, None, None):
            raise ValueError(
                "GlobEnc's attention, parts and position go with layer modules "
                "(and forward_func); the shortcut finds a Hugging Face model's"
            )
        Attribution.__init__(self, forward_func)
        self.layer = None
        adapter = self._use_shortcut(forward_func)
        # Raise UnsupportedModelError for families without the parts.
        if adapter.is_causal_lm:
            adapter.pre_norm_parts(1)
            adapter.final_norm()
        else:
            adapter.block_parts(1)

    @log_usage()
    def attribute(
        self,
        inputs: Union[Tensor, Tuple[Tensor]],
        target: TargetType = None,
        additional_forward_args: Any = None,
        *,
        variant: str = "N_enc",
        rollout: bool = True,
        attribute_generated: bool = False,
        contrast_target: Optional[Tensor] = None,
        internal_batch_size: Optional[int] = None,
    ) -> Tensor:
        r"""
        Args:

            inputs (Tensor): Token ids ``[batch, pos]``; for a causal LM the
                        prompts ``[batch, P]``, padded on the left.
            target (int, list, or Tensor, optional): Accepted for compatibility with
                        Captum's API and validated (an out-of-range class raises),
                        but GlobEnc is class-agnostic: the result is the same for
                        every target. ``None`` means each example's predicted
                        class (scores taken before softmax). For a causal LM: the
                        continuation's ids ``[batch, T]``, right-padded with -100
                        (required); they select the rows (the predicting
                        positions), not the scores.
                        Default: None
            additional_forward_args (Tensor or tuple, optional): The masks, as
                        in :meth:`LogAt.attribute`. Pad on the right: a padded
                        classification position raises (causal LMs: prompts
                        padded on the left).
                        Default: None (no padding)
            variant (str, optional): ``"N_enc"`` (GlobEnc), ``"N_resln"``
                        (encoders only), ``"N_res"`` or ``"N"``; see the class
                        docstring.
                        Default: "N_enc"
            rollout (bool, optional): If True, the row of the rolled-out ``G^L``;
                        if False, the row of the last layer's ``N^L`` alone.
                        Default: True
            attribute_generated (bool, optional): Causal LMs: also score the
                        generated tokens before ``y_t`` (``[batch, T, P + T]``).
                        Default: False
            contrast_target (Tensor, optional): Causal LMs: foil ids
                        ``[batch, T]``, accepted for the generative API and
                        without effect (GlobEnc does not depend on the target).
                        Default: None
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
                        padding. Causal LMs: ``[batch, T, P]`` (``[batch, T, P +
                        T]``), row ``t`` for ``y_t``, zero outside
                        :meth:`~captum_ext._utils.teacher_forcing.TeacherForcedBatch.score_mask`.

        Examples::

            >>> model = AutoModelForSequenceClassification.from_pretrained(name)
            >>> enc = tokenizer(texts, padding=True, return_tensors="pt")
            >>> globenc = GlobEnc(model)
            >>> attr = globenc.attribute(
            ...     enc["input_ids"],
            ...     additional_forward_args=(enc["attention_mask"],))
            >>> # A causal LM explaining the continuation `target_ids` [batch, T]:
            >>> lm = AutoModelForCausalLM.from_pretrained(name)
            >>> tokenizer.padding_side = "left"
            >>> enc = tokenizer(prompts, padding=True, return_tensors="pt")
            >>> attr = GlobEnc(lm).attribute(
            ...     enc["input_ids"], target=target_ids,
            ...     additional_forward_args=(enc["attention_mask"],))  # [batch, T, P]
        """
        self._check_variant(variant)
        if self.built_from_modules or not self.adapter.is_causal_lm:
            _check_classifier_call(attribute_generated, contrast_target)
        return self._attribute(
            inputs,
            target,
            additional_forward_args,
            internal_batch_size=internal_batch_size,
            attribute_generated=attribute_generated,
            # Checked like every method's; GlobEnc's rows do not read it.
            contrast_target=contrast_target,
            options={"variant": variant, "rollout": rollout},
        )

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
        The full token-to-token matrices of every layer (for a causal LM: of
        the sequence ``inputs`` itself, lower triangular). The output itself is
        quadratic in the sequence (``[layers, pos, pos]`` per example), so every
        layer's matrix is formed whole (:meth:`attribute` forms none); for long
        inputs use :meth:`attribute`.

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
        self._check_variant(variant)
        if self.built_from_modules:
            raise ValueError(
                "GlobEnc.attribute_matrices reads a Hugging Face model's token "
                "batch: build GlobEnc from the model (the shortcut)"
            )
        return parse_token_batch(self.adapter, inputs, additional_forward_args)

    def _check_variant(self, variant: str) -> None:
        r"""``variant`` among the decompositions defined for this kind of model
        (a pre-LN decoder has no ``"N_resln"``)."""
        causal = not self.built_from_modules and self.adapter.is_causal_lm
        check_variant(variant, DECODER_VARIANTS if causal else VARIANTS)

    def _in_chunks(
        self,
        batch: TokenBatch,
        target: TargetType,
        internal_batch_size: Optional[int],
        chunk_fn: Callable[..., Tuple[Tensor, Tensor]],
        **options: Tensor,
    ) -> Tensor:
        with torch.no_grad():
            return attribute_in_chunks(
                self.model,
                batch,
                target,
                internal_batch_size,
                chunk_fn,
                "GlobEnc",
                **options,
            )

    def _chunk_scores(
        self,
        batch: TokenBatch,
        target: TargetType,
        variant: str = "N_enc",
        rollout: bool = True,
    ) -> Tuple[Tensor, Tensor]:
        r"""The classification position's row ``[batch, pos]`` and the logits."""
        layers, logits = self._norm_blocks(batch, target, variant)
        position = self.adapter.tokens.classification_position(
            batch.input_ids, batch.attention_mask
        )
        return rolled_out_rows(layers, position[:, None], rollout)[:, 0], logits

    def _generated_scores(
        self,
        forced: TeacherForcedBatch,
        contrast: Optional[Tensor],
        variant: str = "N_enc",
        rollout: bool = True,
    ) -> Tensor:
        r"""Rows :math:`p_t` of ``G^L`` over the teacher-forced chunk,
        ``[chunk, T, P + T - 1]``; without ``score_predicting_position`` the
        column :math:`p_t` of row ``t`` is zero."""
        ids, mask = forced.model_inputs()
        layers, _ = self._norm_blocks(TokenBatch.of(ids, mask), None, variant)
        positions = forced.predicting_positions()  # [T]
        every = positions.expand(len(ids), -1)  # [chunk, T]
        rows = rolled_out_rows(layers, every, rollout)  # [chunk, T, P + T - 1]
        if self.score_predicting_position:
            return rows
        return rows.masked_fill(forced.predicting_mask(rows.shape[-1]), 0)

    def _layer_matrices(
        self, batch: TokenBatch, target: TargetType, variant: str, rollout: bool
    ) -> Tuple[Tensor, Tensor]:
        r"""``G^1 .. G^L`` (or ``N^1 .. N^L``) ``[batch, layers, pos, pos]`` and
        the logits."""
        layers, logits = self._norm_blocks(batch, target, variant)
        matrices = [torch.cat([b for _, b in blocks()], dim=1) for blocks in layers]
        if rollout:
            matrices = rollout_products(matrices)
        return torch.stack(matrices, dim=1), logits

    def _norm_blocks(
        self, batch: TokenBatch, target: TargetType, variant: str
    ) -> Tuple[List[RowBlocks], Tensor]:
        r"""Per-layer ``N^l`` (first layer first), each as blocks of receiving
        rows ``[batch, rows, pos]`` (float32) computed when iterated, zero on
        pad rows and columns; and the logits (``[batch, C]``; causal LMs:
        ``[batch, pos, vocab]``, zero on padding)."""
        if self.adapter.is_causal_lm:
            factors, logits = self._decoder_factors(batch, variant)
        else:
            factors, logits = self._encoder_factors(batch, target, variant)
        return [partial(masked_blocks, f, batch.valid) for f in factors], logits

    def _encoder_factors(
        self, batch: TokenBatch, target: TargetType, variant: str
    ) -> Tuple[List[Callable[[], Factors]], Tensor]:
        adapter = self.adapter
        logits, layers = capture_encoder(adapter, batch)
        resolve_target(target, logits)  # validated only: GlobEnc is class-agnostic
        factors: List[Callable[[], Factors]] = [
            partial(encoder_work_factors, layer, adapter.block_parts(k + 1), variant)
            for k, layer in enumerate(layers)
        ]
        return factors, logits

    def _decoder_factors(
        self, batch: TokenBatch, variant: str
    ) -> Tuple[List[Callable[[], Factors]], Tensor]:
        adapter = self.adapter
        logits, layers = capture_decoder(adapter, batch)
        dtype = result_dtype(logits.dtype)
        factors: List[Callable[[], Factors]] = [
            partial(
                _decoder_work_factors,
                layer,
                dtype,
                adapter.pre_norm_parts(k + 1),
                norm,
                variant,
            )
            for k, (layer, norm) in enumerate(zip(layers, next_norms(adapter)))
        ]
        # Padded positions may hold NaN (Llama's eager mask in float64): they
        # are no example's output, so they are left out of the NaN/inf check
        # (in place: [pos, vocab] is the largest output of the forward pass).
        return factors, logits.masked_fill_(~batch.valid[..., None], 0)


def _decoder_work_factors(
    layer: DecoderLayer,
    dtype: torch.dtype,
    parts: PreNormParts,
    norm: NormParams,
    variant: str,
) -> Factors:
    return decoder_factors(layer.to(dtype), parts, norm, variant)


def _check_classifier_call(
    attribute_generated: bool, contrast_target: Optional[Tensor]
) -> None:
    if attribute_generated or contrast_target is not None:
        raise ValueError(
            "attribute_generated and contrast_target apply to causal LMs "
            "explaining a continuation; this model is a classifier"
        )

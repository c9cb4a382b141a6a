#!/usr/bin/env python3
r"""The one list of attribution methods the cross-cutting tests run on
(``tests/test_matrix.py``, ``tests/test_bad_inputs.py``), in the manner of
Captum's ``captum/testing/attr/helpers/test_config.py``.

Each :class:`MethodConfig` names a method (or a variant of one), builds it for a
model as a callable ``(input_ids, attention_mask, target) -> [batch, pos]``, and
says which families it supports and what it needs from the model. A new method
joins the matrix with one entry in :data:`METHOD_CONFIGS`.
"""

from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple, Type

import pytest
import torch
from captum._utils.typing import TargetType
from captum.attr import LayerIntegratedGradients
from captum_ext.attr import (
    AttCAT,
    AttentionRollout,
    CAT,
    DecodedLayerAttribution,
    DecodedLayerGradCam,
    EmbeddingDecoder,
    EmbeddingNorm,
    GlobEnc,
    LastLayerAttention,
    LogAt,
    NormXLogit,
)
from torch import nn, Tensor

from tests.attr.token_method_checks import TokenMethod
from tests.helpers import ALL_FAMILIES, ENCODER_FAMILIES, POST_LN_FAMILIES

__all__ = ["AttributeFn", "METHOD_CONFIGS", "MethodConfig", "config_family_pairs"]

# (input_ids, attention_mask or None, target, **options such as
# internal_batch_size) -> scores [batch, pos]
AttributeFn = Callable[..., Tensor]

# The tied input-embedding decoder needs one module per layer (ALBERT shares its
# blocks) and word embeddings of the hidden size (ALBERT and ELECTRA factorise
# them): the decoded methods run on every other family.
DECODED_FAMILIES = tuple(f for f in ALL_FAMILIES if f not in ("albert", "electra"))
# The tiny models have 2 layers: hidden_states[1] is the middle one.
MIDDLE_LAYER = 1
IG_STEPS = 4


@dataclass(frozen=True)
class MethodConfig:
    r"""One method of the matrix.

    ``factory(model)`` builds the method; for a family outside ``families`` it
    (or its call) raises :class:`~captum_ext.UnsupportedModelError` matching
    ``unsupported_match``. ``layered(model, layer)``, when given, builds it
    reading ``hidden_states[layer]``; ``decoded(model, decoder)``, when given,
    builds it with a decoder (hidden states -> vocabulary logits) of the
    caller's choice.

    ``cancels_after_layernorm``: the scores are sums over ``d`` of gradient x
    hidden state, which cancel to ~1e-3 of their terms on post-LN encoders, so
    float32 rounding alone (another batch shape, another summation order) moves
    them by up to ~1e-4 of the largest score: their invariance checks run in
    float64 on the encoders.

    ``bfloat16_tolerance`` bounds the relative L2 error of bfloat16 scores
    against float32 ones on the tiny random models, about twice the error
    measured; ``bfloat16_encoder_tolerance``, when given, replaces it on the
    post-LN encoders, where gradient x hidden state sums over ``d`` cancel to
    ~1e-3 of their terms and bfloat16 gradients cannot resolve them (CAT's
    docstring).
    """

    name: str
    factory: Callable[[nn.Module], AttributeFn]
    families: Tuple[str, ...] = ALL_FAMILIES
    needs_gradients: bool = False
    unsupported_match: str = ""
    layered: Optional[Callable[[nn.Module, int], AttributeFn]] = None
    decoded: Optional[Callable[[nn.Module, nn.Module], AttributeFn]] = None
    cancels_after_layernorm: bool = False
    bfloat16_tolerance: float = 0.1
    bfloat16_encoder_tolerance: Optional[float] = None

    def __str__(self) -> str:
        return self.name

    def invariance_dtype(self, family: str) -> torch.dtype:
        if self.cancels_after_layernorm and family in ENCODER_FAMILIES:
            return torch.float64
        return torch.float32

    def bfloat16_limit(self, family: str) -> float:
        if family in ENCODER_FAMILIES and self.bfloat16_encoder_tolerance:
            return self.bfloat16_encoder_tolerance
        return self.bfloat16_tolerance


def _caller(method: TokenMethod, **kwargs: Any) -> AttributeFn:
    r"""``method.attribute`` in the matrix's call convention."""

    def run(
        ids: Tensor, mask: Optional[Tensor], target: TargetType, **options: Any
    ) -> Tensor:
        extra = None if mask is None else (mask,)
        return method.attribute(
            ids, target=target, additional_forward_args=extra, **kwargs, **options
        )

    return run


# The decoded methods run signed (relu=None): the default final ReLU zeroes every
# score of some tiny random models, which would make the checks vacuous.
def _decoded_grad_cam(
    model: nn.Module, layer: int = MIDDLE_LAYER, decoder: Optional[nn.Module] = None
) -> AttributeFn:
    decoder = EmbeddingDecoder(model) if decoder is None else decoder
    return _caller(DecodedLayerGradCam(model, layer, decoder), relu=None)


def _decoded_ig(
    model: nn.Module, layer: int = MIDDLE_LAYER, decoder: Optional[nn.Module] = None
) -> AttributeFn:
    decoder = EmbeddingDecoder(model) if decoder is None else decoder
    method = DecodedLayerAttribution(model, layer, decoder, LayerIntegratedGradients)
    return _caller(method, relu=None, n_steps=IG_STEPS)


def _decoded_config(
    name: str, build: Callable[..., AttributeFn], **kwargs: Any
) -> MethodConfig:
    r"""A decoded method, ``build(model, layer, decoder)``: gradients through the
    decoder's logits, on the families the tied input-embedding decoder fits."""
    return MethodConfig(
        name,
        build,
        families=DECODED_FAMILIES,
        needs_gradients=True,
        unsupported_match="word embeddings have size|share their weights",
        layered=build,
        decoded=lambda m, decoder: build(m, decoder=decoder),
        **kwargs,
    )


def _reading_config(method: Type[LogAt]) -> MethodConfig:
    r"""LogAt or NormXLogit (a LogAt): both read a chosen layer through a chosen
    decoder alike."""
    return MethodConfig(
        method.__name__,
        lambda m: _caller(method(m)),
        bfloat16_tolerance=0.03,  # measured: up to 0.014
        layered=lambda m, layer: _caller(method(m, layer=layer)),
        decoded=lambda m, decoder: _caller(method(m, decoder=decoder)),
    )


def _globenc_config(variant: str) -> MethodConfig:
    return MethodConfig(
        f"GlobEnc-{variant}",
        lambda m: _caller(GlobEnc(m), variant=variant),
        families=POST_LN_FAMILIES,
        unsupported_match="not a post-LayerNorm encoder",
        bfloat16_tolerance=0.01,  # measured: up to 0.002
    )


METHOD_CONFIGS: Tuple[MethodConfig, ...] = (
    *(_reading_config(method) for method in (LogAt, NormXLogit)),
    MethodConfig(
        "NormXLogit-word_embedding",
        lambda m: _caller(NormXLogit(m, norm="word_embedding")),
        bfloat16_tolerance=0.03,  # measured: up to 0.013
    ),
    MethodConfig(
        "CAT",
        lambda m: _caller(CAT(m)),
        needs_gradients=True,
        cancels_after_layernorm=True,
        bfloat16_encoder_tolerance=1.0,  # measured: up to 0.53 (0.026 pre-LN)
    ),
    MethodConfig(
        "AttCAT",
        lambda m: _caller(AttCAT(m)),
        needs_gradients=True,
        cancels_after_layernorm=True,
        bfloat16_encoder_tolerance=1.2,  # measured: up to 0.77 (0.053 pre-LN)
    ),
    MethodConfig(
        "AttCAT-outputs",
        lambda m: _caller(AttCAT(m, layers="outputs")),
        needs_gradients=True,
        bfloat16_tolerance=0.04,  # measured: up to 0.018
    ),
    *(_globenc_config(variant) for variant in ("N_enc", "N_res", "N")),
    _decoded_config(
        "DecodedLayerGradCam",
        _decoded_grad_cam,
        cancels_after_layernorm=True,
        bfloat16_tolerance=0.04,  # measured on pre-LN families: up to 0.016
        # Measured up to 3.5 on post-LN encoders: Captum's gradient x activation
        # runs in bfloat16 (the sum over d in float32), so the sign and size of
        # the scores are not reliable in bfloat16 there; the bound only catches
        # blow-ups. The default model's guard is tests/test_precision.py.
        bfloat16_encoder_tolerance=5.0,
    ),
    _decoded_config(
        "DecodedLayerAttribution-LIG",
        _decoded_ig,
        bfloat16_tolerance=0.06,  # measured: up to 0.028
    ),
    # The paper baselines, class-agnostic like GlobEnc: the target is validated
    # and ignored (tests/attr/baseline_checks.py).
    MethodConfig(
        "LastLayerAttention",
        lambda m: _caller(LastLayerAttention(m)),
        bfloat16_tolerance=0.003,  # measured: up to 0.001
    ),
    MethodConfig(
        "AttentionRollout",
        lambda m: _caller(AttentionRollout(m)),
        bfloat16_tolerance=0.003,  # measured: up to 0.0015
    ),
    MethodConfig(
        "EmbeddingNorm",
        lambda m: _caller(EmbeddingNorm(m)),
        bfloat16_tolerance=0.003,  # measured: up to 0.0012
    ),
)


def config_family_pairs(
    select: Callable[[MethodConfig, str], bool] = lambda c, f: True,
) -> list:
    r"""``pytest.param(config, family)`` for every supported family of every
    method, filtered by ``select``."""
    return [
        pytest.param(config, family, id=f"{config.name}-{family}")
        for config in METHOD_CONFIGS
        for family in config.families
        if select(config, family)
    ]

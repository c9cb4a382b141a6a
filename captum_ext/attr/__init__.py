#!/usr/bin/env python3
r"""Token-attribution methods for Hugging Face transformers, in Captum's API."""

from captum_ext.attr._core.attcat import AttCAT
from captum_ext.attr._core.attention_rollout import AttentionRollout
from captum_ext.attr._core.cat import CAT
from captum_ext.attr._core.decoded_layer_attribution import DecodedLayerAttribution
from captum_ext.attr._core.decoded_layer_grad_cam import DecodedLayerGradCam
from captum_ext.attr._core.embedding_decoder import EmbeddingDecoder
from captum_ext.attr._core.embedding_norm import EmbeddingNorm
from captum_ext.attr._core.globenc import GlobEnc
from captum_ext.attr._core.last_layer_attention import LastLayerAttention
from captum_ext.attr._core.llm_token_attribution import LLMTokenAttribution
from captum_ext.attr._core.logat import LogAt
from captum_ext.attr._core.normxlogit import NormXLogit
from captum_ext.attr._utils.prompt_sources import prompt_sources

__all__: list[str] = [
    "AttCAT",
    "AttentionRollout",
    "CAT",
    "DecodedLayerAttribution",
    "DecodedLayerGradCam",
    "EmbeddingDecoder",
    "EmbeddingNorm",
    "GlobEnc",
    "LastLayerAttention",
    "LLMTokenAttribution",
    "LogAt",
    "NormXLogit",
    "prompt_sources",
]

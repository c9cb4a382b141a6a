#!/usr/bin/env python3
r"""One forward pass of a registered post-LayerNorm encoder capturing what
GlobEnc's decomposition reads
(:mod:`captum_ext.attr._utils.encoder_decomposition`)."""

from typing import List, Tuple

from torch import Tensor

from captum_ext._utils.hooks import HookSet
from captum_ext._utils.model_forward import run_model
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.adapters import ModelAdapter
from captum_ext.attr._utils.encoder_decomposition import (
    capture_parts,
    encoder_layers,
    EncoderLayer,
)

__all__ = ["capture_encoder"]


def capture_encoder(
    adapter: ModelAdapter, batch: TokenBatch
) -> Tuple[Tensor, List[EncoderLayer]]:
    r"""One forward pass; returns the logits and every block's inputs."""
    parts = [adapter.block_parts(layer) for layer in range(1, adapter.num_layers + 1)]
    capture = adapter.attention_capture("GlobEnc")
    with HookSet() as hooks, capture:
        captures = capture_parts(hooks, parts)
        output = run_model(
            adapter,
            batch,
            hidden_states=True,
            attentions=capture.output_attentions,
        )
    attention = capture.layers(output)
    return output.logits, encoder_layers(output.hidden_states, attention, captures)

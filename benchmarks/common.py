#!/usr/bin/env python3
r"""Pieces the benchmark scripts share: the default model's architecture with
random weights, tokenised text batches, and gradient x activation at the
embedding output (the reference saliency of GlobEnc's protocol and the paper's
layer-0 Grad-CAM)."""

from typing import Sequence, Tuple

import torch
import transformers
from captum.attr import LayerGradientXActivation
from captum_ext import classifier_forward, get_adapter
from torch import nn, Tensor


def random_minilm() -> nn.Module:
    r"""all-MiniLM-L6-v2's sizes (512 positions) with random weights, eager
    attention, in eval mode."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
        num_labels=2,
        pad_token_id=0,
        cls_token_id=101,
        sep_token_id=102,
    )
    return transformers.AutoModelForSequenceClassification.from_config(
        config, attn_implementation="eager"
    ).eval()


def encode(
    tokenizer: object, texts: Sequence[str], max_length: int
) -> Tuple[Tensor, Tensor]:
    r"""``(input_ids, attention_mask)``, ``[batch, pos]``, right-padded to the
    longest text, truncated to ``max_length``."""
    encoded = tokenizer(  # type: ignore[operator]
        list(texts),
        truncation=True,
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )
    return encoded["input_ids"], encoded["attention_mask"]


def embedding_grad_x_activation(
    model: nn.Module, input_ids: Tensor, mask: Tensor
) -> Tensor:
    r"""``(d logit_pred / d h0) * h0``, ``[batch, pos, d]``: ``h0`` is the
    embedding-layer output and ``pred`` each example's predicted class."""
    forward = classifier_forward(model)
    with torch.no_grad():
        target = forward(input_ids, mask).argmax(-1)
    layer = get_adapter(model).embedding_output_module()
    attribution = LayerGradientXActivation(forward, layer).attribute(
        input_ids, target=target, additional_forward_args=(mask,)
    )
    return attribution.detach()

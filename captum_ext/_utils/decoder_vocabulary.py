#!/usr/bin/env python3
r"""The check that a decoder's logits cover the model's vocabulary."""

from torch import Tensor

__all__ = ["check_decoder_vocabulary"]


def check_decoder_vocabulary(logits: Tensor, vocab_size: int) -> None:
    r"""Raises unless a decoder's logits ``[..., V]`` cover the model's vocabulary
    of ``vocab_size`` tokens."""
    if logits.shape[-1] != vocab_size:
        raise ValueError(
            f"the decoder maps hidden states to {logits.shape[-1]} logits but the "
            f"model's vocabulary has {vocab_size} tokens; use a decoder made for this "
            "model's tokenizer"
        )

#!/usr/bin/env python3
r"""Tiny transformers in plain PyTorch for the tests of token-level methods
and metrics: one pre-norm block (multi-head self-attention and a feed-forward
network) over word and position embeddings, as an encoder (bidirectional
attention, prediction read at the first token) or as a decoder (causal
attention, prediction read at the last attended token).

Positions count attended tokens only (``cumsum(attention_mask) - 1``), and
padded keys get the score -1e9 (not ``-inf``, so a row without any attended
token stays finite), so a padded row gives the logits of the same
tokens without padding, left or right.
"""

from typing import Optional

import torch
from torch import nn, Tensor


class TinyTransformerClassifier(nn.Module):
    r"""``forward(input_ids, attention_mask=None) -> logits [batch, num_classes]``.

    Args:
        vocab_size (int): number of token ids.
        num_classes (int): number of output classes.
        d_model (int): width of the hidden states.
        num_heads (int): attention heads; divides ``d_model``.
        causal (bool): a decoder (causal attention, read at the last attended
            token) instead of an encoder (read at the first token).
        max_positions (int): number of position embeddings.
    """

    def __init__(
        self,
        vocab_size: int = 16,
        num_classes: int = 3,
        d_model: int = 8,
        num_heads: int = 2,
        causal: bool = False,
        max_positions: int = 32,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.causal = causal
        self.word_embeddings = nn.Embedding(vocab_size, d_model)
        self.position_embeddings = nn.Embedding(max_positions, d_model)
        self.attention_norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.output = nn.Linear(d_model, d_model)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model)
        )
        self.dropout = nn.Dropout(0.5)
        self.head = nn.Linear(d_model, num_classes)

    def forward(
        self, input_ids: Tensor, attention_mask: Optional[Tensor] = None
    ) -> Tensor:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = attention_mask != 0  # [batch, pos]
        positions = (mask.to(torch.long).cumsum(-1) - 1).clamp(min=0)
        hidden = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        hidden = hidden + self.dropout(
            self.attention(self.attention_norm(hidden), mask)
        )
        hidden = hidden + self.mlp(self.mlp_norm(hidden))  # [batch, pos, d_model]
        if self.causal:
            positions = torch.arange(mask.shape[1], device=mask.device)
            read = (mask.to(torch.long) * positions).argmax(-1)  # last attended token
        else:
            read = torch.zeros_like(mask[:, 0], dtype=torch.long)
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        return self.head(hidden[rows, read])

    def attention(self, hidden: Tensor, mask: Tensor) -> Tensor:
        batch, pos, d_model = hidden.shape
        d_head = d_model // self.num_heads
        # [3, batch, heads, pos, d_head]
        qkv = self.qkv(hidden).view(batch, pos, 3, self.num_heads, d_head)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = query @ key.transpose(-1, -2) / d_head**0.5  # [batch, heads, q, k]
        allowed = mask[:, None, None, :]
        if self.causal:
            allowed = (
                allowed
                & torch.ones(pos, pos, dtype=torch.bool, device=mask.device).tril()
            )
        scores = scores.masked_fill(~allowed, -1e9)
        mixed = scores.softmax(-1) @ value  # [batch, heads, pos, d_head]
        return self.output(mixed.transpose(1, 2).reshape(batch, pos, d_model))


def tiny_transformer(causal: bool, seed: int = 0) -> TinyTransformerClassifier:
    r"""A :class:`TinyTransformerClassifier` with weights drawn from ``seed``,
    in float64 and eval mode (exact comparisons with naive references)."""
    torch.manual_seed(seed)
    return TinyTransformerClassifier(causal=causal).double().eval()

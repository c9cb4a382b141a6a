#!/usr/bin/env python3
r"""Small transformers written in plain PyTorch (no ``transformers`` import), the
kind of model a Captum user brings: pre-LN or post-LN blocks, causal or
bidirectional attention, a classification head on one position. Every state a
method reads is the output of a named module: ``blocks[l]`` (the hidden state
after block l), ``blocks[l].ln1`` (what a pre-LN block's attention reads),
``blocks[l].attention.probabilities`` (the attention probabilities, an
``nn.Identity`` they pass through), ``embeddings`` (the embedding output) and
``final`` (the state the head reads); a post-LN block's ``attention.value``,
``attention.out``, ``ln1`` and ``ln2`` are GlobEnc's parts."""

import math
from typing import Tuple

import torch
from torch import nn, Tensor

__all__ = ["PlainClassifier", "plain_classifier", "PLAIN_VARIANTS"]

# (pre_ln, causal) of each variant the tests run
PLAIN_VARIANTS = {
    "post-LN encoder": (False, False),
    "pre-LN encoder": (True, False),
    "post-LN decoder": (False, True),
    "pre-LN decoder": (True, True),
}


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        self.probabilities = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        batch, pos, d_model = x.shape
        q, k, v = (
            project(x).reshape(batch, pos, self.heads, -1).transpose(1, 2)
            for project in (self.query, self.key, self.value)
        )  # [batch, heads, pos, head_dim]
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if self.causal:
            later = torch.ones(pos, pos, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(later, float("-inf"))
        probs = self.probabilities(scores.softmax(-1))  # [batch, heads, pos, pos]
        mixed = (probs @ v).transpose(1, 2).reshape(batch, pos, d_model)
        out: Tensor = self.out(mixed)
        return out


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, pre_ln: bool, causal: bool) -> None:
        super().__init__()
        self.pre_ln = pre_ln
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = SelfAttention(d_model, heads, causal)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model)
        )

    def forward(self, x: Tensor) -> Tensor:  # [batch, pos, d_model]
        if self.pre_ln:
            x = x + self.attention(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attention(x))
        out: Tensor = self.ln2(x + self.mlp(x))
        return out


class PlainClassifier(nn.Module):
    r"""``forward(input_ids [batch, pos]) -> logits [batch, classes]``, read
    from position 0 (bidirectional) or the last position (causal)."""

    def __init__(
        self,
        pre_ln: bool,
        causal: bool,
        vocab: int = 50,
        d_model: int = 16,
        heads: int = 2,
        layers: int = 3,
        classes: int = 3,
        max_positions: int = 32,
    ) -> None:
        super().__init__()
        self.causal = causal
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(max_positions, d_model)
        self.embeddings = nn.LayerNorm(d_model)
        self.blocks = nn.ModuleList(
            Block(d_model, heads, pre_ln, causal) for _ in range(layers)
        )
        self.final = nn.LayerNorm(d_model) if pre_ln else nn.Identity()
        self.head = nn.Linear(d_model, classes)

    def forward(self, input_ids: Tensor) -> Tensor:
        where = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.embeddings(self.tokens(input_ids) + self.positions(where))
        for block in self.blocks:
            x = block(x)  # [batch, pos, d_model]
        read = -1 if self.causal else 0
        logits: Tensor = self.head(self.final(x)[:, read])
        return logits


def plain_classifier(variant: str, seed: int = 0) -> Tuple[PlainClassifier, Tensor]:
    r"""A float64 :class:`PlainClassifier` of ``variant`` (a key of
    :data:`PLAIN_VARIANTS`) in eval mode and a batch of ids ``[3, 7]``."""
    torch.manual_seed(seed)
    pre_ln, causal = PLAIN_VARIANTS[variant]
    model = PlainClassifier(pre_ln, causal).double().eval()
    return model, torch.randint(0, 50, (3, 7))

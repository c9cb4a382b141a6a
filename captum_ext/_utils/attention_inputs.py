#!/usr/bin/env python3
r"""What one attention layer computed its probabilities from, and those
probabilities a block of query rows at a time: the layer's own map, or the
query and key (with its mask and options) from which :meth:`AttentionInputs.
probability_blocks` recomputes them without gradients, so that no ``[heads,
pos, pos]`` map of a whole layer need exist."""

from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import torch
from torch import nn, Tensor

__all__ = ["AttentionInputs"]

# Probabilities per block: batch * heads * rows * keys elements at most (16 MiB
# in float32), so a block, with the one temporary of its softmax, never
# outgrows the forward pass's own activations (a small model's forward over
# 2,048 tokens peaks near 90 MiB); smaller blocks only add Python steps.
BLOCK_ELEMENTS = 1 << 22
# On an accelerator (256 MiB in float32): a small block would leave the device
# waiting on Python between kernels, and an accelerator's forward over a long
# prompt holds gigabytes of activations anyway.
ACCELERATOR_BLOCK_ELEMENTS = 1 << 26


@dataclass
class AttentionInputs:
    r"""What one block's attention computed its probabilities from: either the
    model's own probabilities (eager attention) or the query and key it handed
    the attention function, with its mask and options.

    ``probabilities`` ``[batch, heads, q, k]`` (eager), or ``query``
    ``[batch, heads, q, head_dim]`` and ``key`` ``[batch, kv_heads, k,
    head_dim]`` with ``mask`` as the function received it: ``None`` (only
    ``causal`` and ``sliding_window`` restrict the keys), a boolean ``[batch |
    1, heads | 1, q, k]`` (True = attend), an additive float mask of that shape,
    or a 2-d key padding mask ``[batch, k]`` (flash kernels; 1 = real token)."""

    probabilities: Optional[Tensor] = None
    query: Optional[Tensor] = None
    key: Optional[Tensor] = None
    mask: Optional[Tensor] = None
    scaling: Optional[float] = None
    causal: bool = False
    sliding_window: Optional[int] = None
    softcap: Optional[float] = None

    @property
    def dtype(self) -> torch.dtype:
        r"""The model's dtype (of its probabilities or query)."""
        return self._source.dtype

    @property
    def num_keys(self) -> int:
        r"""The keys each query row attends over (the sequence length)."""
        if self.probabilities is not None:
            return int(self.probabilities.shape[-1])
        assert self.key is not None  # a query always comes with its key
        return int(self.key.shape[-2])

    @property
    def num_heads(self) -> int:
        return int(self._source.shape[1])

    @property
    def _source(self) -> Tensor:
        source = self.probabilities if self.probabilities is not None else self.query
        assert (
            source is not None
        ), "AttentionInputs holds neither probabilities nor a query"
        return source

    def probability_blocks(
        self, dtype: torch.dtype, max_elements: Optional[int] = None
    ) -> Iterator[Tuple[int, Tensor]]:
        r"""The attention probabilities ``[batch, heads, rows, k]`` in ``dtype``,
        a block of consecutive query rows at a time, with the first row's index.

        Eager probabilities come as one block (the model has already formed the
        whole map, so the results are exactly those of the map). Otherwise each
        block is ``softmax(q k^T * scaling + mask)`` over at most
        ``max_elements`` (default :data:`BLOCK_ELEMENTS` on the CPU,
        :data:`ACCELERATOR_BLOCK_ELEMENTS` elsewhere) probabilities, computed
        in ``dtype`` without gradients; a query row that may attend no key (left
        padding) is all zeros. Under causality without a 4-d mask a block
        computes only the keys its rows may reach (the keys after them are
        zeros): over a long prompt about half the products and softmax of
        every row against every key.
        """
        if self.probabilities is not None:
            yield 0, self.probabilities.to(dtype)
            return
        query, key = self.query, self.key
        assert query is not None and key is not None
        batch, heads, rows, _ = query.shape
        keys = key.shape[2]
        key = _repeat_heads(key, heads).to(dtype)
        limit = max_elements or _block_elements(query.device)
        step = max(1, limit // max(1, batch * heads * keys))
        with torch.no_grad():
            for start in range(0, rows, step):
                stop = min(rows, start + step)
                yield start, self._block(query[:, :, start:stop].to(dtype), key, start)

    def _block(self, query: Tensor, key: Tensor, start: int) -> Tensor:
        scaling = self.scaling if self.scaling is not None else query.shape[-1] ** -0.5
        rows, keys = query.shape[2], key.shape[2]
        reach = self._reach(start + rows, keys)
        # In place wherever possible: one block and its softmax at a time.
        scores = query @ key[:, :, :reach].transpose(-1, -2)  # [b, heads, rows, reach]
        scores = scores.mul_(scaling)
        if self.softcap is not None:
            scores = scores.div_(self.softcap).tanh_().mul_(self.softcap)
        allowed = self._allowed(start, rows, keys, reach)
        mask = self.mask
        if mask is not None and mask.dim() == 4 and not _is_bool(mask):
            scores += _mask_rows(mask, start, rows).to(scores.dtype)
        scores = scores.masked_fill_(~allowed, float("-inf"))
        probabilities = torch.softmax(scores, dim=-1)
        del scores
        # A row that may attend no key gives NaN (0/0): it reads nothing.
        probabilities = probabilities.nan_to_num_(nan=0.0)
        if reach == keys:
            return probabilities
        return nn.functional.pad(probabilities, (0, keys - reach))  # [.., rows, k]

    def _reach(self, stop: int, keys: int) -> int:
        r"""How many leading keys the query rows before ``stop`` may attend at
        most: under causality (without a 4-d mask, which says for itself) no
        row sees a key after its own position, so a block of early rows skips
        the later keys' products and softmax; all ``keys`` otherwise."""
        mask = self.mask
        if not self.causal or (mask is not None and mask.dim() == 4):
            return keys
        return min(keys, stop + keys - self.query.shape[2])  # type: ignore[union-attr]

    def _allowed(self, start: int, rows: int, keys: int, reach: int) -> Tensor:
        r"""Which of the first ``reach`` keys each query row of the block may
        attend, ``[b|1, h|1, rows, reach]``: the 4-d mask as given, else
        causality (bottom-right aligned, as with a cache), the sliding window
        and a 2-d key padding mask."""
        mask = self.mask
        if mask is not None and mask.dim() == 4:
            block = _mask_rows(mask, start, rows)
            return block if _is_bool(block) else block > torch.finfo(block.dtype).min
        device = self.query.device  # type: ignore[union-attr]
        query_pos = torch.arange(start, start + rows, device=device)[:, None]
        query_pos = query_pos + (keys - self.query.shape[2])  # type: ignore[union-attr]
        key_pos = torch.arange(reach, device=device)[None, :]
        allowed = torch.ones(rows, reach, dtype=torch.bool, device=device)
        if self.causal:
            allowed = allowed & (key_pos <= query_pos)
        if self.sliding_window is not None:
            allowed = allowed & (query_pos - key_pos < self.sliding_window)
        allowed = allowed[None, None]
        if mask is not None:  # [batch, k] key padding (flash kernels)
            allowed = allowed & mask.bool()[:, None, None, :reach]
        return allowed


def _block_elements(device: torch.device) -> int:
    return BLOCK_ELEMENTS if device.type == "cpu" else ACCELERATOR_BLOCK_ELEMENTS


def _mask_rows(mask: Tensor, start: int, rows: int) -> Tensor:
    r"""Query rows ``start .. start + rows`` of a 4-d mask (one row broadcasts)."""
    return mask if mask.shape[2] == 1 else mask[:, :, start : start + rows]


def _is_bool(mask: Tensor) -> bool:
    return mask.dtype == torch.bool


def _repeat_heads(key: Tensor, heads: int) -> Tensor:
    r"""Grouped-query keys ``[batch, kv_heads, k, d]`` as one per query head:
    query head ``h`` reads kv head ``h // (heads // kv_heads)`` (``repeat_kv``)."""
    kv_heads = key.shape[1]
    if heads % kv_heads:
        raise ValueError(f"cannot pair {heads} query heads with {kv_heads} key heads")
    return key.repeat_interleave(heads // kv_heads, dim=1)

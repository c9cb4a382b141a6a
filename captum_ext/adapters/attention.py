#!/usr/bin/env python3
r"""Attention probabilities of any attention implementation, read from the query
and key the model itself computes, in blocks of query rows.

``attn_implementation="eager"`` returns every block's attention map
(``output_attentions=True``), but it holds ``[batch, heads, pos, pos]`` per layer
and is not how ``from_pretrained`` loads a model by default. Every family whose
attention goes through transformers' attention interface
(``ALL_ATTENTION_FUNCTIONS``: ``sdpa``, the flash kernels, ...) hands its
attention function the post-rotary query, the key (grouped-query heads not yet
repeated), the mask, the scaling and, where it has one, the sliding window.
:class:`AttentionCapture` wraps that function for the duration of one forward
pass, keeps those inputs (:class:`AttentionInputs`, detached: no graph, no
copy) and lets the model's own kernel compute its output as always. A method
then recomputes the probabilities it needs with
:meth:`AttentionInputs.probability_blocks`, a block of query rows at a time and
without gradients, so no ``[heads, pos, pos]`` map of a whole layer ever exists.

The wrapper is installed in transformers' attention registry only while a
capture is open (reference-counted across threads) and records only the calls
of the thread that opened the capture, for the modules of its model: other
models and other threads run the original function untouched. The model's
``config`` and attention implementation are never changed.
"""

import threading
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn, Tensor

from captum_ext.adapters.errors import UnsupportedModelError

__all__ = ["AttentionCapture", "AttentionInputs", "attention_implementation"]

# Probabilities per block: batch * heads * rows * keys elements at most (16 MiB
# in float32), so a block, with the one temporary of its softmax, never
# outgrows the forward pass's own activations (a small model's forward over
# 2,048 tokens peaks near 90 MiB); smaller blocks only add Python steps.
BLOCK_ELEMENTS = 1 << 22
# On an accelerator (256 MiB in float32): a small block would leave the device
# waiting on Python between kernels, and an accelerator's forward over a long
# prompt holds gigabytes of activations anyway.
ACCELERATOR_BLOCK_ELEMENTS = 1 << 26


def attention_implementation(config: Any) -> str:
    r"""The attention implementation the model runs (``"eager"`` when unset)."""
    return getattr(config, "_attn_implementation", None) or "eager"


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
        raise UnsupportedModelError(
            f"cannot pair {heads} query heads with {kv_heads} key heads"
        )
    return key.repeat_interleave(heads // kv_heads, dim=1)


# --- the wrapper in transformers' attention registry --------------------------

_ACTIVE = threading.local()  # .captures: the open captures of this thread
_REGISTRY_LOCK = threading.Lock()
_INSTALLED: Dict[str, Tuple[int, Callable[..., Any], bool]] = {}


def _registry() -> Any:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS


def _open_captures() -> List["AttentionCapture"]:
    captures: Optional[List[AttentionCapture]] = getattr(_ACTIVE, "captures", None)
    if captures is None:
        captures = _ACTIVE.captures = []
    return captures


def _recording(original: Callable[..., Any]) -> Callable[..., Any]:
    def attention(
        module: nn.Module,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Optional[Tensor],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        for capture in _open_captures():
            if capture.owns(module):
                capture.record(module, query, key, attention_mask, kwargs)
                break
        return original(module, query, key, value, attention_mask, *args, **kwargs)

    return attention


def _install(name: str) -> None:
    registry = _registry()
    with _REGISTRY_LOCK:
        if name in _INSTALLED:
            count, original, was_local = _INSTALLED[name]
            _INSTALLED[name] = (count + 1, original, was_local)
            return
        if name not in registry:
            raise UnsupportedModelError(
                f"attn_implementation={name!r} is not in transformers' attention "
                "interface, so captum_ext cannot read its attention; load the model "
                "with attn_implementation='eager' or 'sdpa'"
            )
        original, was_local = registry[name], name in registry._local_mapping
        registry[name] = _recording(original)
        _INSTALLED[name] = (1, original, was_local)


def _uninstall(name: str) -> None:
    registry = _registry()
    with _REGISTRY_LOCK:
        count, original, was_local = _INSTALLED[name]
        if count > 1:
            _INSTALLED[name] = (count - 1, original, was_local)
            return
        del _INSTALLED[name]
        if was_local:
            registry[name] = original
        else:
            del registry[name]  # the global entry shows through again


class AttentionCapture:
    r"""Context manager around forward passes of one model that collects, per
    block, the :class:`AttentionInputs` of its attention (first block first).

    With eager attention the model returns its maps: run the forward pass with
    ``output_attentions=`` :attr:`output_attentions` and read them with
    :meth:`layers`. With any other implementation of transformers' attention
    interface the query and key are recorded as the model computes them (see
    the module docstring); :meth:`layers` raises
    :class:`UnsupportedModelError` if some block's attention did not go through
    the interface (a family that computes attention its own way).
    """

    def __init__(self, model: nn.Module, num_layers: int, method: str) -> None:
        self.implementation = attention_implementation(getattr(model, "config"))
        self.output_attentions = self.implementation == "eager"
        self._modules = {id(module) for module in model.modules()}
        self._num_layers = num_layers
        self._method = method
        self._recorded: List[AttentionInputs] = []
        self._stack = ExitStack()

    def __enter__(self) -> "AttentionCapture":
        if not self.output_attentions:
            _install(self.implementation)
            self._stack.callback(_uninstall, self.implementation)
            _open_captures().append(self)
            self._stack.callback(_open_captures().remove, self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def owns(self, module: nn.Module) -> bool:
        return id(module) in self._modules

    def record(
        self,
        module: nn.Module,
        query: Tensor,
        key: Tensor,
        mask: Optional[Tensor],
        kwargs: Dict[str, Any],
    ) -> None:
        causal = kwargs.get("is_causal")
        if causal is None:
            causal = getattr(module, "is_causal", False)
        if kwargs.get("position_bias") is not None:
            raise UnsupportedModelError(
                f"{self._method}: this model's attention adds a position bias, which "
                "captum_ext cannot read from the query and key; load it with "
                "attn_implementation='eager'"
            )
        self._recorded.append(
            AttentionInputs(
                query=query.detach(),
                key=key.detach(),
                mask=None if mask is None else mask.detach(),
                scaling=kwargs.get("scaling"),
                causal=bool(causal),
                sliding_window=kwargs.get("sliding_window"),
                softcap=kwargs.get("softcap"),
            )
        )

    def layers(self, output: Any) -> List[AttentionInputs]:
        r"""Every block's :class:`AttentionInputs` of the one forward pass run
        inside the capture (``output`` is its Hugging Face output)."""
        if self.output_attentions:
            return [AttentionInputs(probabilities=a) for a in output.attentions]
        recorded, self._recorded = self._recorded, []
        if len(recorded) != self._num_layers:
            raise UnsupportedModelError(
                f"{self._method} reads attention, but {len(recorded)} of this "
                f"model's {self._num_layers} blocks ran their attention through "
                "transformers' attention interface "
                f"(attn_implementation={self.implementation!r}); load the model with "
                "attn_implementation='eager'"
            )
        return recorded

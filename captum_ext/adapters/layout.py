#!/usr/bin/env python3
r"""How a family lays out its tokens: where a model classifies from, which
positions hold special tokens, and the keyword arguments of a forward pass."""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from captum_ext.adapters.families import _Family


def _positions_from_mask(attention_mask: Tensor) -> Tensor:
    r"""``[batch, pos]`` position ids counting attended tokens only, so the first
    real token is position 0 however much left padding precedes it (pads get 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def _framing_positions(attention_mask: Tensor) -> Tensor:
    r"""Boolean ``[batch, pos]``: the first and the last attended position."""
    valid = attention_mask.bool()
    index = torch.arange(valid.shape[1], device=valid.device)
    first = torch.where(valid, index, valid.shape[1]).amin(-1, keepdim=True)
    last = torch.where(valid, index, -1).amax(-1, keepdim=True)
    return valid & ((index == first) | (index == last))


_CONFIG_SPECIALS = ("bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id")


def _config_special_ids(config: Any) -> List[int]:
    r"""Special ids the config names, padding left out."""
    ids = {getattr(config, name, None) for name in _CONFIG_SPECIALS}
    return sorted(i for i in ids if isinstance(i, int))


def _last_token_position(
    input_ids: Tensor, attention_mask: Optional[Tensor], pad_token_id: Optional[int]
) -> Tensor:
    r"""``[batch]``: the rightmost token that is not ``pad_token_id`` (Hugging
    Face's rule for causal classifiers); without a pad id, the last attended one."""
    batch, pos = input_ids.shape
    index = torch.arange(pos, device=input_ids.device)
    if pad_token_id is not None:
        keep = input_ids != pad_token_id
    elif attention_mask is not None:
        keep = attention_mask.bool()
    else:
        return torch.full((batch,), pos - 1, device=input_ids.device)
    return (index * keep).argmax(-1)


@dataclass(frozen=True)
class TokenLayout:
    r"""How a model's family lays out its tokens: where it classifies from,
    which positions hold special tokens, and the keyword arguments of a forward
    pass. ``adapter.tokens`` of every :class:`ModelAdapter`."""

    causal: bool  # classifies from the last non-pad token
    pad_token_id: Optional[int]
    config_special_ids: Tuple[int, ...]  # bos/eos/sep/cls ids the config names
    framed_by_specials: bool  # see _Family.framed_by_specials
    position_ids_from_mask: bool  # see _Family.position_ids_from_mask

    def classification_position(
        self, input_ids: Tensor, attention_mask: Optional[Tensor] = None
    ) -> Tensor:
        r"""``[batch]`` index of the position the model classifies from: 0 for
        encoders, the last non-pad token for causal classifiers."""
        if self.causal:
            return _last_token_position(input_ids, attention_mask, self.pad_token_id)
        return torch.zeros(len(input_ids), dtype=torch.long, device=input_ids.device)

    def special_token_ids(self, tokenizer: Optional[object] = None) -> List[int]:
        r"""Special-token ids: the tokenizer's when given, else the config's pad,
        bos, eos, sep and cls ids (BERT-style configs of transformers 5: pad only)."""
        if tokenizer is not None:
            return sorted(set(getattr(tokenizer, "all_special_ids")))
        ids = set(self.config_special_ids) | {self.pad_token_id}
        return sorted(i for i in ids if isinstance(i, int))

    def special_positions(
        self, input_ids: Tensor, attention_mask: Tensor, tokenizer: object = None
    ) -> Tensor:
        r"""Boolean ``[batch, pos]``: attended positions holding a special token,
        by the tokenizer's ids, else the config's bos/eos/sep/cls ids, else the
        family's rule: encoders' tokenizers frame every sequence with a special
        first and last token, so those attended positions are special (causal
        families: none)."""
        if tokenizer is None and not self.config_special_ids:
            if self.framed_by_specials:
                return _framing_positions(attention_mask)
            return torch.zeros_like(attention_mask, dtype=torch.bool)
        ids = torch.tensor(self.special_token_ids(tokenizer), device=input_ids.device)
        return attention_mask.bool() & torch.isin(input_ids, ids)

    def forward_kwargs(
        self, attention_mask: Optional[Tensor], token_type_ids: Optional[Tensor]
    ) -> Dict[str, Tensor]:
        r"""Keyword arguments for ``model(input_ids, **kwargs)``: the masks, and
        ``position_ids`` counting attended tokens only for families whose absolute
        positions left padding would shift (so left = right padding)."""
        kwargs: Dict[str, Tensor] = {}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
            if self.position_ids_from_mask:
                kwargs["position_ids"] = _positions_from_mask(attention_mask)
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        return kwargs


def _token_layout(config: Any, family: _Family) -> TokenLayout:
    return TokenLayout(
        causal=family.causal,
        pad_token_id=getattr(config, "pad_token_id", None),  # none for images
        config_special_ids=tuple(_config_special_ids(config)),
        framed_by_specials=family.framed_by_specials,
        position_ids_from_mask=family.position_ids_from_mask,
    )

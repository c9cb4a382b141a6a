#!/usr/bin/env python3
r"""
Architecture adapters: the only code in captum_ext that knows Hugging Face module
names.

A :class:`ModelAdapter` maps a Hugging Face model to the pieces the attribution
methods need, whatever the family:

- ``hidden_state_module(l)``: the module whose output *is* ``hidden_states[l]``
  (``0`` = embedding output, ``L`` = last block output);
- ``block_parts(l)``: value projection, attention output projection and both
  LayerNorms of block ``l`` (post-LN encoders only, for norm decompositions);
- ``head_on_every_position(h)``: the model's own classification head applied to
  every position of ``h`` (``[batch, pos, d_model] -> [batch, pos, classes]``);
- ``mlm_head()``: the masked-LM head of a ``*ForMaskedLM`` model, if any;
- ``tokens``: the family's :class:`TokenLayout`: where the model reads its
  prediction from ([CLS]/<s>, or the last non-pad token for causal
  classifiers), which positions hold special tokens, and the keyword arguments
  of a forward pass (``position_ids`` from the mask for decoder-only families).

Families are recognised by ``config.model_type`` (never by ``isinstance`` on a
model class); each is one keyword-built :class:`_Family` record. A model of an
unknown family gets a :class:`UnsupportedModelError` naming what is missing.

Wrapped models are seen through (:func:`unwrap_model`): a ``peft`` ``PeftModel``
(LoRA merged or not; the adapter layers stay inside the inner model), the
``OptimizedModule`` of ``torch.compile`` and ``DataParallel`` /
``DistributedDataParallel``. ``adapter.model`` is then the inner Hugging Face model,
which the methods hook and run (uncompiled, on its own device), so attributions
equal those of the unwrapped model.
"""

from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn, Tensor
from transformers.pytorch_utils import Conv1D

__all__ = [
    "BlockParts",
    "NormParams",
    "PreNormParts",
    "ModelAdapter",
    "TokenLayout",
    "check_head_reproduces",
    "UnsupportedModelError",
    "get_adapter",
    "supported_families",
    "unwrap_model",
]


class UnsupportedModelError(ValueError):
    r"""Raised when a model (or one of its parts) is not supported by a method."""


@dataclass(frozen=True)
class BlockParts:
    r"""Modules of one post-LN encoder block used by norm-based decompositions.

    ``value`` maps ``[batch, pos, d_model] -> [batch, pos, heads * head_dim]``
    (bias included; a LoRA-wrapped projection stays wrapped, since only its output
    is used); ``attention_output`` is the projection after the heads (``W_O``,
    ``b_O``), whose weight is read; ``layernorm1`` follows attention + residual,
    ``layernorm2`` follows feed-forward + residual.
    """

    value: nn.Module
    attention_output: nn.Linear
    layernorm1: nn.LayerNorm
    layernorm2: nn.LayerNorm


@dataclass(frozen=True, kw_only=True)
class _PartPaths:
    r"""Paths of :class:`BlockParts` inside one block."""

    value: str
    attention_output: str
    layernorm1: str
    layernorm2: str


# A classification head on every position: (model, [batch, pos, d]) -> [b, pos, C].
_Head = Callable[[nn.Module, Tensor], Tensor]


@dataclass(frozen=True, kw_only=True)
class _Family:
    r"""Everything captum_ext knows about one architecture family.

    Module paths are relative to ``model.base_model`` unless said otherwise.
    """

    name: str
    embedding_output: Tuple[str, ...]  # hidden_states[0]; first path that exists
    blocks: Optional[str]  # None: weights shared across layers (ALBERT)
    final_output: Optional[str] = None  # hidden_states[L] if not the last block
    parts: Optional[_PartPaths] = None  # post-LN encoders only (GlobEnc)
    pre_norm: Optional["_PreNormPaths"] = None  # pre-LN decoders (GlobEnc)
    head: _Head
    classifier: str = "classifier"  # the head's attribute on the full model
    causal: bool = False  # classifies from the last non-pad token
    # Position ids start at pad_token_id + 1 (RoBERTa), so that many embeddings
    # are never used by a token.
    positions_after_pad: bool = False
    # Pass position_ids = cumsum(attention_mask) - 1, so left padding does not
    # shift absolute positions (as Hugging Face's generate() does).
    position_ids_from_mask: bool = False
    # Without special ids in the config: the tokenizer wraps every sequence in a
    # special first and last token ([CLS] ... [SEP]).
    framed_by_specials: bool = False
    mlm_head_paths: Tuple[str, ...] = ()  # on the full model
    mlm_head_builders: Tuple[Callable[[nn.Module], nn.Module], ...] = ()


def _module(root: nn.Module, path: str) -> nn.Module:
    r"""``root.a.b.0.c`` for ``path = "a.b.0.c"``; AttributeError if absent."""
    return root.get_submodule(path)


def _first_token_head(head: nn.Module, hidden: Tensor) -> Tensor:
    r"""Applies a head that reads position 0 (``x[:, 0]``) to every position.

    Every position becomes its own length-1 sequence, so the head's own code runs
    unchanged: ``[batch, pos, d_model] -> [batch, pos, out]``.
    """
    batch, pos, d_model = hidden.shape
    out = head(hidden.reshape(batch * pos, 1, d_model))
    return out.reshape(batch, pos, -1)


# Heads on every position, one per family. Dropout is left out: attributions are
# computed in eval semantics, where dropout is the identity.
def _bert_head(model: nn.Module, hidden: Tensor) -> Tensor:
    pooled = _first_token_head(_module(model, "bert.pooler"), hidden)
    return _module(model, "classifier")(pooled)


def _classification_head(model: nn.Module, hidden: Tensor) -> Tensor:
    # RobertaClassificationHead / ElectraClassificationHead read features[:, 0, :].
    return _first_token_head(_module(model, "classifier"), hidden)


def _albert_head(model: nn.Module, hidden: Tensor) -> Tensor:
    pooler = nn.Sequential(
        _module(model, "albert.pooler"), _module(model, "albert.pooler_activation")
    )
    return _module(model, "classifier")(pooler(hidden))


def _deberta_head(model: nn.Module, hidden: Tensor) -> Tensor:
    pooled = _first_token_head(_module(model, "pooler"), hidden)
    return _module(model, "classifier")(pooled)


def _distilbert_head(model: nn.Module, hidden: Tensor) -> Tensor:
    pre_classifier = _module(model, "pre_classifier")
    return _module(model, "classifier")(torch.relu(pre_classifier(hidden)))


def _score_head(model: nn.Module, hidden: Tensor) -> Tensor:
    return _module(model, "score")(hidden)


# Masked-LM heads of the *ForMaskedLM classes (hidden -> vocabulary logits).
def _distilbert_mlm_head(model: nn.Module) -> nn.Module:
    names = ("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector")
    return nn.Sequential(*(_module(model, name) for name in names))


def _electra_mlm_head(model: nn.Module) -> nn.Module:
    names = ("generator_predictions", "generator_lm_head")
    return nn.Sequential(*(_module(model, name) for name in names))


# ---------------------------------------------------------- pre-LN decoders
# The parts of a pre-LayerNorm decoder block that GlobEnc's decoder
# decomposition reads (captum_ext/attr/_utils/decoder_decomposition.py):
#   h' = h + Attn(norm1(h)),   h'' = h' + MLP(norm2(h')),   final norm after L.
@dataclass(frozen=True)
class NormParams:
    r"""One per-position normalisation
    ``y = weight * (x - c(x)) / sqrt(mean_d((x - c(x))^2) + eps) + bias``:
    a LayerNorm (``centred``: ``c(x)`` is the mean over the hidden dimension) or
    an RMSNorm (``c(x) = 0``, no bias). ``module`` is the norm itself, whose
    real input gives each position's statistics."""

    module: nn.Module
    weight: Tensor  # [d]
    bias: Optional[Tensor]  # [d]; None for RMSNorm
    eps: float
    centred: bool


@dataclass(frozen=True)
class PreNormParts:
    r"""One pre-LayerNorm decoder block ``h' = h + Attn(norm1(h))``,
    ``h'' = h' + MLP(norm2(h'))``.

    ``value``'s output holds the value vectors (bias included) as chunk
    ``value_chunk = (index, count)`` of ``count`` equal chunks of its last
    dimension (GPT-2's fused ``c_attn`` = q | k | v: ``(2, 3)``), with
    ``kv_heads * head_dim`` features (grouped key/value heads: fewer than the
    query heads); ``attention_output``'s output is the attention sublayer's
    output before the residual, ``output_weight`` its ``W_O``
    ``[d, heads * head_dim]`` in ``nn.Linear`` layout and ``output_bias`` its
    ``b_O`` (or None); ``mlp``'s output is the MLP sublayer's.
    """

    norm1: NormParams
    value: nn.Module
    value_chunk: Tuple[int, int]
    attention_output: nn.Module
    output_weight: Tensor
    output_bias: Optional[Tensor]
    norm2: NormParams
    mlp: nn.Module

    def values(self, value_output: Tensor) -> Tensor:
        r"""The value vectors ``[..., kv_heads * head_dim]`` in ``value``'s
        output."""
        index, count = self.value_chunk
        return value_output.chunk(count, dim=-1)[index]


def _layer_norm(module: nn.Module, what: str) -> NormParams:
    norm = _typed(_effective_layer(module, what), nn.LayerNorm, what)
    weight = norm.weight
    if weight is None:  # elementwise_affine=False
        weight = torch.ones(norm.normalized_shape)
    return NormParams(norm, weight, norm.bias, float(norm.eps), centred=True)


def _rms_norm(module: nn.Module, what: str) -> NormParams:
    r"""Llama's RMSNorm: ``weight * x / sqrt(mean(x^2) + variance_epsilon)``."""
    weight = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", None)
    if not isinstance(weight, Tensor) or not isinstance(eps, float):
        raise UnsupportedModelError(
            f"the {what} is a {type(module).__name__}, not an RMSNorm with "
            "weight and variance_epsilon"
        )
    return NormParams(module, weight, None, eps, centred=False)


def _projection(module: nn.Module, what: str) -> Tuple[Tensor, Optional[Tensor]]:
    r"""``(weight [out, in], bias)`` of a Linear or of GPT-2's Conv1D, which
    stores its weight as ``[in, out]``."""
    layer = _effective_layer(module, what)
    if isinstance(layer, nn.Linear):
        return layer.weight, layer.bias
    if isinstance(layer, Conv1D):
        return layer.weight.T, layer.bias
    raise UnsupportedModelError(
        f"the {what} is a {type(layer).__name__}, not a Linear or Conv1D projection"
    )


@dataclass(frozen=True, kw_only=True)
class _PreNormPaths:
    r"""Paths of :class:`PreNormParts` inside one block, and the family's norm."""

    norm1: str
    value: str
    value_chunk: Tuple[int, int] = (0, 1)
    attention_output: str
    norm2: str
    mlp: str
    norm: Callable[[nn.Module, str], NormParams]  # _layer_norm or _rms_norm


_GPT2_PRE_NORM = _PreNormPaths(
    norm1="ln_1",
    value="attn.c_attn",
    value_chunk=(2, 3),
    attention_output="attn.c_proj",
    norm2="ln_2",
    mlp="mlp",
    norm=_layer_norm,
)
_LLAMA_PRE_NORM = _PreNormPaths(
    norm1="input_layernorm",
    value="self_attn.v_proj",
    attention_output="self_attn.o_proj",
    norm2="post_attention_layernorm",
    mlp="mlp",
    norm=_rms_norm,
)


def _pre_norm_paths(family: _Family) -> _PreNormPaths:
    if family.pre_norm is None or family.final_output is None:
        raise UnsupportedModelError(
            f"{family.name} is not a sequential pre-LayerNorm decoder (norm -> "
            "attention -> residual, norm -> MLP -> residual, a final norm) with "
            "its value and output projections known, so GlobEnc's decoder "
            "decomposition is not defined for it; supported: "
            + ", ".join(sorted(k for k, f in _FAMILIES.items() if f.pre_norm))
        )
    return family.pre_norm


def _named_part(root: nn.Module, path: str, what: str) -> nn.Module:
    try:
        return _module(root, path)
    except AttributeError:
        raise UnsupportedModelError(
            f"{what} has no {path!r}; the pre-LayerNorm decomposition needs it"
        ) from None


def _pre_norm_parts(block: nn.Module, paths: _PreNormPaths, what: str) -> PreNormParts:
    def part(path: str) -> nn.Module:
        return _named_part(block, path, what)

    def norm(path: str) -> NormParams:
        return paths.norm(part(path), f"{what}'s {path}")

    output = f"{what}'s {paths.attention_output}"
    weight, bias = _projection(part(paths.attention_output), output)
    return PreNormParts(
        norm1=norm(paths.norm1),
        value=part(paths.value),
        value_chunk=paths.value_chunk,
        attention_output=part(paths.attention_output),
        output_weight=weight,
        output_bias=bias,
        norm2=norm(paths.norm2),
        mlp=part(paths.mlp),
    )


def _is_causal_lm(model: nn.Module, family: _Family) -> bool:
    r"""A decoder-only model with an LM head (output embeddings) and no
    sequence-classification head."""
    get_head = getattr(model, "get_output_embeddings", None)
    return (
        family.causal
        and not hasattr(model, family.classifier)
        and callable(get_head)
        and get_head() is not None
    )


_BERT_PARTS = _PartPaths(
    value="attention.self.value",
    attention_output="attention.output.dense",
    layernorm1="attention.output.LayerNorm",
    layernorm2="output.LayerNorm",
)

_FAMILIES: Dict[str, _Family] = {}


def _register(family: _Family, *model_types: str) -> None:
    for model_type in model_types:
        _FAMILIES[model_type] = family


_BERT = _Family(
    name="bert",
    embedding_output=("embeddings",),
    blocks="encoder.layer",
    parts=_BERT_PARTS,
    head=_bert_head,
    framed_by_specials=True,
    mlm_head_paths=("cls",),
)
_register(_BERT, "bert")
# BERT's layout with another head and positions that start after the pad id.
_register(
    replace(
        _BERT,
        name="roberta",
        head=_classification_head,
        positions_after_pad=True,
        mlm_head_paths=("lm_head",),
    ),
    "roberta",
    "xlm-roberta",
    "camembert",
)
_register(
    _Family(
        name="electra",
        embedding_output=("embeddings_project", "embeddings"),
        blocks="encoder.layer",
        parts=_BERT_PARTS,
        head=_classification_head,
        framed_by_specials=True,
        mlm_head_builders=(_electra_mlm_head,),
    ),
    "electra",
)
_register(
    _Family(
        name="distilbert",
        embedding_output=("embeddings",),
        blocks="transformer.layer",
        parts=_PartPaths(
            value="attention.v_lin",
            attention_output="attention.out_lin",
            layernorm1="sa_layer_norm",
            layernorm2="output_layer_norm",
        ),
        head=_distilbert_head,
        framed_by_specials=True,
        mlm_head_builders=(_distilbert_mlm_head,),
    ),
    "distilbert",
)
_register(
    _Family(
        name="albert",
        embedding_output=("encoder.embedding_hidden_mapping_in",),
        blocks=None,
        head=_albert_head,
        framed_by_specials=True,
        mlm_head_paths=("predictions",),
    ),
    "albert",
)
_register(
    _Family(
        name="deberta-v2",
        embedding_output=("embeddings",),
        blocks="encoder.layer",
        head=_deberta_head,
        framed_by_specials=True,
        mlm_head_paths=("cls", "lm_predictions"),
    ),
    "deberta-v2",
)
_GPT2 = _Family(
    name="gpt2",
    embedding_output=("drop",),
    blocks="h",
    final_output="ln_f",
    pre_norm=_GPT2_PRE_NORM,
    head=_score_head,
    classifier="score",
    causal=True,
    position_ids_from_mask=True,
)
_register(_GPT2, "gpt2")
# The same decoder-only classifier, under other module names.
_register(
    replace(
        _GPT2,
        name="llama",
        embedding_output=("embed_tokens",),
        blocks="layers",
        final_output="norm",
        pre_norm=_LLAMA_PRE_NORM,
    ),
    "llama",
    "mistral",
    "qwen2",
)


def supported_families() -> List[str]:
    r"""The ``config.model_type`` values that have an adapter."""
    return sorted(_FAMILIES)


# ------------------------------------------------------------------ wrappers
def _inner_model(model: nn.Module) -> Optional[nn.Module]:
    r"""The model one wrapper level down, or None if ``model`` wraps nothing known."""
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        return model.module
    compiled = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule
    if isinstance(compiled, nn.Module):
        return compiled
    # peft's PeftModel (duck-typed: peft is not a dependency). get_base_model()
    # returns the transformers model with the LoRA layers injected in place.
    if hasattr(model, "peft_config") and callable(
        getattr(model, "get_base_model", None)
    ):
        _check_not_prompt_learning(model)
        return model.get_base_model()  # type: ignore[operator]
    return None


def _check_not_prompt_learning(peft_model: nn.Module) -> None:
    config = getattr(peft_model, "active_peft_config", None)
    if getattr(config, "is_prompt_learning", False):
        raise UnsupportedModelError(
            f"{type(peft_model).__name__} uses prompt learning "
            f"({getattr(config, 'peft_type', '?')}), whose virtual tokens are "
            "added outside the transformers model, so its token attributions are "
            "undefined here; captum_ext supports PEFT methods injected into the "
            "model's layers (LoRA, IA3, ...)"
        )


def unwrap_model(model: nn.Module) -> nn.Module:
    r"""The Hugging Face model inside ``model``'s wrappers (``torch.compile``,
    ``peft``, ``DataParallel`` / ``DistributedDataParallel``, nested in any order);
    ``model`` itself when it is not wrapped."""
    inner = _inner_model(model)
    while inner is not None and inner is not model:
        model, inner = inner, _inner_model(inner)
    return model


def _effective_layer(module: nn.Module, what: str) -> nn.Module:
    r"""The layer whose own weights compute ``module``'s output: a PEFT tuner layer
    (LoRA) is its ``base_layer`` once its adapters are merged or disabled."""
    base = getattr(module, "base_layer", None)
    if not isinstance(base, nn.Module):
        return module
    active = set(getattr(module, "active_adapters", ()))
    unmerged = active - set(getattr(module, "merged_adapters", ()))
    if getattr(module, "disable_adapters", False) or not unmerged:
        return base
    raise UnsupportedModelError(
        f"the {what} carries unmerged PEFT adapters {sorted(unmerged)}, so its "
        "weight is not the one the model uses; merge them first "
        "(peft_model.merge_adapter() or merge_and_unload()) or leave this "
        "projection out of target_modules"
    )


def _typed(module: nn.Module, kind: type, what: str) -> Any:
    if not isinstance(module, kind):
        raise UnsupportedModelError(
            f"the {what} is a {type(module).__name__}, not a {kind.__name__}; the "
            "norm-based decomposition needs the standard layer"
        )
    return module


# ------------------------------------------------------------------ records
def _config_int(config: Any, *names: str) -> int:
    r"""The first of ``names`` that the config sets (families name sizes
    differently: ``num_hidden_layers`` / ``n_layers`` / ``n_layer``...)."""
    for name in names:
        value = getattr(config, name, None)
        if value:
            return int(value)
    raise UnsupportedModelError(f"the model config sets none of {names}")


def _max_positions(config: Any, family: _Family) -> Optional[int]:
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if value:
            pad = getattr(config, "pad_token_id", None)
            if family.positions_after_pad and pad is not None:
                return int(value) - int(pad) - 1
            return int(value)
    return None


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


def _relative_head_error(head_logits: Tensor, model_logits: Tensor) -> float:
    r"""``max |head - model| / max |model|`` over the batch, in float32. Rows whose
    logits are not finite are left to the callers' NaN/inf check, which names
    them; they say nothing about the head."""
    finite = model_logits.detach().isfinite().all(-1)  # [batch]
    if not bool(finite.any()):
        return 0.0
    head = head_logits.detach()[finite].float()
    model = model_logits.detach()[finite].float()
    scale = model.abs().max().clamp_min(torch.finfo(torch.float32).tiny)
    return float((head - model).abs().max() / scale)


def _head_tolerance(dtype: torch.dtype) -> float:
    r"""1e-3 in float32/64; 8 ulps of the logits' dtype when coarser (0.0625 in
    bfloat16, 0.0078 in float16). The standard heads reproduce the logits exactly
    on CPU (the default sentiment model: 0.0 in float32, bfloat16 and float16); a
    different head (mean pooling) is off by tens of percent."""
    return max(1e-3, 8 * torch.finfo(dtype).eps)


def _check_layer(layer: int, num_layers: int) -> int:
    r"""Validates a ``hidden_states`` index; negative indices count from L."""
    n = num_layers
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise TypeError(f"layer must be an int index into hidden_states, got {layer!r}")
    if not -(n + 1) <= layer <= n:
        raise IndexError(
            f"layer {layer} is out of range: hidden_states has indices 0..{n} "
            f"(0 = embedding output, {n} = last block) for this {n}-layer model"
        )
    return layer % (n + 1)


def _blocks(base_model: nn.Module, family: _Family) -> List[nn.Module]:
    if family.blocks is None:
        raise UnsupportedModelError(
            f"{family.name}: blocks share their weights across layers, so no single "
            "module holds one layer; this method needs one module per layer."
        )
    return list(_module(base_model, family.blocks).children())


def _embedding_output(base_model: nn.Module, family: _Family) -> nn.Module:
    for path in family.embedding_output:
        try:
            return _module(base_model, path)
        except AttributeError:
            continue
    raise UnsupportedModelError(
        f"{family.name}: none of {family.embedding_output} exists on the base "
        "model; cannot locate the embedding output"
    )


def _part_paths(family: _Family) -> _PartPaths:
    if family.parts is None:
        raise UnsupportedModelError(
            f"{family.name} is not a post-LayerNorm encoder with separate "
            "value/output projections and two LayerNorms per block, so the "
            "norm-based decomposition is not defined for it; supported: "
            + ", ".join(sorted(k for k, f in _FAMILIES.items() if f.parts))
        )
    return family.parts


def _block_parts(block: nn.Module, paths: _PartPaths, what: str) -> BlockParts:
    def part(path: str, kind: type) -> Any:
        name = f"{what}'s {path}"
        return _typed(_effective_layer(_module(block, path), name), kind, name)

    return BlockParts(
        value=_module(block, paths.value),
        attention_output=part(paths.attention_output, nn.Linear),
        layernorm1=part(paths.layernorm1, nn.LayerNorm),
        layernorm2=part(paths.layernorm2, nn.LayerNorm),
    )


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


def _find_mlm_head(model: nn.Module, family: _Family) -> Optional[nn.Module]:
    for path in family.mlm_head_paths:
        if hasattr(model, path):
            return _module(model, path)
    for build in family.mlm_head_builders:
        try:
            return build(model)
        except AttributeError:
            continue
    return None


def _check_attention_weights(config: Any, method: str) -> None:
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if impl != "eager":
        raise ValueError(
            f"{method} needs attention weights, but this model uses "
            f"attn_implementation={impl!r}, which returns none. Load it with "
            "from_pretrained(..., attn_implementation='eager') or call "
            "model.set_attn_implementation('eager'); captum_ext never changes "
            "the model for you."
        )


def _require_classifier(model: nn.Module, family: _Family) -> None:
    r"""A masked-LM or a bare ``*Model`` has no classification head."""
    if not hasattr(model, family.classifier):
        raise UnsupportedModelError(
            f"{type(model).__name__} has no sequence-classification head; "
            "load it with AutoModelForSequenceClassification"
        )


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
        pad_token_id=config.pad_token_id,
        config_special_ids=tuple(_config_special_ids(config)),
        framed_by_specials=family.framed_by_specials,
        position_ids_from_mask=family.position_ids_from_mask,
    )


class ModelAdapter:
    r"""What the attribution methods need from one Hugging Face model: its
    sizes, the modules that produce each ``hidden_states[l]``, its heads, and
    its :class:`TokenLayout` (``tokens``). Build it with :func:`get_adapter`;
    it never changes the model. ``hidden_states`` indices run from 0 (embedding
    output) to L (last block)."""

    def __init__(self, model: nn.Module, family: _Family) -> None:
        self.model = model  # the unwrapped Hugging Face model
        self.base_model: nn.Module = getattr(model, "base_model")
        self.config: Any = getattr(model, "config")
        self.family, self._family = family.name, family
        cfg = self.config
        self.num_layers = _config_int(cfg, "num_hidden_layers", "n_layers", "n_layer")
        self.num_heads = _config_int(cfg, "num_attention_heads", "n_heads", "n_head")
        self.hidden_size = _config_int(cfg, "hidden_size", "dim", "n_embd")
        self.head_dim = self.hidden_size // self.num_heads
        self.num_labels = int(cfg.num_labels)
        self.is_regression = self.num_labels == 1
        self.is_causal = family.causal
        self.max_positions = _max_positions(cfg, family)
        self.tokens = _token_layout(cfg, family)

    def word_embeddings(self) -> nn.Embedding:
        r"""The input word-embedding table (``get_input_embeddings()``)."""
        return getattr(self.model, "get_input_embeddings")()

    def check_layer(self, layer: int) -> int:
        r"""Validates a ``hidden_states`` index; negative indices count from L."""
        return _check_layer(layer, self.num_layers)

    def embedding_output_module(self) -> nn.Module:
        r"""The module whose output is ``hidden_states[0]``."""
        return _embedding_output(self.base_model, self._family)

    def hidden_state_module(self, layer: int) -> nn.Module:
        r"""The module whose output is ``hidden_states[layer]`` (for ``L``, the
        final norm of causal models, as Hugging Face reports it)."""
        layer, final = self.check_layer(layer), self._family.final_output
        if layer == 0:
            return self.embedding_output_module()
        if layer == self.num_layers and final is not None:
            return _module(self.base_model, final)
        return _blocks(self.base_model, self._family)[layer - 1]

    def block_parts(self, layer: int) -> BlockParts:
        r"""The :class:`BlockParts` of block ``layer`` (1..L: block ``l`` maps
        ``hidden_states[l-1]`` to ``hidden_states[l]``)."""
        paths, index = _part_paths(self._family), self.check_layer(layer)
        if index == 0:
            raise IndexError("block_parts takes a block index 1..L, not 0")
        block = _blocks(self.base_model, self._family)[index - 1]
        return _block_parts(block, paths, f"{self.family} block {index}")

    # Pre-LN decoders (GlobEnc's decoder decomposition).
    @property
    def is_causal_lm(self) -> bool:
        r"""True for a decoder-only model with an LM head (output embeddings)
        and no sequence-classification head (``*ForCausalLM``)."""
        return _is_causal_lm(self.model, self._family)

    def pre_norm_parts(self, layer: int) -> PreNormParts:
        r"""The :class:`PreNormParts` of block ``layer`` (1..L) of a pre-LN
        decoder; :class:`UnsupportedModelError` for other families or a block
        that lacks a part."""
        paths, index = _pre_norm_paths(self._family), self.check_layer(layer)
        if index == 0:
            raise IndexError("pre_norm_parts takes a block index 1..L, not 0")
        block = _blocks(self.base_model, self._family)[index - 1]
        return _pre_norm_parts(block, paths, f"{self.family} block {index}")

    def final_norm(self) -> NormParams:
        r"""The norm after the last block of a pre-LN decoder (its output is
        ``hidden_states[L]``)."""
        paths, final = _pre_norm_paths(self._family), self._family.final_output
        what = f"{self.family}'s final norm {final!r}"
        return paths.norm(_named_part(self.base_model, str(final), what), what)

    def head_on_every_position(self, hidden: Tensor) -> Tensor:
        r"""The classification head on every position of ``hidden_states[L]``:
        ``[batch, pos, d_model] -> [batch, pos, num_labels]``; at the
        classification position it equals the model's logits (see
        :func:`check_head_reproduces`). Raises :class:`UnsupportedModelError`
        for a model without a sequence-classification head."""
        _require_classifier(self.model, self._family)
        return self._family.head(self.model, hidden)

    def mlm_head(self) -> Optional[nn.Module]:
        r"""The masked-LM head (hidden -> vocabulary logits), or ``None``."""
        return _find_mlm_head(self.model, self._family)

    def require_attention_weights(self, method: str) -> None:
        r"""Raises if the model's attention implementation returns no weights."""
        _check_attention_weights(self.config, method)


def check_head_reproduces(
    adapter: ModelAdapter, head_logits: Tensor, model_logits: Tensor
) -> None:
    r"""Raises :class:`UnsupportedModelError` unless the adapter's head at the
    classification position (``[batch, C]``) reproduces the model's own logits
    ``[batch, C]``: a non-standard head (mean pooling, a custom subclass) would
    otherwise give silently wrong attributions. Relative error in float32
    (:func:`_relative_head_error`) against :func:`_head_tolerance`."""
    error = _relative_head_error(head_logits, model_logits)
    if not error <= _head_tolerance(model_logits.dtype):
        raise UnsupportedModelError(
            f"{type(adapter.model).__name__}'s classification head is not the "
            f"standard {adapter.family} head: at the classification position it "
            f"gives logits that differ from the model's own by {error:.2g} "
            "(relative); methods that apply the head to every position (LogAt, "
            "NormXLogit) cannot explain this model"
        )


def _wrapped_models_hint(model: nn.Module) -> str:
    r"""Names the submodules of ``model`` that are Hugging Face models, if any."""
    names = [
        name
        for name, child in model.named_children()
        if getattr(getattr(child, "config", None), "model_type", None)
    ]
    return f"; pass the wrapped model instead (model.{names[0]})" if names else ""


def get_adapter(model: nn.Module) -> ModelAdapter:
    r"""Returns the :class:`ModelAdapter` of a Hugging Face model, seen through
    the wrappers :func:`unwrap_model` knows.

    Raises:
        UnsupportedModelError: the (unwrapped) model has no ``config.model_type``
            or its family has no adapter.
    """
    inner = unwrap_model(model)
    model_type = getattr(getattr(inner, "config", None), "model_type", None)
    if model_type is None:
        raise UnsupportedModelError(
            f"{type(inner).__name__} has no Hugging Face config with a model_type; "
            "captum_ext methods take a transformers PreTrainedModel (optionally "
            "wrapped by peft, torch.compile or DataParallel)"
            + _wrapped_models_hint(inner)
        )
    family = _FAMILIES.get(model_type)
    if family is None:
        raise UnsupportedModelError(
            f"no architecture adapter for model_type={model_type!r} "
            f"({type(inner).__name__}); supported: {', '.join(supported_families())}. "
            "Add one in captum_ext/adapters.py (see CONTRIBUTING.md)."
        )
    return ModelAdapter(inner, family)

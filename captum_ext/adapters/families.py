#!/usr/bin/env python3
r"""The family table: everything captum_ext knows about each architecture family,
one keyword-built :class:`_Family` record per family, registered for its
``config.model_type`` values (never recognised by ``isinstance`` on a model
class), with the heads applied to every position and the module lookups that read
a record."""

from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn, Tensor

from captum_ext._utils.block_parts import BlockParts as _BlockParts
from captum_ext.adapters.errors import UnsupportedModelError
from captum_ext.adapters.placement import read_parameter
from captum_ext.adapters.pre_norm import (
    _GEMMA_PRE_NORM,
    _GPT2_PRE_NORM,
    _LLAMA_PRE_NORM,
    _PreNormPaths,
    _VIT_PRE_NORM,
)
from captum_ext.adapters.wrappers import _effective_layer, _typed


@dataclass(frozen=True)
class BlockParts(_BlockParts):
    r"""A registered family's :class:`~captum_ext._utils.block_parts.BlockParts`,
    whose weights load through accelerate's hook where the module is
    offloaded (:func:`~captum_ext.adapters.placement.read_parameter`)."""

    def parameter(self, module: nn.Module, name: str) -> Tensor:
        weight = read_parameter(module, name)
        assert weight is not None  # nn.Linear and affine nn.LayerNorm (_block_parts)
        return weight


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
    # hidden_states[L] if not the last block: the final norm of decoder-only
    # families, which Hugging Face applies before reporting hidden_states[L].
    final_output: Optional[str] = None
    parts: Optional[_PartPaths] = None  # post-LN encoders only (GlobEnc)
    pre_norm: Optional[_PreNormPaths] = None  # pre-LN decoders (GlobEnc)
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
    # The LM head of a *ForCausalLM model (on the full model): it maps the final
    # norm's output to next-token logits.
    lm_head: Optional[str] = None
    mlm_head_builders: Tuple[Callable[[nn.Module], nn.Module], ...] = ()
    # Inside a block: the attention module, whose output is (output,
    # probabilities) in eager attention (the methods built from modules).
    attention: Optional[str] = None
    # Vision transformers: pixel_values in, class token(s) then patches out.
    images: bool = False
    class_tokens: int = 0


def _module(root: nn.Module, path: str) -> nn.Module:
    r"""``root.a.b.0.c`` for ``path = "a.b.0.c"``; AttributeError if absent."""
    return root.get_submodule(path)


def _first_token_head(head: nn.Module, hidden: Tensor) -> Tensor:
    r"""Applies a head that reads position 0 (``x[:, 0]``) to every position.

    Every position becomes its own length-1 sequence, so the head's own code runs
    unchanged: ``[batch, pos, d_model] -> [batch, pos, out]``.
    """
    batch, pos, d_model = hidden.shape
    out: Tensor = head(hidden.reshape(batch * pos, 1, d_model))
    return out.reshape(batch, pos, -1)


def _classifier(model: nn.Module, features: Tensor) -> Tensor:
    logits: Tensor = _module(model, "classifier")(features)
    return logits


# Heads on every position, one per family. Dropout is left out: attributions are
# computed in eval semantics, where dropout is the identity.
def _bert_head(model: nn.Module, hidden: Tensor) -> Tensor:
    pooled = _first_token_head(_module(model, "bert.pooler"), hidden)
    return _classifier(model, pooled)


def _classification_head(model: nn.Module, hidden: Tensor) -> Tensor:
    # RobertaClassificationHead / ElectraClassificationHead read features[:, 0, :].
    return _first_token_head(_module(model, "classifier"), hidden)


def _albert_head(model: nn.Module, hidden: Tensor) -> Tensor:
    pooler = nn.Sequential(
        _module(model, "albert.pooler"), _module(model, "albert.pooler_activation")
    )
    return _classifier(model, pooler(hidden))


def _deberta_head(model: nn.Module, hidden: Tensor) -> Tensor:
    pooled = _first_token_head(_module(model, "pooler"), hidden)
    return _classifier(model, pooled)


def _distilbert_head(model: nn.Module, hidden: Tensor) -> Tensor:
    pre_classifier = _module(model, "pre_classifier")
    return _classifier(model, torch.relu(pre_classifier(hidden)))


def _score_head(model: nn.Module, hidden: Tensor) -> Tensor:
    logits: Tensor = _module(model, "score")(hidden)
    return logits


# Masked-LM heads of the *ForMaskedLM classes (hidden -> vocabulary logits).
def _distilbert_mlm_head(model: nn.Module) -> nn.Module:
    names = ("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector")
    return nn.Sequential(*(_module(model, name) for name in names))


def _electra_mlm_head(model: nn.Module) -> nn.Module:
    names = ("generator_predictions", "generator_lm_head")
    return nn.Sequential(*(_module(model, name) for name in names))


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
    lm_head="lm_head",
)
_register(_GPT2, "gpt2")
# The same decoder-only model, under other module names (Gemma scales its
# embeddings inside embed_tokens, so hidden_states[0] is still its output).
_LLAMA = replace(
    _GPT2,
    name="llama",
    embedding_output=("embed_tokens",),
    blocks="layers",
    final_output="norm",
    pre_norm=_LLAMA_PRE_NORM,
)
_register(_LLAMA, "llama", "mistral", "qwen2", "qwen3")
_register(replace(_LLAMA, name="gemma", pre_norm=_GEMMA_PRE_NORM), "gemma")


# Vision transformers (pre-LN encoders): their sequence is the class token(s),
# then the patches. "layernorm" is the state the classifier reads (Hugging Face
# reports the last block's output as hidden_states[L]).
_VIT = _Family(
    name="vit",
    embedding_output=("embeddings",),
    blocks="layers",
    final_output="layernorm",
    pre_norm=_VIT_PRE_NORM,
    head=_classifier,
    attention="attention",
    images=True,
    class_tokens=1,
)
_register(_VIT, "vit")
_register(replace(_VIT, name="deit", class_tokens=2), "deit")


def supported_families() -> List[str]:
    r"""The ``config.model_type`` values that have an adapter."""
    return sorted(_FAMILIES)


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


def _require_classifier(model: nn.Module, family: _Family) -> None:
    r"""A masked-LM or a bare ``*Model`` has no classification head."""
    if not _has_classifier(model, family):
        raise UnsupportedModelError(
            f"{type(model).__name__} has no sequence-classification head; "
            "load it with AutoModelForSequenceClassification"
        )


def _find_lm_head(model: nn.Module, family: _Family) -> Optional[nn.Module]:
    r"""The LM head of a causal LM, or None (a bare ``*Model``, a classifier)."""
    if family.lm_head is None or not hasattr(model, family.lm_head):
        return None
    return _module(model, family.lm_head)


def _has_classifier(model: nn.Module, family: _Family) -> bool:
    return hasattr(model, family.classifier)


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

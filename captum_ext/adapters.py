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
- ``classification_position(...)``: where the model reads its prediction from
  ([CLS]/<s>, or the last non-pad token for causal classifiers);
- ``mlm_head()``: the masked-LM head of a ``*ForMaskedLM`` model, if any.

Families are recognised by ``config.model_type`` (never by ``isinstance``). A model
of an unknown family gets a :class:`UnsupportedModelError` naming what is missing.
"""

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import nn, Tensor

__all__ = [
    "BlockParts",
    "ModelAdapter",
    "UnsupportedModelError",
    "get_adapter",
    "supported_families",
]


class UnsupportedModelError(ValueError):
    r"""Raised when a model (or one of its parts) is not supported by a method."""


@dataclass(frozen=True)
class BlockParts:
    r"""Modules of one post-LN encoder block used by norm-based decompositions.

    ``value`` maps ``[batch, pos, d_model] -> [batch, pos, heads * head_dim]``
    (bias included); ``attention_output`` is the projection after the heads
    (``W_O``, ``b_O``); ``layernorm1`` follows attention + residual, ``layernorm2``
    follows feed-forward + residual.
    """

    value: nn.Linear
    attention_output: nn.Linear
    layernorm1: nn.LayerNorm
    layernorm2: nn.LayerNorm


def _get(root: nn.Module, path: str) -> nn.Module:
    module = root
    for name in path.split("."):
        if name.isdigit():
            module = module[int(name)]  # type: ignore[index]
        else:
            module = getattr(module, name)
    return module


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
    pooled = _first_token_head(model.bert.pooler, hidden)
    return model.classifier(pooled)


def _classification_head(model: nn.Module, hidden: Tensor) -> Tensor:
    # RobertaClassificationHead / ElectraClassificationHead read features[:, 0, :].
    return _first_token_head(model.classifier, hidden)


def _albert_head(model: nn.Module, hidden: Tensor) -> Tensor:
    pooled = model.albert.pooler_activation(model.albert.pooler(hidden))
    return model.classifier(pooled)


def _deberta_head(model: nn.Module, hidden: Tensor) -> Tensor:
    return model.classifier(_first_token_head(model.pooler, hidden))


def _distilbert_head(model: nn.Module, hidden: Tensor) -> Tensor:
    return model.classifier(torch.relu(model.pre_classifier(hidden)))


def _score_head(model: nn.Module, hidden: Tensor) -> Tensor:
    return model.score(hidden)


# Masked-LM heads of the *ForMaskedLM classes (hidden -> vocabulary logits).
def _distilbert_mlm_head(model: nn.Module) -> nn.Module:
    return nn.Sequential(
        model.vocab_transform,
        model.activation,
        model.vocab_layer_norm,
        model.vocab_projector,
    )


def _electra_mlm_head(model: nn.Module) -> nn.Module:
    return nn.Sequential(model.generator_predictions, model.generator_lm_head)


@dataclass(frozen=True)
class _Family:
    name: str
    # module paths relative to ``model.base_model``
    embedding_output: Tuple[str, ...]  # first path that exists wins
    blocks: Optional[str]  # None: weights shared across layers (ALBERT)
    final_output: Optional[str]  # hidden_states[L] when it is not the last block
    parts: Optional[Tuple[str, str, str, str]]  # value, attn out, LN1, LN2
    head: Optional[Callable[[nn.Module, Tensor], Tensor]]
    causal: bool = False
    mlm_head_paths: Tuple[str, ...] = ()  # on the full model
    mlm_head_builders: Tuple[Callable[[nn.Module], nn.Module], ...] = ()


_BERT_PARTS = (
    "attention.self.value",
    "attention.output.dense",
    "attention.output.LayerNorm",
    "output.LayerNorm",
)

_FAMILIES: Dict[str, _Family] = {}


def _register(family: _Family, *model_types: str) -> None:
    for model_type in model_types:
        _FAMILIES[model_type] = family


_register(
    _Family(
        "bert",
        ("embeddings",),
        "encoder.layer",
        None,
        _BERT_PARTS,
        _bert_head,
        mlm_head_paths=("cls",),
    ),
    "bert",
)
_register(
    _Family(
        "roberta",
        ("embeddings",),
        "encoder.layer",
        None,
        _BERT_PARTS,
        _classification_head,
        mlm_head_paths=("lm_head",),
    ),
    "roberta",
    "xlm-roberta",
    "camembert",
)
_register(
    _Family(
        "electra",
        ("embeddings_project", "embeddings"),
        "encoder.layer",
        None,
        _BERT_PARTS,
        _classification_head,
        mlm_head_builders=(_electra_mlm_head,),
    ),
    "electra",
)
_register(
    _Family(
        "distilbert",
        ("embeddings",),
        "transformer.layer",
        None,
        ("attention.v_lin", "attention.out_lin", "sa_layer_norm", "output_layer_norm"),
        _distilbert_head,
        mlm_head_builders=(_distilbert_mlm_head,),
    ),
    "distilbert",
)
_register(
    _Family(
        "albert",
        ("encoder.embedding_hidden_mapping_in",),
        None,
        None,
        None,
        _albert_head,
        mlm_head_paths=("predictions",),
    ),
    "albert",
)
_register(
    _Family(
        "deberta-v2",
        ("embeddings",),
        "encoder.layer",
        None,
        None,
        _deberta_head,
        mlm_head_paths=("cls", "lm_predictions"),
    ),
    "deberta-v2",
)
_register(
    _Family("gpt2", ("drop",), "h", "ln_f", None, _score_head, causal=True),
    "gpt2",
)
_register(
    _Family("llama", ("embed_tokens",), "layers", "norm", None, _score_head, True),
    "llama",
    "mistral",
    "qwen2",
)


def supported_families() -> List[str]:
    r"""The ``config.model_type`` values that have an adapter."""
    return sorted(_FAMILIES)


class ModelAdapter:
    r"""What the attribution methods need from one Hugging Face model.

    Build it with :func:`get_adapter`. The adapter never changes the model.
    """

    def __init__(self, model: nn.Module, family: _Family) -> None:
        self.model = model
        self.config = model.config
        self.family = family.name
        self._family = family

    # ----------------------------------------------------------------- sizes
    @property
    def base_model(self) -> nn.Module:
        return self.model.base_model

    @property
    def num_layers(self) -> int:
        cfg = self.config
        return int(getattr(cfg, "num_hidden_layers", None) or cfg.n_layers)

    @property
    def num_heads(self) -> int:
        cfg = self.config
        return int(getattr(cfg, "num_attention_heads", None) or cfg.n_heads)

    @property
    def hidden_size(self) -> int:
        cfg = self.config
        return int(getattr(cfg, "hidden_size", None) or cfg.dim)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def num_labels(self) -> int:
        return int(self.config.num_labels)

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1

    @property
    def is_causal(self) -> bool:
        return self._family.causal

    @property
    def max_positions(self) -> Optional[int]:
        cfg = self.config
        for name in ("max_position_embeddings", "n_positions"):
            value = getattr(cfg, name, None)
            if value:
                # RoBERTa reserves padding_idx + 1 positions before the first token.
                if self.family == "roberta" and cfg.pad_token_id is not None:
                    return int(value) - int(cfg.pad_token_id) - 1
                return int(value)
        return None

    @property
    def pad_token_id(self) -> Optional[int]:
        return self.config.pad_token_id

    # --------------------------------------------------------------- modules
    def word_embeddings(self) -> nn.Embedding:
        r"""The input word-embedding table (``get_input_embeddings()``)."""
        return self.model.get_input_embeddings()

    def blocks(self) -> List[nn.Module]:
        r"""The transformer blocks, first to last."""
        if self._family.blocks is None:
            raise UnsupportedModelError(
                f"{self.family}: blocks share their weights across layers, so no "
                "single module holds one layer; this method needs one module per "
                "layer."
            )
        return list(_get(self.base_model, self._family.blocks))

    def check_layer(self, layer: int) -> int:
        r"""Validates a ``hidden_states`` index; negative indices count from L."""
        n = self.num_layers
        if not isinstance(layer, int) or isinstance(layer, bool):
            raise TypeError(
                f"layer must be an int index into hidden_states, got {layer!r}"
            )
        if not -(n + 1) <= layer <= n:
            raise IndexError(
                f"layer {layer} is out of range: hidden_states has indices 0..{n} "
                f"(0 = embedding output, {n} = last block) for this {n}-layer model"
            )
        return layer % (n + 1)

    def embedding_output_module(self) -> nn.Module:
        r"""The module whose output is ``hidden_states[0]``."""
        for path in self._family.embedding_output:
            try:
                return _get(self.base_model, path)
            except AttributeError:
                continue
        raise UnsupportedModelError(
            f"{self.family}: none of {self._family.embedding_output} exists on the "
            "base model; cannot locate the embedding output"
        )

    def hidden_state_module(self, layer: int) -> nn.Module:
        r"""The module whose forward output equals ``hidden_states[layer]``.

        Index 0 is the embedding output and ``L`` the last block's output (after the
        final norm for causal models, as Hugging Face reports it).
        """
        layer = self.check_layer(layer)
        if layer == 0:
            return self.embedding_output_module()
        if layer == self.num_layers and self._family.final_output is not None:
            return _get(self.base_model, self._family.final_output)
        return self.blocks()[layer - 1]

    def block_parts(self, layer: int) -> BlockParts:
        r"""Value projection, attention output projection and both LayerNorms of
        block ``layer`` (1-based like ``hidden_states``: block ``l`` maps
        ``hidden_states[l-1]`` to ``hidden_states[l]``)."""
        if self._family.parts is None:
            raise UnsupportedModelError(
                f"{self.family} is not a post-LayerNorm encoder with separate "
                "value/output projections and two LayerNorms per block, so the "
                "norm-based decomposition is not defined for it; supported: "
                + ", ".join(sorted(k for k, f in _FAMILIES.items() if f.parts))
            )
        layer = self.check_layer(layer)
        if layer == 0:
            raise IndexError("block_parts takes a block index 1..L, not 0")
        block = self.blocks()[layer - 1]
        return BlockParts(*(_get(block, path) for path in self._family.parts))

    # ------------------------------------------------------------------ heads
    def head_on_every_position(self, hidden: Tensor) -> Tensor:
        r"""The classification head applied to every position.

        Args:
            hidden (Tensor): ``[batch, pos, d_model]``, the final hidden states
                ``hidden_states[L]``.
        Returns:
            Tensor ``[batch, pos, num_labels]``. At :meth:`classification_position`
            it equals the model's own logits.
        """
        if self._family.head is None or not self._has_classifier():
            raise UnsupportedModelError(
                f"{type(self.model).__name__} has no sequence-classification head; "
                "load it with AutoModelForSequenceClassification"
            )
        return self._family.head(self.model, hidden)

    def _has_classifier(self) -> bool:
        return hasattr(self.model, "classifier") or hasattr(self.model, "score")

    def classification_position(
        self, input_ids: Tensor, attention_mask: Optional[Tensor] = None
    ) -> Tensor:
        r"""Index ``[batch]`` of the position the model classifies from.

        Encoders read position 0. Causal classifiers read the rightmost token that
        is not ``pad_token_id`` (Hugging Face's own rule); without a pad id, the last
        attended position.
        """
        batch, pos = input_ids.shape
        if not self.is_causal:
            return torch.zeros(batch, dtype=torch.long, device=input_ids.device)
        index = torch.arange(pos, device=input_ids.device)
        if self.pad_token_id is not None:
            keep = input_ids != self.pad_token_id
        elif attention_mask is not None:
            keep = attention_mask.bool()
        else:
            return torch.full((batch,), pos - 1, device=input_ids.device)
        return (index * keep).argmax(-1)

    def special_positions(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        r"""Boolean ``[batch, pos]``: attended positions holding a special token
        (ids from :meth:`special_token_ids`)."""
        special = torch.tensor(self.special_token_ids(), device=input_ids.device)
        return attention_mask.bool() & torch.isin(input_ids, special)

    def check_head_reproduces(self, head_logits: Tensor, model_logits: Tensor) -> None:
        r"""Raises :class:`UnsupportedModelError` unless the adapter's head at the
        classification position (``head_logits`` ``[batch, C]``) reproduces the
        model's own logits ``[batch, C]``: a non-standard head (mean pooling, a
        custom subclass) would otherwise give silently wrong attributions."""
        scale = model_logits.abs().max().clamp_min(1.0)
        error = float((head_logits - model_logits).abs().max() / scale)
        if error > 1e-3:
            raise UnsupportedModelError(
                f"{type(self.model).__name__}'s classification head is not the "
                f"standard {self.family} head: applied at the classification "
                f"position it gives logits that differ from the model's own by "
                f"{error:.2g} (relative); methods that apply the head to every "
                "position (LogAt, NormXLogit) cannot explain this model"
            )

    def mlm_head(self) -> Optional[nn.Module]:
        r"""The masked-LM head (hidden -> vocabulary logits), or ``None``."""
        for path in self._family.mlm_head_paths:
            if hasattr(self.model, path):
                return getattr(self.model, path)
        for build in self._family.mlm_head_builders:
            try:
                return build(self.model)
            except AttributeError:
                continue
        return None

    # -------------------------------------------------------------- checks
    def require_attention_weights(self, method: str) -> None:
        r"""Raises if the model's attention implementation returns no weights."""
        impl = getattr(self.config, "_attn_implementation", None) or "eager"
        if impl != "eager":
            raise ValueError(
                f"{method} needs attention weights, but this model uses "
                f"attn_implementation={impl!r}, which returns none. Load it with "
                "from_pretrained(..., attn_implementation='eager') or call "
                "model.set_attn_implementation('eager'); captum_ext never changes "
                "the model for you."
            )

    def special_token_ids(self, tokenizer: Optional[object] = None) -> List[int]:
        r"""Special-token ids: the tokenizer's when given, else the config's."""
        if tokenizer is not None:
            return sorted(set(tokenizer.all_special_ids))  # type: ignore[attr-defined]
        names = (
            "pad_token_id",
            "bos_token_id",
            "eos_token_id",
            "sep_token_id",
            "cls_token_id",
        )
        ids = {getattr(self.config, name, None) for name in names}
        return sorted(i for i in ids if isinstance(i, int))

    def forward_kwargs(
        self, attention_mask: Optional[Tensor], token_type_ids: Optional[Tensor]
    ) -> Dict[str, Tensor]:
        r"""Keyword arguments for ``model(input_ids, **kwargs)``."""
        kwargs: Dict[str, Tensor] = {}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        return kwargs


def get_adapter(model: nn.Module) -> ModelAdapter:
    r"""Returns the :class:`ModelAdapter` of a Hugging Face model.

    Raises:
        UnsupportedModelError: the model has no ``config.model_type`` or its family
            has no adapter.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type is None:
        raise UnsupportedModelError(
            f"{type(model).__name__} has no Hugging Face config with a model_type; "
            "captum_ext methods take a transformers PreTrainedModel"
        )
    family = _FAMILIES.get(model_type)
    if family is None:
        raise UnsupportedModelError(
            f"no architecture adapter for model_type={model_type!r} "
            f"({type(model).__name__}); supported: {', '.join(supported_families())}. "
            "Add one in captum_ext/adapters.py (see CONTRIBUTING.md)."
        )
    return ModelAdapter(model, family)

#!/usr/bin/env python3
r"""The :class:`ModelAdapter` of one Hugging Face model and :func:`get_adapter`,
which finds its family (see :mod:`captum_ext.adapters.families`)."""

from typing import Any, List, Optional

import torch
from torch import nn, Tensor

from captum_ext.adapters.attention import AttentionCapture
from captum_ext.adapters.errors import UnsupportedModelError
from captum_ext.adapters.families import (
    _block_parts,
    _blocks,
    _embedding_output,
    _FAMILIES,
    _Family,
    _find_lm_head,
    _find_mlm_head,
    _has_classifier,
    _module,
    _part_paths,
    _pre_norm_paths,
    _require_classifier,
    BlockParts,
    supported_families,
)
from captum_ext.adapters.layout import _token_layout
from captum_ext.adapters.placement import execution_device
from captum_ext.adapters.pre_norm import (
    _named_part,
    _pre_norm_parts,
    NormParams,
    PreNormParts,
)
from captum_ext.adapters.wrappers import unwrap_model


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
        # For messages: the model's own type (a family record serves several).
        self.family_name: str = getattr(self.config, "model_type", "") or family.name
        # What captum_ext knows about the family: module paths, heads, layout.
        self._family_record = family
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
        # Decided from the modules the model has, never from its class.
        self.is_classifier = _has_classifier(model, family)
        # A vision transformer: pixel_values in, class token(s) then patches out.
        self.reads_images = family.images
        self.class_tokens = family.class_tokens
        # A next-token model: an LM head and no sequence-classification head.
        self.is_causal_lm = (
            family.causal
            and _find_lm_head(model, family) is not None
            and not self.is_classifier
        )

    def word_embeddings(self) -> nn.Embedding:
        r"""The input word-embedding table (``get_input_embeddings()``)."""
        table: nn.Embedding = getattr(self.model, "get_input_embeddings")()
        return table

    def input_device(self) -> torch.device:
        r"""Where token ids go: the device that embeds them, i.e. the execution
        device of the word embeddings (accelerate's hook on a model placed with
        ``device_map`` or offloaded, whose parameters may be on ``meta``)."""
        return execution_device(self.word_embeddings())

    def check_layer(self, layer: int) -> int:
        r"""Validates a ``hidden_states`` index; negative indices count from L."""
        return _check_layer(layer, self.num_layers)

    def embedding_output_module(self) -> nn.Module:
        r"""The module whose output is ``hidden_states[0]``."""
        return _embedding_output(self.base_model, self._family_record)

    def hidden_state_module(self, layer: int) -> nn.Module:
        r"""The module whose output is ``hidden_states[layer]`` (for ``L``, the
        final norm of causal models, as Hugging Face reports it)."""
        layer, final = self.check_layer(layer), self._family_record.final_output
        if layer == 0:
            return self.embedding_output_module()
        if layer == self.num_layers and final is not None:
            return _module(self.base_model, final)
        return _blocks(self.base_model, self._family_record)[layer - 1]

    def blocks(self) -> List[nn.Module]:
        r"""The L blocks, first first: block ``l`` maps ``hidden_states[l-1]``
        to the block output (``hidden_states[l]`` but for a causal model's
        last block, whose output passes the final norm first)."""
        return _blocks(self.base_model, self._family_record)

    def attention_modules(self) -> List[nn.Module]:
        r"""Per block 1..L, its attention module, whose output is ``(output,
        probabilities)`` in eager attention; :class:`UnsupportedModelError`
        where the family table does not name it."""
        path = self._family_record.attention
        if path is None:
            raise UnsupportedModelError(
                f"{self.family_name}'s adapter does not name its attention "
                "modules; build the method from forward_func and its modules"
            )
        return [_module(block, path) for block in self.blocks()]

    def classifier_module(self) -> nn.Module:
        r"""The classification head's module on the full model (a vision
        transformer's applies to every position as it is)."""
        _require_classifier(self.model, self._family_record)
        return _module(self.model, self._family_record.classifier)

    def block_parts(self, layer: int) -> BlockParts:
        r"""The :class:`BlockParts` of block ``layer`` (1..L: block ``l`` maps
        ``hidden_states[l-1]`` to ``hidden_states[l]``)."""
        paths, index = _part_paths(self._family_record), self.check_layer(layer)
        if index == 0:
            raise IndexError("block_parts takes a block index 1..L, not 0")
        block = _blocks(self.base_model, self._family_record)[index - 1]
        return _block_parts(block, paths, f"{self.family_name} block {index}")

    def pre_norm_parts(self, layer: int) -> PreNormParts:
        r"""The :class:`PreNormParts` of block ``layer`` (1..L) of a pre-LN
        decoder; :class:`UnsupportedModelError` for other families or a block
        that lacks a part."""
        paths = _pre_norm_paths(self._family_record)
        index = self.check_layer(layer)
        if index == 0:
            raise IndexError("pre_norm_parts takes a block index 1..L, not 0")
        block = _blocks(self.base_model, self._family_record)[index - 1]
        return _pre_norm_parts(block, paths, f"{self.family_name} block {index}")

    def attention_input_modules(self) -> Optional[List[nn.Module]]:
        r"""Per block 1..L, the module whose output the block's attention reads:
        a pre-LN decoder's first norm (its block input, rescaled per position).
        None where every block's attention reads the block's input
        ``hidden_states[l-1]`` itself (post-LN encoders, whose hidden states
        are LayerNorm outputs); :class:`UnsupportedModelError` for a decoder
        whose first norms the adapter does not know."""
        paths, family = self._family_record.pre_norm, self._family_record
        if paths is None and family.causal:
            raise UnsupportedModelError(
                f"{family.name} is a decoder whose blocks' first norms are not "
                "in its adapter's pre-LN table, so what each block's attention "
                "reads is unknown (CAT/AttCAT layers='attention_inputs'); pass "
                "layers='inputs' or add the family's pre_norm paths"
            )
        if paths is None:
            return None
        blocks = _blocks(self.base_model, self._family_record)
        return [
            _named_part(block, paths.norm1, f"{self.family_name} block {index}")
            for index, block in enumerate(blocks, start=1)
        ]

    def final_norm(self) -> NormParams:
        r"""The norm after the last block of a pre-LN decoder (its output is
        ``hidden_states[L]``)."""
        paths = _pre_norm_paths(self._family_record)
        final = self._family_record.final_output
        what = f"{self.family_name}'s final norm {final!r}"
        return paths.norm(_named_part(self.base_model, str(final), what), what)

    def head_on_every_position(self, hidden: Tensor) -> Tensor:
        r"""The classification head on every position of ``hidden_states[L]``:
        ``[batch, pos, d_model] -> [batch, pos, num_labels]``; at the
        classification position it equals the model's logits (see
        :func:`check_head_reproduces`). Raises :class:`UnsupportedModelError`
        for a model without a sequence-classification head."""
        _require_classifier(self.model, self._family_record)
        return self._family_record.head(self.model, hidden)

    def mlm_head(self) -> Optional[nn.Module]:
        r"""The masked-LM head (hidden -> vocabulary logits), or ``None``."""
        return _find_mlm_head(self.model, self._family_record)

    def lm_head_on_every_position(
        self, hidden: Tensor, layer: Optional[int] = None
    ) -> Tensor:
        r"""The causal LM's own next-token head, final norm then LM head, on
        every position: ``[batch, pos, d_model] -> [batch, pos, vocab]``.

        ``hidden`` is ``hidden_states[layer]``. Hugging Face reports
        ``hidden_states[L]`` of GPT-2 and Llama-style models *after* the final
        norm (``ln_f`` / ``norm``), so for ``layer`` = L (or -1) only the LM head
        is applied: the norm must not be applied twice. For an earlier layer, or
        ``layer=None`` (a residual-stream state that has not passed the final
        norm, e.g. a block's output), the final norm comes first, as in the
        model. Raises :class:`UnsupportedModelError` unless the model is a causal
        LM (:attr:`is_causal_lm`)."""
        self.require_causal_lm("lm_head_on_every_position")
        if layer is None or self.check_layer(layer) < self.num_layers:
            hidden = self.hidden_state_module(self.num_layers)(hidden)
        head = _find_lm_head(self.model, self._family_record)
        logits: Tensor = head(hidden)  # type: ignore[misc]
        return logits

    def require_causal_lm(self, method: str) -> None:
        r"""Raises :class:`UnsupportedModelError`, naming what is missing, unless
        the model is a decoder-only causal LM with an LM head."""
        if self.is_causal_lm:
            return
        name, record = type(self.model).__name__, self._family_record
        if not record.causal:
            kind = "a masked LM" if self.mlm_head() is not None else "an encoder"
            reason = (
                f"is {kind} ({self.family_name}), which reads every token in both "
                "directions and predicts no next token"
            )
        elif self.is_classifier:
            reason = (
                "is a sequence classifier, which takes one class per example "
                "(target [batch]), not continuation ids [batch, T]"
            )
        else:
            reason = "has no LM head (a bare base model)"
        raise UnsupportedModelError(
            f"{method} explains generated text with a causal LM, but {name} "
            f"{reason}; load a decoder-only model with AutoModelForCausalLM "
            f"(families: {', '.join(_causal_lm_families())})"
        )

    def attention_capture(self, method: str) -> AttentionCapture:
        r"""An :class:`~captum_ext.adapters.attention.AttentionCapture` of this
        model's blocks for one forward pass: every block's attention
        probabilities, from eager attention maps or from the query and key of
        any implementation of transformers' attention interface (sdpa, flash),
        without changing the model."""
        return AttentionCapture(self.model, self.num_layers, method)


def _causal_lm_families() -> List[str]:
    return sorted(k for k, record in _FAMILIES.items() if record.lm_head)


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
            f"standard {adapter.family_name} head: at the classification position it "
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
            "Add one in captum_ext/adapters/families.py (see CONTRIBUTING.md)."
        )
    return ModelAdapter(inner, family)

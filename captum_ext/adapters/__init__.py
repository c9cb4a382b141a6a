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

The package: :mod:`~captum_ext.adapters.families` (the family table and heads),
:mod:`~captum_ext.adapters.wrappers` (peft / compile / DDP unwrapping),
:mod:`~captum_ext.adapters.layout` (:class:`TokenLayout`),
:mod:`~captum_ext.adapters.pre_norm` (pre-LayerNorm decoder blocks, for GlobEnc),
:mod:`~captum_ext.adapters.placement` (models placed by accelerate: where a
module runs, its weights read through accelerate's hooks) and
:mod:`~captum_ext.adapters.model_adapter` (:class:`ModelAdapter`,
:func:`get_adapter`).

Wrapped models are seen through (:func:`unwrap_model`): a ``peft`` ``PeftModel``
(LoRA merged or not; the adapter layers stay inside the inner model), the
``OptimizedModule`` of ``torch.compile`` and ``DataParallel`` /
``DistributedDataParallel``. ``adapter.model`` is then the inner Hugging Face model,
which the methods hook and run (uncompiled, on its own device), so attributions
equal those of the unwrapped model.
"""

from captum_ext.adapters.attention import AttentionCapture, AttentionInputs
from captum_ext.adapters.errors import UnsupportedModelError
from captum_ext.adapters.families import BlockParts, supported_families
from captum_ext.adapters.layout import TokenLayout
from captum_ext.adapters.model_adapter import (
    check_head_reproduces,
    get_adapter,
    ModelAdapter,
)
from captum_ext.adapters.placement import execution_device, read_parameter
from captum_ext.adapters.pre_norm import NormParams, PreNormParts
from captum_ext.adapters.wrappers import unwrap_model

__all__ = [
    "AttentionCapture",
    "AttentionInputs",
    "BlockParts",
    "NormParams",
    "PreNormParts",
    "ModelAdapter",
    "TokenLayout",
    "check_head_reproduces",
    "execution_device",
    "UnsupportedModelError",
    "get_adapter",
    "read_parameter",
    "supported_families",
    "unwrap_model",
]

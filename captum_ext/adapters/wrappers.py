#!/usr/bin/env python3
r"""Wrapped models seen through: a ``peft`` ``PeftModel`` (LoRA merged or not; the
adapter layers stay inside the inner model), the ``OptimizedModule`` of
``torch.compile`` and ``DataParallel`` / ``DistributedDataParallel``. The methods
hook and run the inner Hugging Face model (uncompiled, on its own device), so
attributions equal those of the unwrapped model."""

from typing import Any, Optional

from torch import nn

from captum_ext.adapters.errors import UnsupportedModelError


def _inner_model(model: nn.Module) -> Optional[nn.Module]:
    r"""The model one wrapper level down, or None if ``model`` wraps nothing known."""
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        module: nn.Module = model.module
        return module
    compiled = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule
    if isinstance(compiled, nn.Module):
        return compiled
    # peft's PeftModel (duck-typed: peft is not a dependency). get_base_model()
    # returns the transformers model with the LoRA layers injected in place.
    if hasattr(model, "peft_config") and callable(
        getattr(model, "get_base_model", None)
    ):
        _check_not_prompt_learning(model)
        base: nn.Module = model.get_base_model()  # type: ignore[operator]
        return base
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

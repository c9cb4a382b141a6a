#!/usr/bin/env python3
r"""Models placed by accelerate (``device_map``, ``dispatch_model``,
``cpu_offload``, disk offload): where a module runs and what its weights are.

accelerate attaches an ``AlignDevicesHook`` (``module._hf_hook``) to each module
it places. The hook's ``execution_device`` is where the module computes, and
with offloading its parameters stay on the ``meta`` device (no data) except
during the module's own forward pass, when the hook loads them from CPU memory
or disk. So a method sends its inputs to the execution device of the module
that embeds them and reads a weight inside accelerate's
``align_module_device``, which loads it the way the forward pass does. accelerate
is not a dependency: it is imported only for a module that carries its hook."""

from contextlib import nullcontext
from typing import Any, ContextManager, Optional

import torch
from torch import nn, Tensor

from captum_ext.adapters.errors import UnsupportedModelError


def _align_hook(module: nn.Module) -> Optional[Any]:
    r"""accelerate's ``AlignDevicesHook`` of ``module`` (also inside a
    ``SequentialHook``), or None: duck-typed, accelerate need not be installed."""
    hook = getattr(module, "_hf_hook", None)
    for candidate in (hook, *getattr(hook, "hooks", ())):
        if getattr(candidate, "execution_device", None) is not None:
            return candidate
    return None


def execution_device(module: nn.Module) -> torch.device:
    r"""Where ``module`` computes: its accelerate hook's execution device, else
    the device of its first parameter or buffer that holds data (CPU if none
    does)."""
    hook = _align_hook(module)
    if hook is not None:
        device = hook.execution_device
        # accelerate takes a GPU index as well as a device or its name.
        if isinstance(device, int):
            return torch.device("cuda", device)
        return torch.device(device)
    for tensor in (*module.parameters(), *module.buffers()):
        if not tensor.is_meta:
            return tensor.device
    return torch.device("cpu")


def _weights_loaded(module: nn.Module) -> ContextManager[Any]:
    r"""accelerate's ``align_module_device(module)`` where a hook offloads
    ``module``'s parameters; nothing otherwise."""
    if not getattr(_align_hook(module), "offload", False):
        return nullcontext()
    from accelerate.utils import align_module_device

    loaded: ContextManager[Any] = align_module_device(module)
    return loaded


def read_parameter(module: nn.Module, name: str) -> Optional[Tensor]:
    r"""``module``'s own parameter ``name`` (None if it has none), detached, with
    its data: loaded by accelerate's hook where the module is offloaded (the
    tensor stays valid after the hook puts the module back on ``meta``). Raises
    :class:`UnsupportedModelError` for a parameter on ``meta`` that no hook
    loads, rather than computing with a tensor that has no data."""
    with _weights_loaded(module):
        value = getattr(module, name, None)
    if value is None:
        return None
    if value.is_meta:
        raise UnsupportedModelError(
            f"the {name} of {type(module).__name__} is on the meta device and no "
            "accelerate offload hook of that module loads it; place the model with "
            "accelerate (device_map, dispatch_model, cpu_offload) or load its "
            "weights"
        )
    detached: Tensor = value.detach()
    return detached

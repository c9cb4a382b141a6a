#!/usr/bin/env python3
r"""Hook lifetimes as context managers: whatever a method registers is removed when
its ``with`` block ends, also when the block raises."""

import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Tuple

from torch import nn, Tensor
from torch.utils.hooks import RemovableHandle

__all__ = ["HookSet", "eval_semantics"]


class HookSet:
    r"""Registers hooks and removes all of them on exit.

    Example::

        with HookSet() as hooks:
            values = hooks.capture_output(block.attention.self.value)
            model(input_ids)
        # hooks are gone here, whatever happened inside
    """

    def __init__(self) -> None:
        self._handles: List[RemovableHandle] = []

    def __enter__(self) -> "HookSet":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.remove()

    def remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()

    def forward(self, module: nn.Module, hook: Callable[..., Any]) -> None:
        self._handles.append(module.register_forward_hook(hook))

    def forward_pre(self, module: nn.Module, hook: Callable[..., Any]) -> None:
        self._handles.append(module.register_forward_pre_hook(hook))

    def capture_output(self, module: nn.Module) -> List[Tensor]:
        r"""Appends ``module``'s output tensor (first element of a tuple) per call."""
        store: List[Tensor] = []

        def hook(_module: nn.Module, _inputs: Tuple[Any, ...], output: Any) -> None:
            store.append(output[0] if isinstance(output, tuple) else output)

        self.forward(module, hook)
        return store

    def capture_input(self, module: nn.Module) -> List[Tensor]:
        r"""Appends ``module``'s first positional input per call."""
        store: List[Tensor] = []

        def hook(_module: nn.Module, inputs: Tuple[Any, ...]) -> None:
            store.append(inputs[0])

        self.forward_pre(module, hook)
        return store

    def make_output_require_grad(self, module: nn.Module) -> None:
        r"""Makes ``module``'s output part of the autograd graph even when every
        parameter before it is frozen, so gradients w.r.t. later hidden states
        exist. Parameters' ``requires_grad`` flags are not touched."""

        def hook(_module: nn.Module, _inputs: Tuple[Any, ...], output: Any) -> Any:
            if isinstance(output, Tensor) and not output.requires_grad:
                return output.detach().requires_grad_()
            return None

        self.forward(module, hook)


@contextmanager
def eval_semantics(model: nn.Module) -> Iterator[None]:
    r"""Runs the block with every submodule in eval mode, then restores each
    submodule's own ``training`` flag. Warns when the model was in training mode
    (a leaf module, such as a dropout, was), because attributions of a
    dropout-perturbed forward are not reproducible; the flag of a wrapper that
    holds the model (e.g. :class:`~captum_ext.ClassifierLogits`) is ignored."""
    modes = [(module, module.training) for module in model.modules()]
    if any(m.training for m in model.modules() if next(m.children(), None) is None):
        warnings.warn(
            "the model is in training mode; captum_ext runs it in eval "
            "semantics (no dropout) and restores the mode afterwards. Call "
            "model.eval() to silence this warning.",
            stacklevel=3,
        )
    try:
        model.eval()
        yield
    finally:
        for module, training in modes:
            module.training = training

#!/usr/bin/env python3
r"""Hook lifetimes and exclusive use of a model, as context managers.

:class:`HookSet`: whatever a method registers is removed when its ``with`` block
ends, also when the block raises.

:func:`eval_semantics`: every method and metric runs its model inside it. It
holds the model's lock (:func:`model_lock`) for the whole block, puts the model in
eval mode and restores every submodule's ``training`` flag on exit.

Thread safety: a forward hook fires on every forward pass of its module,
whichever thread runs it, and ``model.eval()`` / ``model.train()`` flip flags that
every thread sees. So two calls on one model from two threads would capture each
other's activations and restore each other's modes. Hooks of a :class:`HookSet`
act only on the forward passes of the thread that registered them, and
:class:`~captum_ext.ClassifierLogits` (``classifier_forward``, what Captum's
methods and the metrics run) holds the model's lock for each forward pass, so a
Captum method or a prediction in another thread neither sees nor disturbs a
captum_ext call. :func:`model_lock` gives each
model one re-entrant lock, and :func:`eval_semantics` holds it while a method
registers hooks, runs the model and removes them: calls on one model from several
threads are serialised (each gives exactly its single-threaded result), calls on
different models still run in parallel, and a method that nests
:func:`eval_semantics` (a metric calling a method) re-enters its own lock.

The lock is keyed by the model's first parameter tensor (else first buffer, else
the module), which wrappers share with what they wrap: the Hugging Face model,
:class:`~captum_ext.ClassifierLogits` around it, a ``peft`` ``PeftModel`` and a
``torch.compile`` ``OptimizedModule`` all take the same lock. Not covered: a
metric's ``forward_func`` that is a plain function (not an ``nn.Module``) runs
unlocked, and Captum's hook-based methods (``Layer*``, ``Neuron*``, DeepLift) in
other threads, whose hooks see every thread's passes: run those inside
``with model_lock(model):``. Nested locks are taken outermost model
first (e.g. the explained model, then a decoder module of another model).
"""

import threading
import warnings
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch
from torch import nn, Tensor
from torch.utils.hooks import RemovableHandle

__all__ = ["HookSet", "eval_semantics", "gradients_from", "model_lock", "single_call"]


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

    def forward(
        self, module: nn.Module, hook: Callable[..., Any], with_kwargs: bool = False
    ) -> None:
        self._handles.append(
            module.register_forward_hook(_own_thread(hook), with_kwargs=with_kwargs)
        )

    def forward_pre(
        self, module: nn.Module, hook: Callable[..., Any], with_kwargs: bool = False
    ) -> None:
        self._handles.append(
            module.register_forward_pre_hook(_own_thread(hook), with_kwargs=with_kwargs)
        )

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


def single_call(store: List[Tensor], method: str, what: str) -> Tensor:
    r"""The one tensor a :class:`HookSet` capture ``store`` received in one
    forward pass; a clear error naming ``method`` and the captured ``what``
    where the model ran that module more or less than once."""
    if len(store) != 1:
        raise RuntimeError(
            f"{method} expected one call of {what} per forward pass, "
            f"saw {len(store)}; the model reuses or skips the module (a "
            "TorchScript forward function runs no module hooks)"
        )
    return store[0]


@contextmanager
def gradients_from(module: nn.Module) -> Iterator[None]:
    r"""Runs the block with autograd on and ``module``'s output in the graph
    (:meth:`HookSet.make_output_require_grad`): frozen parameters before it
    would leave the later hidden states out. The hook is removed on exit, also
    when the block raises."""
    with HookSet() as hooks, torch.enable_grad():
        hooks.make_output_require_grad(module)
        yield


def _own_thread(hook: Callable[..., Any]) -> Callable[..., Any]:
    r"""``hook`` acting only on forward passes of the thread that registers it.

    A module's hooks fire on every forward pass, whichever thread runs it: a
    Captum method or a plain prediction in another thread, which takes no
    captum_ext lock while it registers nothing, would otherwise be captured
    (and its output replaced) by a method's hooks."""
    owner = threading.get_ident()

    def in_owner_thread(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != owner:
            return None
        return hook(*args, **kwargs)

    return in_owner_thread


# id(anchor) -> (weak reference to the anchor, its lock). The weak reference
# tells a live anchor from a dead one whose id was reused; dead entries are
# dropped whenever a lock is added, so the table holds about one entry per model.
_LOCKS: Dict[int, Tuple["weakref.ref[Any]", threading.RLock]] = {}
_LOCKS_GUARD = threading.Lock()


def _anchor(model: nn.Module) -> Any:
    r"""The object that every wrapper of ``model`` shares: its first parameter
    (else first buffer, else the module itself)."""
    for tensors in (model.parameters(), model.buffers()):
        first = next(tensors, None)
        if first is not None:
            return first
    return model


def model_lock(model: nn.Module) -> threading.RLock:
    r"""The re-entrant lock of ``model``, shared by every module wrapping the same
    parameters. Hold it to run ``model`` while no captum_ext call on it (in any
    thread) is in progress."""
    anchor = _anchor(model)
    with _LOCKS_GUARD:
        entry = _LOCKS.get(id(anchor))
        if entry is not None and entry[0]() is anchor:
            return entry[1]
        for key in [k for k, (ref, _) in _LOCKS.items() if ref() is None]:
            del _LOCKS[key]
        lock = threading.RLock()
        _LOCKS[id(anchor)] = (weakref.ref(anchor), lock)
        return lock


@contextmanager
def eval_semantics(model: object) -> Iterator[None]:
    r"""Runs the block holding ``model``'s lock (:func:`model_lock`), with every
    submodule in eval mode, then restores each submodule's own ``training`` flag.
    Warns when the model was in training mode (a leaf module, such as a dropout,
    was), because attributions of a dropout-perturbed forward are not
    reproducible; the flag of a wrapper that holds the model (e.g.
    :class:`~captum_ext.ClassifierLogits`) is ignored. Nested blocks in one thread
    re-enter the lock, and the innermost restores the flags it found (eval), the
    outermost the caller's. Anything that is not a module (a plain function
    passed as ``forward_func`` or decoder) has no mode and runs as it is."""
    if not isinstance(model, nn.Module):
        yield
        return
    with model_lock(model):
        modes = [(module, module.training) for module in model.modules()]
        leaves = (m for m in model.modules() if next(m.children(), None) is None)
        if any(m.training for m in leaves):
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

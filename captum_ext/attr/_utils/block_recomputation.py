#!/usr/bin/env python3
r"""Per-target gradients w.r.t. a causal LM's hidden states, one block
recomputed at a time (docs/generation.rst, "Per-block recomputation").

The forward pass runs without a graph and keeps only each block's input
:math:`x_{l-1}` and the arguments it was called with. The walk then goes down
from the top: the final norm and LM head are recomputed on a leaf
:math:`x_L` with gradients and give, for every target step :math:`t`,
:math:`G^t_L = \partial \log p(y_t) / \partial x_L`; block :math:`l` is
recomputed on a leaf :math:`x_{l-1}` and backward passes through its graph
turn :math:`G^t_l` into :math:`G^t_{l-1}` (and the gradients of what the block
computes inside, such as its first norm's output), one recomputation per
block for all T steps. By the chain rule these are the gradients of the whole
graph, while memory holds one block's graph and T gradients of one hidden
state instead of the graph of every block.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn, Tensor

from captum_ext._utils.hooks import HookSet, single_call
from captum_ext.adapters import ModelAdapter, UnsupportedModelError
from captum_ext.adapters.model_adapter import _head_tolerance, _relative_head_error
from captum_ext.attr._utils.backward_passes import (
    backward_passes,
    batched_vjp,
    choose_targets_per_backward,
)
from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = ["BlockRecomputation", "Site"]

# Where a gradient is read: an index l into hidden_states as Hugging Face
# reports them (0: block 1's input, 1..L-1: block l's output, L: the final
# norm's output), or a module whose (first) output is the state.
Site = Union[int, nn.Module]
# (hidden state [batch, pos, d], its gradient for one step) -> [batch, pos]
Reduce = Callable[[Tensor, Tensor], Tensor]
# the predicting positions' logits [batch, T, vocab] -> objectives [batch, T]
Objective = Callable[[Tensor], Tensor]

# One more step in a pass batched over steps holds about one more copy of a
# block's graph: a few hidden states' worth (attention and MLP activations).
_BLOCK_GRAPH_STATES = 8


class BlockRecomputation:
    r"""One forward pass without a graph (:meth:`forward`), then per-step
    gradient scores at chosen hidden states (:meth:`scores`) from the walk down
    the blocks. Raises :class:`UnsupportedModelError` where the model does not
    run its blocks as a chain (a block's output is not the next one's input)."""

    def __init__(self, adapter: ModelAdapter, method: str) -> None:
        self.adapter = adapter
        self.method = method
        self.blocks = adapter.blocks()
        # hidden_states[L]'s module: the final norm, or the last block itself.
        last = adapter.hidden_state_module(adapter.num_layers)
        self.final_norm = None if last is self.blocks[-1] else last
        self._calls: List[Tuple[Tuple[Any, ...], Dict[str, Any]]] = []
        self._inputs: List[Tensor] = []  # x_0 .. x_L, each [batch, pos, d]
        self._embedding: Optional[Tensor] = None
        self._logits: Optional[Tensor] = None

    def forward(self, run: Callable[[], Any]) -> Any:
        r"""Runs ``run()`` (the model's forward pass; its ``logits`` those of
        the T predicting positions) without a graph, keeping each block's
        input and call, and returns what ``run`` returned."""
        with HookSet() as hooks, torch.no_grad():
            calls = [self._capture_call(hooks, block) for block in self.blocks]
            outputs = [hooks.capture_output(block) for block in self.blocks]
            embedding = hooks.capture_output(self.adapter.embedding_output_module())
            top = (
                None
                if self.final_norm is None
                else hooks.capture_input(self.final_norm)
            )
            result = run()
        self._calls = [self._once(call, block) for block, call in enumerate(calls, 1)]
        outs = [self._once(output, block) for block, output in enumerate(outputs, 1)]
        self._inputs = [_hidden_argument(*call) for call in self._calls]
        last = outs[-1] if top is None else single_call(top, self.method, "final norm")
        self._inputs.append(last)
        self._check_chain(outs)
        self._embedding = embedding[0] if len(embedding) == 1 else None
        self._logits = result.logits
        return result

    def _once(self, store: List[Any], block: int) -> Any:
        return single_call(store, self.method, f"block {block}")

    def _capture_call(self, hooks: HookSet, block: nn.Module) -> List[Any]:
        store: List[Any] = []

        def hook(
            _module: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]
        ) -> None:
            store.append((args, dict(kwargs)))

        hooks.forward_pre(block, hook, with_kwargs=True)
        return store

    def _check_chain(self, outputs: List[Tensor]) -> None:
        for index, (output, following) in enumerate(zip(outputs, self._inputs[1:]), 1):
            if output is not following:
                raise UnsupportedModelError(
                    f"{self.method} cannot recompute {self.adapter.family_name}'s "
                    f"blocks one at a time: block {index}'s output is not what "
                    "the model passes on; pass recompute=False"
                )

    def scores(
        self,
        sites: Sequence[Site],
        objective: Objective,
        target_mask: Tensor,
        reduce: Reduce,
        targets_per_backward: Optional[int],
    ) -> Tensor:
        r"""``[batch, T, len(sites), pos]`` in float32 (float64 for a float64
        model): ``reduce(h, g_t)`` per step ``t`` and site, ``g_t`` the gradient
        of ``objective(logits)[:, t].sum()`` w.r.t. the site's state ``h``; zero
        for a step that no row has (``target_mask`` ``[batch, T]``)."""
        plan = [self._place(site) for site in sites]
        steps = [t for t, has in enumerate(target_mask.any(0).tolist()) if has]
        x_top = self._inputs[-1]
        batch, positions = x_top.shape[:2]
        result = torch.zeros(
            batch,
            target_mask.shape[1],
            len(sites),
            positions,
            dtype=result_dtype(x_top.dtype),
            device=x_top.device,
        )
        walk = _Walk(result, steps, reduce, self._per_pass(targets_per_backward))
        carried = self._top(walk, plan, objective)
        lowest = min((block for block, _ in plan), default=len(self.blocks))
        for block in range(len(self.blocks), lowest, -1):
            walk.record(plan, ("carried", block), self._inputs[block], carried)
            carried = self._block(walk, plan, block, carried)
        walk.record(plan, ("carried", lowest), self._inputs[lowest], carried)
        return result

    def _place(self, site: Site) -> Tuple[int, Any]:
        r"""``(lowest block the walk must recompute, key)`` of a site."""
        count = len(self.blocks)
        if isinstance(site, int):
            index = self.adapter.check_layer(site)
            final = index == count and self.final_norm is not None
            return (count, ("final", None)) if final else (index, ("carried", index))
        if site is self.final_norm:
            return count, ("final", None)
        for index, block in enumerate(self.blocks, 1):
            if site is block:
                return index, ("carried", index)
            if any(site is module for module in block.modules()):
                return index - 1, ("inside", site)
        if site is self.adapter.embedding_output_module():
            if self._embedding is self._inputs[0]:
                return 0, ("carried", 0)
        raise UnsupportedModelError(
            f"{self.method} recomputes blocks one at a time, but "
            f"{type(site).__name__} is no block, no part of one and not what the "
            "first block reads; pass recompute=False"
        )

    def _per_pass(self, targets_per_backward: Optional[int]) -> Tuple[int, bool]:
        if targets_per_backward is not None:
            return targets_per_backward, False
        x_top = self._inputs[-1]
        tokens = x_top.shape[0] * x_top.shape[1]
        per_target = _BLOCK_GRAPH_STATES * x_top.numel() * x_top.element_size()
        return choose_targets_per_backward(x_top.device, tokens, per_target), True

    def _top(
        self, walk: "_Walk", plan: List[Tuple[int, Any]], objective: Objective
    ) -> List[Optional[Tensor]]:
        r"""The final norm and LM head on a leaf ``x_L``: per step, the gradient
        w.r.t. ``x_L`` (and the final norm's output where a site reads it)."""
        leaf = self._inputs[-1].detach().requires_grad_()  # [batch, pos, d]
        steps = self._logits.shape[1]  # type: ignore[union-attr]
        with torch.enable_grad():
            normed = leaf if self.final_norm is None else self.final_norm(leaf)
            layer = self.adapter.num_layers if self.final_norm is not None else None
            logits = self.adapter.lm_head_on_every_position(
                normed[:, -steps:], layer=layer
            )  # [batch, T, vocab]
            self._check_head(logits)
            objectives = objective(logits).sum(0)  # [T]
        eye = torch.eye(
            objectives.shape[0], dtype=objectives.dtype, device=objectives.device
        )
        inside = {("final", None): normed}
        return walk.backward(plan, objectives, leaf, inside, lambda group: eye[group])

    def _check_head(self, logits: Tensor) -> None:
        reference = self._logits.to(logits.device)  # type: ignore[union-attr]
        error = _relative_head_error(logits.flatten(0, 1), reference.flatten(0, 1))
        if not error <= _head_tolerance(reference.dtype):
            raise UnsupportedModelError(
                f"{self.method} recomputes the top of {self.adapter.family_name} "
                "as final norm + LM head, which gives logits off the model's by "
                f"{error:.2g} (relative); pass recompute=False"
            )

    def _block(
        self,
        walk: "_Walk",
        plan: List[Tuple[int, Any]],
        block: int,
        carried: List[Optional[Tensor]],
    ) -> List[Optional[Tensor]]:
        r"""Block ``block`` (1..L) recomputed on a leaf ``x_{block-1}``: per
        step, the gradient w.r.t. ``x_{block-1}`` from the carried gradients
        w.r.t. its output (and those of the sites inside the block)."""
        module = self.blocks[block - 1]
        args, kwargs = self._calls[block - 1]
        leaf = self._inputs[block - 1].detach().requires_grad_()  # [batch, pos, d]
        wanted = [
            key[1] for lowest, key in plan if key[0] == "inside" and lowest == block - 1
        ]
        with HookSet() as hooks, torch.enable_grad():
            stores = [hooks.capture_output(site) for site in wanted]
            call_args, call_kwargs = _with_hidden(args, kwargs, leaf)
            output = module(*call_args, **call_kwargs)
            output = output[0] if isinstance(output, tuple) else output
        inside = {
            ("inside", site): single_call(store, self.method, type(site).__name__)
            for site, store in zip(wanted, stores)
        }

        def grad_outputs(group: List[int]) -> Tensor:
            rows = [carried[walk.steps.index(step)] for step in group]
            return torch.stack(rows)  # type: ignore[arg-type]

        return walk.backward(plan, output, leaf, inside, grad_outputs, carried)


class _Walk:
    r"""The scores ``[batch, T, sites, pos]`` being filled and the steps'
    backward passes through one recomputed graph at a time."""

    def __init__(
        self,
        result: Tensor,
        steps: List[int],
        reduce: Reduce,
        per_pass: Tuple[int, bool],
    ) -> None:
        self.result = result
        self.steps = steps
        self.reduce = reduce
        self.per_pass, self.adapt = per_pass

    def record(
        self,
        plan: List[Tuple[int, Any]],
        key: Any,
        hidden: Tensor,
        gradients: List[Optional[Tensor]],
    ) -> None:
        r"""Scores of the sites at ``key`` from per-step ``gradients``."""
        for step, gradient in zip(self.steps, gradients):
            self._record_step(plan, key, step, hidden, gradient)

    def _record_step(
        self,
        plan: List[Tuple[int, Any]],
        key: Any,
        step: int,
        hidden: Tensor,
        gradient: Optional[Tensor],
    ) -> None:
        for column, (_lowest, site_key) in enumerate(plan):
            if site_key == key and gradient is not None:
                self.result[:, step, column] = self.reduce(hidden, gradient)

    def backward(
        self,
        plan: List[Tuple[int, Any]],
        output: Tensor,
        leaf: Tensor,
        inside: Dict[Any, Tensor],
        grad_outputs: Callable[[List[int]], Tensor],
        carried: Optional[List[Optional[Tensor]]] = None,
    ) -> List[Optional[Tensor]]:
        r"""Per step, the gradient w.r.t. ``leaf`` of ``output`` weighted by
        ``grad_outputs(group)``; scores of the sites among ``inside`` (key ->
        state in the graph) on the way. A carried gradient is dropped once its
        step's pass is done, so about T + one pass's gradients are held."""
        keys = [key for key in inside if any(k == key for _, k in plan)]
        wrt = (leaf, *(inside[key] for key in keys))

        def gradients(group: List[int]) -> Tuple[Tensor, ...]:
            return batched_vjp(output, wrt, grad_outputs(group))

        below: List[Optional[Tensor]] = []
        passes = backward_passes(gradients, self.steps, self.per_pass, self.adapt)
        for position, (step, grads) in enumerate(zip(self.steps, passes)):
            below.append(grads[0])
            for key, gradient in zip(keys, grads[1:]):
                self._record_step(plan, key, step, inside[key].detach(), gradient)
            if carried is not None:
                carried[position] = None
        return below


def _hidden_argument(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tensor:
    r"""The hidden state a block was called with: its first positional
    argument, else its ``hidden_states`` keyword."""
    hidden = args[0] if args else kwargs.get("hidden_states")
    if not isinstance(hidden, Tensor):
        raise UnsupportedModelError(
            "a block was called without its hidden state as the first argument "
            "or hidden_states=; blocks cannot be recomputed one at a time"
        )
    return hidden


def _with_hidden(
    args: Tuple[Any, ...], kwargs: Dict[str, Any], hidden: Tensor
) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    r"""``(args, kwargs)`` of a block's call with its hidden state replaced."""
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}

#!/usr/bin/env python3
r"""The states a method reads from modules it is given, Captum's way
(``layer`` / ``ModuleOrModuleList``, ``attribute_to_layer_input``): each
module's output (or first input) captured during one call of the forward
function, in the autograd graph when gradients are taken."""

from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from torch import nn, Tensor

from captum_ext._utils.attention_inputs import AttentionInputs
from captum_ext._utils.hooks import HookSet, single_call

__all__ = [
    "AttentionReader",
    "as_modules",
    "capture_states",
    "one_tensor",
    "read_states",
    "RecordedAttention",
    "row_index",
]

# After the forward pass: every layer's attention, where the attention modules
# return none (see AttentionReader).
RecordedAttention = Optional[Callable[[], List[AttentionInputs]]]


def as_modules(
    modules: Union[nn.Module, Sequence[nn.Module]], what: str, method: str
) -> List[nn.Module]:
    r"""``modules`` as a non-empty list (one module is a list of one); a clear
    error naming ``what`` (the argument) and ``method`` otherwise."""
    listed = [modules] if isinstance(modules, nn.Module) else list(modules)
    if not listed or not all(isinstance(m, nn.Module) for m in listed):
        raise TypeError(
            f"{method}'s {what} must be a torch.nn.Module or a non-empty list of "
            f"modules, got {modules!r}"
        )
    return listed


def one_tensor(value: Any, module: nn.Module, method: str) -> Tensor:
    r"""A module's output as one tensor: the tensor itself, or the first
    element of a tuple (Hugging Face blocks and attention modules return
    ``(hidden, ...)``); a clear error for anything else."""
    first = value[0] if isinstance(value, (tuple, list)) and value else value
    if not isinstance(first, Tensor):
        raise TypeError(
            f"{method} reads {type(module).__name__}'s "
            f"{'output' if first is value else 'first output'}, which is "
            f"{type(first).__name__}, not a tensor; name a module that returns "
            "the state (or a tuple starting with it)"
        )
    return first


def capture_states(
    hooks: HookSet,
    modules: Sequence[nn.Module],
    attribute_to_layer_input: bool,
    requires_grad: bool,
) -> List[List[Tensor]]:
    r"""Registers on each module a hook that stores its output (its first
    input with ``attribute_to_layer_input``) per call. With ``requires_grad``
    a state that is not in the graph (every parameter before it frozen, or
    integer inputs) is replaced by a leaf that requires grad, so gradients
    w.r.t. it exist; the forward pass computes the same values."""
    stores: List[List[Tensor]] = [[] for _ in modules]
    for module, store in zip(modules, stores):
        if attribute_to_layer_input:
            hooks.forward_pre(module, _input_hook(store, requires_grad))
        else:
            hooks.forward(module, _output_hook(store, requires_grad))
    return stores


def _in_graph(state: Tensor, requires_grad: bool) -> Optional[Tensor]:
    r"""A leaf copy of ``state`` that requires grad, where one is needed."""
    if requires_grad and state.is_floating_point() and not state.requires_grad:
        return state.detach().requires_grad_()
    return None


def _replace_first(value: Any, first: Tensor) -> Any:
    return first if isinstance(value, Tensor) else (first, *value[1:])


def _output_hook(store: List[Tensor], requires_grad: bool) -> Any:
    def hook(module: nn.Module, _inputs: Tuple[Any, ...], output: Any) -> Any:
        state = one_tensor(output, module, "the layer hook")
        leaf = _in_graph(state, requires_grad)
        store.append(state if leaf is None else leaf)
        return None if leaf is None else _replace_first(output, leaf)

    return hook


def _input_hook(store: List[Tensor], requires_grad: bool) -> Any:
    def hook(module: nn.Module, inputs: Tuple[Any, ...]) -> Any:
        state = one_tensor(inputs, module, "the layer hook")
        leaf = _in_graph(state, requires_grad)
        store.append(state if leaf is None else leaf)
        return None if leaf is None else _replace_first(inputs, leaf)

    return hook


def read_states(
    stores: Sequence[List[Tensor]], batch_size: int, method: str
) -> Tuple[Tensor, ...]:
    r"""The one state each module gave in one forward pass, checked to be
    ``[batch, pos, d]`` with one shared ``pos``: a sequence-first state
    (``nn.TransformerEncoderLayer`` without ``batch_first``) would otherwise be
    summed over the wrong axis."""
    states = [
        single_call(store, method, f"layer {index}")
        for index, store in enumerate(stores)
    ]
    shapes = [tuple(state.shape) for state in states]
    positions = {shape[1] for shape in shapes if len(shape) == 3}
    if any(len(s) != 3 or s[0] != batch_size for s in shapes) or len(positions) != 1:
        raise ValueError(
            f"{method} reads hidden states [batch, pos, d] with the inputs' "
            f"{batch_size} examples first and one pos for every layer, but the "
            f"layer modules gave shapes {shapes}; name modules whose outputs are "
            "batch-first token states"
        )
    return tuple(states)


def row_index(position: int, positions: int, method: str) -> int:
    r"""``position`` (negative counts from the end) as an index into
    ``positions`` rows; a clear error when out of range."""
    if not -positions <= position < positions:
        raise IndexError(
            f"{method}'s position {position} is out of range for {positions} "
            "positions"
        )
    return position % positions


def _capture_attention(hooks: HookSet, modules: Sequence[nn.Module]) -> List[List[Any]]:
    r"""Registers on each attention module a hook that stores its output per
    call: the probabilities, or ``(output, probabilities, ...)``."""
    stores: List[List[Any]] = [[] for _ in modules]
    for module, store in zip(modules, stores):
        hooks.forward(module, lambda _m, _i, output, s=store: s.append(output))
    return stores


class AttentionReader:
    r"""The attention probabilities of the modules a method reads, from one
    forward pass: each module's output (the probabilities, or ``(output,
    probabilities)``), or, where the attention modules return none (a fused
    kernel), what ``recorded`` gives after the forward pass: every layer's
    :class:`~captum_ext._utils.attention_inputs.AttentionInputs` recorded by
    whoever ran it."""

    def __init__(
        self,
        hooks: HookSet,
        modules: Sequence[nn.Module],
        recorded: RecordedAttention = None,
    ) -> None:
        self._recorded = recorded
        self._stores = _capture_attention(hooks, modules)

    def maps(
        self, method: str, positions: Optional[int] = None
    ) -> List[AttentionInputs]:
        r"""Each module's
        :class:`~captum_ext._utils.attention_inputs.AttentionInputs`, after the
        forward pass."""
        if self._recorded is not None:
            return self._recorded()
        return _attention_maps(self._stores, method, positions)


def _attention_maps(
    stores: Sequence[List[Any]], method: str, positions: Optional[int] = None
) -> List[AttentionInputs]:
    r"""The attention probabilities ``[batch, heads, pos, pos]`` of each module's
    one call: its output, or the second element of a tuple (a Hugging Face
    attention module's ``(output, weights)``); ``pos`` is ``positions`` where
    given (the states' length), else the maps' own."""
    maps = []
    for index, store in enumerate(stores):
        output = single_call(store, method, f"attention module {index}")
        found = output[1] if isinstance(output, (tuple, list)) else output
        shape = tuple(found.shape) if isinstance(found, Tensor) else None
        if shape is not None and positions is None:
            positions = shape[-1]
        if shape is None or len(shape) != 4 or shape[2:] != (positions, positions):
            raise ValueError(
                f"{method} reads attention probabilities [batch, heads, "
                f"{positions}, {positions}] from attention module {index}, got "
                f"{'no tensor' if shape is None else shape}; name the modules "
                "that return them (a Hugging Face model returns none with sdpa or "
                "flash attention: load it with attn_implementation='eager')"
            )
        maps.append(AttentionInputs(probabilities=found))
    return maps

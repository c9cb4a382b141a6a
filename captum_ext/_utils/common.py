#!/usr/bin/env python3
r"""The one token-input core (parsing and checks, one message per error), target
resolution and the model forward, shared by all methods and metrics.

Call convention (the one every captum_ext method and metric follows)::

    method.attribute(input_ids, target=None,
                     additional_forward_args=(attention_mask,))
    # or (attention_mask, token_type_ids), or a bare attention_mask, or None

``input_ids`` is ``[batch, pos]`` of token ids; ``attention_mask`` is 1 on real
tokens and 0 on padding: right or left for a decoder-only model, right for an
encoder (it reads its prediction from position 0). Metrics take the same two
through :func:`parse_token_ids` (they have no model adapter); methods through
:func:`parse_token_batch`, which adds the checks that need the model.
"""

import warnings
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Callable, Dict, Optional, Tuple, Type, TypeVar

import torch
from captum._utils.typing import TargetType
from torch import nn, Tensor

from captum_ext._utils.hooks import model_lock
from captum_ext.adapters import get_adapter, ModelAdapter, UnsupportedModelError

__all__ = [
    "CausalLMLogits",
    "ClassifierLogits",
    "TokenBatch",
    "check_decoder_vocabulary",
    "check_same_shape",
    "check_tokenizer_vocabulary",
    "check_vocabulary_ids",
    "causal_lm_forward",
    "classifier_forward",
    "parse_token_batch",
    "parse_token_ids",
    "resolve_target",
    "run_model",
]


_Batch = TypeVar("_Batch", bound="TokenBatch")


@dataclass
class TokenBatch:
    r"""A batch of token ids and what the forward pass takes after them: the
    one record from the tokenizer's output to the methods, the metrics and the
    evaluation engine.

    Args:
        input_ids (Tensor): ``[batch, pos]`` token ids.
        attention_mask (Tensor): ``[batch, pos]``, 1 on real tokens.
        extra_args (tuple, optional): the forward function's arguments after
            the mask; for a Hugging Face model ``(token_type_ids,)`` of a text
            pair, else empty.
    """

    input_ids: Tensor
    attention_mask: Tensor
    extra_args: Tuple[Any, ...] = ()

    @classmethod
    def of(
        cls: Type[_Batch],
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Optional[Tensor] = None,
        **fields: Any,
    ) -> _Batch:
        r"""The batch of a tokenizer's output (``token_type_ids`` for text pairs
        only); ``fields`` are a subclass's own."""
        extra = () if token_type_ids is None else (token_type_ids,)
        return cls(input_ids, attention_mask, extra, **fields)

    @property
    def token_type_ids(self) -> Optional[Tensor]:
        r"""``[batch, pos]`` segment ids of a text pair, else None."""
        return self.extra_args[0] if self.extra_args else None

    @cached_property  # read by every chunk of every method and metric
    def valid(self) -> Tensor:
        r"""Boolean ``[batch, pos]``: True on real (non-pad) tokens."""
        return self.attention_mask.bool()

    def forward_args(self) -> Tuple[Any, ...]:
        r"""``additional_forward_args`` of a Captum call on these ids:
        ``(attention_mask,)`` or ``(attention_mask, token_type_ids)``."""
        return (self.attention_mask, *self.extra_args)

    def select(self: _Batch, rows: Any) -> _Batch:
        r"""The batch of ``rows`` (a slice or index tensor) of every tensor."""
        return replace(
            self,
            input_ids=self.input_ids[rows],
            attention_mask=self.attention_mask[rows],
            extra_args=tuple(_rows_of(arg, rows) for arg in self.extra_args),
        )

    def to(self: _Batch, device: Any) -> _Batch:
        r"""The batch with every tensor on ``device``."""
        return replace(
            self,
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            extra_args=tuple(_on(arg, device) for arg in self.extra_args),
        )


def _rows_of(arg: Any, rows: Any) -> Any:
    return arg[rows] if isinstance(arg, Tensor) else arg


def _on(arg: Any, device: Any) -> Any:
    return arg.to(device) if isinstance(arg, Tensor) else arg


def parse_token_ids(
    inputs: Any, additional_forward_args: Any = None, pad_token_id: Optional[int] = None
) -> Tuple[Tensor, Tensor, Tuple[Any, ...]]:
    r"""The model-independent half of the input checks, shared by methods and
    metrics: ``inputs`` as integer ids ``[batch, pos]``, the attention mask (all
    ones when None) and the items of ``additional_forward_args`` after the mask.

    Raises on a non-integer or non-2D input, an empty batch or sequence, a mask of
    another shape or with values other than 0 and 1, and an example with no
    attended token. Warns (once) when ``inputs`` hold ``pad_token_id`` but no mask
    was given: the padding would be read as text.
    """
    input_ids = _as_token_ids(inputs)
    if input_ids.numel() == 0:
        raise ValueError(f"empty input: inputs has shape {tuple(input_ids.shape)}")
    extras = _extra_args(additional_forward_args)
    attention_mask = extras[0] if extras else None
    if attention_mask is None:
        _warn_if_padded(input_ids, pad_token_id)
        attention_mask = torch.ones_like(input_ids)
    check_same_shape("attention_mask", attention_mask, input_ids)
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (tokens)")
    empty = (~attention_mask.bool().any(-1)).nonzero().flatten()
    if len(empty):
        raise ValueError(
            f"empty input: example(s) {empty.tolist()} have no attended token "
            "(attention_mask is all zero)"
        )
    return input_ids, attention_mask, extras[1:]


def _as_token_ids(inputs: Any) -> Tensor:
    if isinstance(inputs, tuple):
        if len(inputs) != 1:
            raise ValueError(
                f"captum_ext takes one input tensor of token ids, got a tuple "
                f"of {len(inputs)}; pass masks through additional_forward_args"
            )
        inputs = inputs[0]
    if not isinstance(inputs, Tensor):
        raise TypeError(f"inputs must be a tensor of token ids, got {type(inputs)}")
    if inputs.dtype.is_floating_point or inputs.dtype == torch.bool:
        raise TypeError(
            f"inputs must be integer token ids [batch, pos], got dtype {inputs.dtype}"
        )
    if inputs.dim() != 2:
        hint = "; add a batch dimension with .unsqueeze(0)" if inputs.dim() == 1 else ""
        raise ValueError(
            "inputs must be token ids of shape [batch, pos], got "
            f"{tuple(inputs.shape)}{hint}"
        )
    return inputs


def _extra_args(additional_forward_args: Any) -> Tuple[Any, ...]:
    if additional_forward_args is None:
        return ()
    if isinstance(additional_forward_args, Tensor):
        return (additional_forward_args,)
    if isinstance(additional_forward_args, (tuple, list)):
        return tuple(additional_forward_args)
    raise TypeError(
        "additional_forward_args must be None, an attention mask, or a tuple "
        f"(attention_mask, ...); got {type(additional_forward_args)}"
    )


def check_same_shape(name: str, tensor: Any, input_ids: Tensor) -> None:
    r"""Raises unless ``tensor`` is a tensor of the shape of ``input_ids``."""
    if not isinstance(tensor, Tensor) or tensor.shape != input_ids.shape:
        got = tuple(tensor.shape) if isinstance(tensor, Tensor) else type(tensor)
        raise ValueError(
            f"{name} has shape {got} but inputs has {tuple(input_ids.shape)}; "
            "it must be a tensor of the shape of inputs"
        )


def _warn_if_padded(input_ids: Tensor, pad_token_id: Optional[int]) -> None:
    if pad_token_id is None:
        return
    rows = (input_ids == pad_token_id).any(-1).nonzero().flatten().tolist()
    if rows:
        warnings.warn(
            f"example(s) {rows} hold the padding id {pad_token_id} but no "
            "attention_mask was given, so the padding is read as text; pass "
            "additional_forward_args=(attention_mask,)",
            UserWarning,
            stacklevel=3,
        )


def parse_token_batch(
    adapter: ModelAdapter, inputs: Any, additional_forward_args: Any = None
) -> TokenBatch:
    r"""Validates ``inputs`` and ``additional_forward_args`` into a :class:`TokenBatch`.

    Adds to :func:`parse_token_ids` the checks that need the model: an example
    made only of special tokens, a token id outside the vocabulary, an input
    longer than the model's positions, and left padding on an encoder (which reads
    its prediction from position 0).
    """
    input_ids, attention_mask, rest = parse_token_ids(
        inputs, additional_forward_args, adapter.tokens.pad_token_id
    )
    if len(rest) > 1:
        raise ValueError(
            "additional_forward_args is (attention_mask,) or "
            f"(attention_mask, token_type_ids); got {len(rest) + 1} items"
        )
    token_type_ids = rest[0] if rest else None
    if token_type_ids is not None:
        check_same_shape("token_type_ids", token_type_ids, input_ids)
    batch = TokenBatch.of(input_ids, attention_mask, token_type_ids)
    _check_not_only_special(adapter, batch)
    check_vocabulary_ids(adapter, input_ids)
    _check_positions(adapter, batch)
    return batch


def check_vocabulary_ids(
    adapter: ModelAdapter, input_ids: Tensor, what: str = "token ids"
) -> None:
    r"""Raises unless every id of ``input_ids`` indexes the model's vocabulary
    (``what`` names them in the message)."""
    vocab_size = adapter.word_embeddings().num_embeddings
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{what} must be in [0, {vocab_size}) for this model's vocabulary, "
            f"got ids from {low} to {high}; use the model's own tokenizer"
        )


def check_tokenizer_vocabulary(adapter: ModelAdapter, tokenizer: Any) -> None:
    r"""Raises unless every id ``tokenizer`` can produce (``len(tokenizer)``,
    added tokens included) indexes the model's word embeddings: a larger
    tokenizer belongs to another model, and its extra ids would index past the
    embeddings (or, on a GPU, read whatever lies there)."""
    vocab_size = adapter.word_embeddings().num_embeddings
    size = len(tokenizer)
    if size > vocab_size:
        raise ValueError(
            f"the tokenizer has {size} tokens but the model's vocabulary only "
            f"{vocab_size}; use the model's own tokenizer (after adding tokens, "
            "model.resize_token_embeddings(len(tokenizer)))"
        )


def _check_not_only_special(adapter: ModelAdapter, batch: TokenBatch) -> None:
    special = adapter.tokens.special_positions(batch.input_ids, batch.attention_mask)
    only_special = (~(batch.valid & ~special).any(-1)).nonzero().flatten()
    if len(only_special):
        raise ValueError(
            f"empty input: example(s) {only_special.tolist()} hold only special "
            "tokens; there is nothing to attribute"
        )


def _check_positions(adapter: ModelAdapter, batch: TokenBatch) -> None:
    pos = batch.input_ids.shape[1]
    max_positions = adapter.max_positions
    if max_positions is not None and pos > max_positions:
        raise ValueError(
            f"input has {pos} positions but the model has only {max_positions} "
            "position embeddings; truncate it (tokenizer(..., truncation=True))"
        )
    left_padded = (~batch.valid[:, 0]).nonzero().flatten()
    # A decoder reads its last token wherever it is; an encoder reads position 0.
    if not adapter.is_causal and len(left_padded):
        raise ValueError(
            f"example(s) {left_padded.tolist()} are padded on the left, but "
            f"{type(adapter.model).__name__} reads its prediction from position 0, "
            "which would be padding; pad on the right "
            '(tokenizer.padding_side = "right")'
        )


def resolve_target(target: TargetType, logits: Tensor) -> Tensor:
    r"""Turns Captum's ``target`` into one class index per example, ``[batch]``.

    ``None`` means each example's predicted class (argmax of ``logits``); an int or
    a 0-d tensor applies to every example; a list or 1-d tensor gives one class per
    example. Raises on a class out of range or a length that is not the batch size.
    """
    batch, num_classes = logits.shape
    if target is None:
        return logits.argmax(-1)
    if isinstance(target, tuple):
        raise ValueError(
            "target as a tuple indexes a multi-dimensional output; a classifier's "
            "output is [batch, classes], so pass an int, a list or a 1-d tensor"
        )
    index = torch.as_tensor(target, device=logits.device)
    if index.dtype.is_floating_point or index.dtype == torch.bool:
        raise ValueError(f"target must be integer class indices, got {target!r}")
    if index.dim() > 1:
        raise ValueError(
            "target must be an int or a 1-d list / tensor with one class per "
            f"example, got shape {tuple(index.shape)}; continuation ids "
            "[batch, T] need a causal LM (AutoModelForCausalLM)"
        )
    index = index.long().expand(batch) if index.dim() == 0 else index.long()
    if index.shape[0] != batch:
        raise ValueError(
            f"target has {index.shape[0]} entries but the batch has {batch} examples"
        )
    if bool(((index < 0) | (index >= num_classes)).any()):
        raise IndexError(
            f"target {index.tolist()} out of range for a model with {num_classes} "
            "output(s)"
        )
    return index


def run_model(
    adapter: ModelAdapter,
    batch: TokenBatch,
    *,
    hidden_states: bool = False,
    attentions: bool = False,
    classifier: bool = True,
) -> Any:
    r"""One forward pass of the model on ``batch`` (Hugging Face output object).

    Callers that read attention run it inside
    :meth:`ModelAdapter.attention_capture` and ask for ``attentions`` only
    where the capture says so (eager attention).
    With ``classifier`` (callers that explain a class), raises
    :class:`UnsupportedModelError` unless the output has ``logits`` ``[batch, C]``.
    """
    kwargs = adapter.tokens.forward_kwargs(batch.attention_mask, batch.token_type_ids)
    output = adapter.model(
        input_ids=batch.input_ids,
        output_hidden_states=hidden_states,
        output_attentions=attentions,
        return_dict=True,
        **kwargs,
    )
    if classifier:
        _check_classifier_logits(adapter, getattr(output, "logits", None))
    return output


def _check_classifier_logits(adapter: ModelAdapter, logits: Optional[Tensor]) -> None:
    if logits is None or logits.dim() != 2:
        got = "no logits" if logits is None else f"logits {tuple(logits.shape)}"
        raise UnsupportedModelError(
            f"{type(adapter.model).__name__} has no sequence-classification head: "
            f"it returns {got}, not [batch, classes]; load it with "
            "AutoModelForSequenceClassification"
        )


def check_decoder_vocabulary(logits: Tensor, vocab_size: int) -> None:
    r"""Raises unless a decoder's logits ``[..., V]`` cover the model's vocabulary
    of ``vocab_size`` tokens."""
    if logits.shape[-1] != vocab_size:
        raise ValueError(
            f"the decoder maps hidden states to {logits.shape[-1]} logits but the "
            f"model's vocabulary has {vocab_size} tokens; use a decoder made for this "
            "model's tokenizer"
        )


class ClassifierLogits(nn.Module):
    r"""A Hugging Face classifier as a Captum ``forward_func`` that returns logits:
    ``f(input_ids, attention_mask=None, token_type_ids=None) -> [batch, C]``.

    ``input_ids`` are token ids ``[batch, pos]``, or word embeddings
    ``[batch, pos, d]`` when ``inputs_embeds=True`` (for methods that interpolate
    or add noise in input space). Being an ``nn.Module`` it also serves methods
    that need one (Captum's DeepLift family).

    For a supported family it runs the Hugging Face model inside any wrapper
    (``torch.compile``, ``peft``, ``DataParallel``) with the adapter's keyword
    arguments, so its logits are the ones captum_ext's methods explain (e.g.
    ``position_ids`` from the mask, which make GPT-2 left = right padding).
    """

    def __init__(self, model: nn.Module, inputs_embeds: bool = False) -> None:
        super().__init__()
        try:
            self._adapter: Optional[ModelAdapter] = get_adapter(model)
        except UnsupportedModelError:
            self._adapter = None
        self.model = model if self._adapter is None else self._adapter.model
        self.inputs_embeds = inputs_embeds

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Optional[Tensor] = None,
        token_type_ids: Optional[Tensor] = None,
    ) -> Tensor:
        kwargs: Dict[str, Optional[Tensor]] = {"attention_mask": attention_mask}
        if self._adapter is not None:
            kwargs.update(
                self._adapter.tokens.forward_kwargs(attention_mask, token_type_ids)
            )
        elif token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        if self._adapter is not None and not self.inputs_embeds:
            # Here, not only in the methods: every forward pass of a prediction,
            # a metric or a Captum method passes through this one place.
            check_vocabulary_ids(self._adapter, input_ids)
        name = "inputs_embeds" if self.inputs_embeds else "input_ids"
        kwargs[name] = input_ids
        with model_lock(self.model):  # not during a captum_ext call's passes
            logits: Tensor = self.model(**kwargs).logits
        return logits


def classifier_forward(
    model: nn.Module, inputs_embeds: bool = False
) -> Callable[..., Tensor]:
    r"""A Captum ``forward_func`` for a Hugging Face classifier:
    ``f(input_ids, attention_mask=None, token_type_ids=None) -> logits [batch, C]``
    (word embeddings instead of ids with ``inputs_embeds=True``); see
    :class:`ClassifierLogits`.

    Use it with Captum's own methods and with :mod:`captum_ext.metrics`.
    """
    return ClassifierLogits(model, inputs_embeds)


class CausalLMLogits(ClassifierLogits):
    r"""A Hugging Face causal language model as a Captum ``forward_func``:
    ``f(input_ids, attention_mask=None) -> logits [batch, pos, vocab]``.

    The forward pass is :class:`ClassifierLogits`'s: the model inside any wrapper,
    with the adapter's keyword arguments, so ``position_ids`` count attended tokens
    only (``cumsum(attention_mask) - 1``, as ``generate()`` does) and a
    left-padded prompt, or a prompt whose tokens were deleted and re-packed,
    gets the positions of its own tokens. Raises
    :class:`~captum_ext.UnsupportedModelError` for a model that is not a causal LM.
    """

    def __init__(self, model: nn.Module, inputs_embeds: bool = False) -> None:
        get_adapter(model).require_causal_lm("causal_lm_forward")
        super().__init__(model, inputs_embeds)

    def word_embeddings(self) -> nn.Embedding:
        r"""The model's input word embeddings (what soft erasure perturbs)."""
        assert self._adapter is not None  # require_causal_lm found one
        return self._adapter.word_embeddings()


def causal_lm_forward(model: nn.Module, inputs_embeds: bool = False) -> CausalLMLogits:
    r"""A Captum ``forward_func`` for a Hugging Face causal LM:
    ``f(input_ids, attention_mask=None) -> logits [batch, pos, vocab]`` (word
    embeddings instead of ids with ``inputs_embeds=True``); see
    :class:`CausalLMLogits`.

    Use it with the generation metrics of :mod:`captum_ext.metrics`
    (:func:`~captum_ext.metrics.generation_aopc`, ...).
    """
    return CausalLMLogits(model, inputs_embeds)

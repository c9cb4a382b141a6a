#!/usr/bin/env python3
r"""Calling the model, shared by all methods and metrics: the one forward pass
of a method (:func:`run_model`) and its output checks, and the Captum
``forward_func`` of a Hugging Face classifier or causal LM
(:func:`classifier_forward`, :func:`causal_lm_forward`).
"""

from typing import Any, Callable, Dict, Optional

from torch import nn, Tensor

from captum_ext._utils.hooks import model_lock
from captum_ext._utils.target import resolve_target
from captum_ext._utils.token_batch import check_vocabulary_ids, TokenBatch
from captum_ext.adapters import get_adapter, ModelAdapter, UnsupportedModelError

__all__ = [
    "CausalLMLogits",
    "ClassifierLogits",
    "causal_lm_forward",
    "classifier_forward",
    "ImageClassifierLogits",
    "resolve_target",
    "run_model",
]


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


class ImageClassifierLogits(nn.Module):
    r"""A Hugging Face image classifier as a Captum ``forward_func``:
    ``f(pixel_values [batch, channels, height, width]) -> logits [batch, C]``,
    holding the model's lock for each forward pass (as
    :class:`ClassifierLogits`)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: Tensor) -> Tensor:
        with model_lock(self.model):
            logits: Tensor = self.model(pixel_values=pixel_values).logits
        return logits

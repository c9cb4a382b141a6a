#!/usr/bin/env python3
r"""Captum's own baselines as the engines run them, so the table answers "what
would a user pick instead". They work on the word-embedding layer
(``get_input_embeddings()``), which every Hugging Face model has:

- ``Saliency``: L2 norm of the gradient w.r.t. each token's word embedding
  (``LayerGradientXActivation(..., multiply_by_inputs=False)``);
- ``InputXGradient``: gradient x embedding, summed over features
  (``LayerGradientXActivation``);
- ``IntegratedGradients``: ``LayerIntegratedGradients`` from a reference where
  every non-special token is [PAD], with :data:`IG_STEPS` steps instead of
  Captum's default 50 to keep the benchmark affordable on a CPU;
- ``FeatureAblation``: each position replaced by [PAD] in turn, one forward pass
  per position, :data:`ABLATION_ROWS` rows per pass.

Their variants for what a causal LM generates run one prompt at a time
(Captum's LLM API takes one:
:attr:`~captum_ext.evaluation.registry.MethodSpec.one_prompt_at_a_time`), on
exactly the ids the captum_ext methods get, each in its fastest setting:

- ``FeatureAblation``: ``LLMAttribution(FeatureAblation(model), tokenizer)``
  with ``forward_in_tokens=False``: one teacher-forced forward pass over
  prompt + continuation per ablated prompt token serves every target token
  (Captum's default ``True`` runs the continuation token by token, T passes per
  ablation, for the same scores), each prompt token replaced by
  :func:`baseline_token_id` in turn;
- ``InputXGradient``: ``LLMGradientAttribution(LayerGradientXActivation(model,
  word_embeddings), tokenizer)``, gradient x embedding of
  :math:`\log p(y_t \mid \text{prompt}, y_{<t})` summed over features, one
  forward and one backward pass over prompt + :math:`y_{<t}` per target token
  (Captum's cheapest gradient path);
- ``IntegratedGradients``: ``LLMGradientAttribution(LayerIntegratedGradients(
  model, word_embeddings), tokenizer)`` from the embeddings of
  :func:`baseline_token_id`, with :data:`IG_STEPS` steps (Captum's default 50
  costs 3x more).
"""

from typing import Any, Callable, List, Optional

import torch
from captum.attr import (
    FeatureAblation,
    LayerGradientXActivation,
    LayerIntegratedGradients,
    LLMAttribution,
    LLMGradientAttribution,
    TextTokenInput,
)
from torch import nn, Tensor

from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.model_forward import classifier_forward
from captum_ext.adapters import get_adapter
from captum_ext.evaluation.registry.call_convention import (
    _explainer,
    _generation_explainer,
    GenerationFn,
    MethodFn,
    rows_of_examples,
    ScoreFn,
)

__all__ = ["ABLATION_ROWS", "IG_ROWS", "IG_STEPS", "baseline_token_id"]

IG_STEPS = 16
# Rows per forward pass of FeatureAblation, and of IntegratedGradients' path
# points: enough to keep the cores busy, far from memory limits at 64 tokens
# (IntegratedGradients keeps every row's activations for its backward pass:
# about 11 MiB a row at 64 tokens on the default classifier).
ABLATION_ROWS = 128
IG_ROWS = 64


# ----------------------------------------------------------- classifiers
def _in_eval_semantics(model: nn.Module, scores: ScoreFn) -> MethodFn:
    r"""Captum's methods hook and run the model like captum_ext's own, so they
    run the same way: in eval semantics, holding the model's lock."""

    def run(input_ids: Tensor, target: Tensor, args: tuple) -> Tensor:
        with eval_semantics(model):
            return scores(input_ids, target, args)

    return _explainer(run)


def _special_ids(tokenizer: Any) -> Tensor:
    return torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)


def _embedding_gradients(model: nn.Module, times_input: bool) -> MethodFn:
    layer = LayerGradientXActivation(
        classifier_forward(model),
        get_adapter(model).word_embeddings(),
        multiply_by_inputs=times_input,
    )

    def scores(input_ids: Tensor, target: Tensor, args: tuple) -> Tensor:
        grads = layer.attribute(
            input_ids, target=target, additional_forward_args=args
        )  # [batch, pos, d_model]
        summed = grads.sum(-1) if times_input else grads.norm(dim=-1)
        return summed * args[0]

    return _in_eval_semantics(model, scores)


def _saliency(model: nn.Module, tokenizer: Any) -> MethodFn:
    return _embedding_gradients(model, times_input=False)


def _input_x_gradient(model: nn.Module, tokenizer: Any) -> MethodFn:
    return _embedding_gradients(model, times_input=True)


def _integrated_gradients(model: nn.Module, tokenizer: Any) -> MethodFn:
    ig = LayerIntegratedGradients(
        classifier_forward(model), get_adapter(model).word_embeddings()
    )
    special = _special_ids(tokenizer)

    def path(input_ids: Tensor, target: Tensor, args: tuple) -> Tensor:
        # Keep [CLS]/[SEP]/pads so only the content moves along the path.
        keep = torch.isin(input_ids, special.to(input_ids.device))
        reference = torch.where(keep, input_ids, tokenizer.pad_token_id)
        attributions = ig.attribute(
            input_ids,
            baselines=reference,
            target=target,
            additional_forward_args=args,
            n_steps=IG_STEPS,
            internal_batch_size=len(input_ids) * IG_STEPS,
        )  # [chunk, pos, d_model]
        return attributions.sum(-1) * args[0]

    def scores(input_ids: Tensor, target: Tensor, args: tuple) -> Tensor:
        # Chunks of examples, each with all its steps in one pass: the same
        # sums as one pass over the batch (a row's scores do not depend on the
        # other rows), at IG_ROWS rows of activations at a time.
        chunk = max(1, IG_ROWS // IG_STEPS)
        return torch.cat(
            [
                path(
                    input_ids[i : i + chunk],
                    target[i : i + chunk],
                    tuple(a[i : i + chunk] for a in args),
                )
                for i in range(0, len(input_ids), chunk)
            ]
        )  # [batch, pos]

    return _in_eval_semantics(model, scores)


def _feature_ablation(model: nn.Module, tokenizer: Any) -> MethodFn:
    ablation = FeatureAblation(classifier_forward(model))

    def scores(input_ids: Tensor, target: Tensor, args: tuple) -> Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        attributions = ablation.attribute(
            input_ids,
            baselines=tokenizer.pad_token_id,
            target=target,
            additional_forward_args=args,
            feature_mask=positions.expand_as(input_ids),
            perturbations_per_eval=max(1, ABLATION_ROWS // len(input_ids)),
        )
        return attributions.float() * args[0]

    return _in_eval_semantics(model, scores)


# ------------------------------------------------------------ generated text
def baseline_token_id(tokenizer: Any) -> int:
    r"""The token a Captum LLM baseline puts in place of a removed prompt
    token: the unknown token, as Captum's ``TextTokenInput`` suggests, else the
    pad token, else Captum's default 0."""
    for token in (tokenizer.unk_token_id, tokenizer.pad_token_id):
        if token is not None:
            return int(token)
    return 0


class _GivenIds:
    r"""What Captum's ``TextTokenInput`` reads from a tokenizer, answering
    ``encode`` with fixed ids: Captum then runs on exactly the ids the
    captum_ext methods get (nothing re-tokenised, no BOS added)."""

    def __init__(self, tokenizer: Any, ids: Tensor) -> None:
        self.tokenizer = tokenizer
        self.ids = ids  # [n]

    def encode(self, text: str, return_tensors: Optional[str] = None) -> Tensor:
        return self.ids.unsqueeze(0)  # [1, n]

    def convert_ids_to_tokens(self, ids: List[int]) -> List[str]:
        return self.tokenizer.convert_ids_to_tokens(ids)


# run(llm_attribution, inp, target_ids [T]) -> [T, n]
CaptumLLMRun = Callable[[Any, TextTokenInput, Tensor], Tensor]


def _one_prompt_at_a_time(
    model: nn.Module, tokenizer: Any, llm_attribution: Any, run: CaptumLLMRun
) -> GenerationFn:
    r"""A Captum LLM attribution on each prompt alone (Captum's API takes one),
    its ``token_attr`` ``[T_b, P_b]`` placed at the row's attended prompt
    positions and real target steps."""
    baseline = baseline_token_id(tokenizer)

    def example(prompt: Tensor, target: Tensor) -> Tensor:
        inp = TextTokenInput("", _GivenIds(tokenizer, prompt), baselines=baseline)
        with eval_semantics(model):
            return run(llm_attribution, inp, target)  # [T_b, P_b]

    def scores(prompt_ids: Tensor, mask: Tensor, target_ids: Tensor) -> Tensor:
        return rows_of_examples(prompt_ids, mask, target_ids, example)

    return _generation_explainer(model, scores)


def _feature_ablation_generation(model: nn.Module, tokenizer: Any) -> GenerationFn:
    def run(llm: Any, inp: TextTokenInput, target: Tensor) -> Tensor:
        with torch.no_grad():
            # One pass over prompt + continuation per ablation: Captum's fastest.
            result = llm.attribute(inp, target=target, forward_in_tokens=False)
        return result.token_attr

    llm = LLMAttribution(FeatureAblation(model), tokenizer)
    return _one_prompt_at_a_time(model, tokenizer, llm, run)


def _input_x_gradient_generation(model: nn.Module, tokenizer: Any) -> GenerationFn:
    def run(llm: Any, inp: TextTokenInput, target: Tensor) -> Tensor:
        return llm.attribute(inp, target=target).token_attr

    embeddings = get_adapter(model).word_embeddings()
    llm = LLMGradientAttribution(LayerGradientXActivation(model, embeddings), tokenizer)
    return _one_prompt_at_a_time(model, tokenizer, llm, run)


def _integrated_gradients_generation(model: nn.Module, tokenizer: Any) -> GenerationFn:
    def run(llm: Any, inp: TextTokenInput, target: Tensor) -> Tensor:
        result = llm.attribute(
            inp, target=target, n_steps=IG_STEPS, internal_batch_size=IG_ROWS
        )
        return result.token_attr

    ig = LayerIntegratedGradients(model, get_adapter(model).word_embeddings())
    llm = LLMGradientAttribution(ig, tokenizer)
    return _one_prompt_at_a_time(model, tokenizer, llm, run)

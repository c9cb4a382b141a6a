#!/usr/bin/env python3
r"""The registries of the evaluation engine: every attribution method and every
metric it can run, by name. Adding to the benchmark is one entry each:

- :data:`METHODS`: name -> :class:`MethodSpec`, whose ``factory(model, tokenizer)``
  returns ``explain(input_ids, attention_mask, target, token_type_ids=None)
  -> [batch, pos]``;
- :data:`METRICS`: name -> :class:`MetricSpec`, whose ``compute(context, scores)``
  returns a :class:`MetricValue` (a value per example, optionally a curve) for
  each of its table columns;
- a method's ``layer_map``: per-layer scores ``[batch, layers, pos]`` drawn as
  heatmaps.

Each entry states what it needs (gradients, attention weights, fitted decoders,
gold labels), whether its scores ignore the target class and whether it supports
causal language models. The names are also listed, without torch, in
:mod:`captum_ext.evaluation.names`; this module refuses to import when the two
differ.

Captum's own baselines sit in :data:`METHODS` next to the captum_ext methods, so
the table answers "what would a user pick instead". They work on the
word-embedding layer (``get_input_embeddings()``), which every Hugging Face model
has:

- ``Saliency``: L2 norm of the gradient w.r.t. each token's word embedding
  (``LayerGradientXActivation(..., multiply_by_inputs=False)``);
- ``InputXGradient``: gradient x embedding, summed over features
  (``LayerGradientXActivation``);
- ``IntegratedGradients``: ``LayerIntegratedGradients`` from a reference where
  every non-special token is [PAD], with :data:`IG_STEPS` steps instead of
  Captum's default 50 to keep the benchmark affordable on a CPU;
- ``FeatureAblation``: each position replaced by [PAD] in turn, one forward pass
  per position, :data:`ABLATION_ROWS` rows per pass;
- ``Random``: uniform scores, seeded; the floor every method should beat.

Methods that need fitted decoders (``Decoded Grad-CAM``) say so in
:attr:`MethodSpec.needs_decoders`; :meth:`MethodSpec.build` passes them the texts
to fit the decoders on, and only such a method is given them.

Methods that explain what a causal LM generates (:attr:`MethodSpec.causal_lm`)
also have a ``generation(model, tokenizer)`` factory, built by
:meth:`MethodSpec.build_generation`: ``explain(prompt_ids, attention_mask,
target_ids) -> [batch, T, P]`` (prompts left-padded, continuations right-padded
with -100; row ``t`` explains :math:`\log p(y_t \mid \text{prompt}, y_{<t})`
under teacher forcing, docs/generation.rst), zero on padding and on missing
targets. The captum_ext methods run on the whole batch; Captum's baselines run
one prompt at a time (Captum's LLM API takes one:
:attr:`MethodSpec.one_prompt_at_a_time`), on exactly the same ids, each in its
fastest setting:

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
  costs 3x more);
- ``Random``: uniform scores seeded by each example's prompt and continuation.
"""

import zlib
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Sequence

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

from captum_ext._utils.common import classifier_forward, TokenBatch
from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.teacher_forcing import IGNORE_INDEX
from captum_ext.adapters import get_adapter
from captum_ext.attr import (
    AttCAT,
    AttentionRollout,
    CAT,
    DecodedLayerGradCam,
    EmbeddingNorm,
    GlobEnc,
    LastLayerAttention,
    LogAt,
    NormXLogit,
)
from captum_ext.defaults.decoders import load_fitted_decoders
from captum_ext.evaluation.names import (
    GENERATION_METHOD_NAMES,
    GENERATION_METRIC_NAMES,
    METHOD_NAMES,
    METRIC_NAMES,
    VARIANT_METHOD_NAMES,
)
from captum_ext.metrics import (
    aopc,
    generation_aopc,
    generation_log_odds,
    generation_soft_nc,
    generation_soft_ns,
    generation_sufficiency,
    GenerationMetricResult,
    hiding_revealing,
    kendall_tau,
    log_odds,
    MetricResult,
    sufficiency,
    TokenOptions,
)

__all__ = [
    "ABLATION_ROWS",
    "GENERATION_METRICS",
    "GenerationFn",
    "GenerationMetricContext",
    "GenerationMetricSpec",
    "IG_ROWS",
    "IG_STEPS",
    "METHODS",
    "METHOD_VARIANTS",
    "METRICS",
    "METRIC_ROWS",
    "MethodFn",
    "MethodSpec",
    "baseline_token_id",
    "method_spec",
    "MetricContext",
    "MetricSpec",
    "MetricValue",
    "decoded_layer",
    "decoders_for",
    "register_method",
    "register_generation_metric",
    "rows_of_examples",
    "register_metric",
    "needs_decoders",
]

# explain(input_ids, attention_mask, target, token_type_ids=None) -> [batch, pos]
MethodFn = Callable[..., Tensor]
# factory(model, tokenizer) -> explain; factory(model, tokenizer, decoder_texts)
# for a method that needs decoders.
MethodFactory = Callable[..., MethodFn]
# explain(prompt_ids [batch, P] left-padded, attention_mask [batch, P],
#         target_ids [batch, T] right-padded with -100) -> [batch, T, P]
GenerationFn = Callable[[Tensor, Tensor, Tensor], Tensor]
GenerationFactory = Callable[[nn.Module, Any], GenerationFn]

IG_STEPS = 16
# Rows per forward pass of FeatureAblation, of IntegratedGradients' path points
# and of the metrics' perturbed inputs: enough to keep the cores busy, far from
# memory limits at 64 tokens.
ABLATION_ROWS = 128
IG_ROWS = 256
METRIC_ROWS = 128


@dataclass(frozen=True)
class MethodSpec:
    r"""An attribution method as the engine runs it, with what it needs.

    Args:
        name (str): column/row label.
        factory (MethodFactory): ``factory(model, tokenizer)`` returns
            ``explain(input_ids, attention_mask, target, token_type_ids=None)
            -> [batch, pos]`` (see :meth:`build`).
        family (str): ``"captum_ext"``, ``"captum"`` (a baseline a user would
            pick instead), ``"baseline"`` (the simple baselines the papers beat:
            attention, attention rollout, embedding norm) or ``"control"``
            (random, which runs no forward pass).
        needs_decoders (bool): True when the factory fits decoders (costly, and
            it needs real text: the factory then takes ``decoder_texts``).
        class_agnostic (bool): True when the scores do not depend on the
            target class (Kendall-tau does not apply).
        needs_gradients (bool): True when the method runs a backward pass.
        needs_attention_weights (bool): True when it reads the attention
            probabilities (from eager attention maps, or recomputed from the
            query and key of any implementation of transformers' attention
            interface: informative, it gates nothing).
        causal_lm (bool): True when it explains what a causal LM generates
            (then ``generation`` is given, and only then).
        layer_map (MethodFactory, optional): like ``factory``, for scores per
            layer ``[batch, layers, pos]`` the report draws as a heatmap.
        generation (GenerationFactory, optional): ``generation(model,
            tokenizer)`` returns ``explain(prompt_ids, attention_mask,
            target_ids) -> [batch, T, P]`` for a causal LM (see
            :meth:`build_generation`).
        one_prompt_at_a_time (bool): True when its ``generation`` runs the
            prompts of a batch one after the other (Captum's LLM API takes one
            prompt): the benchmark then divides its time by forward passes of
            one prompt each, not by one forward over the padded batch.
    """

    name: str
    factory: MethodFactory
    family: str
    needs_decoders: bool = False
    class_agnostic: bool = False
    needs_gradients: bool = False
    needs_attention_weights: bool = False
    causal_lm: bool = False
    layer_map: Optional[MethodFactory] = None
    generation: Optional[GenerationFactory] = None
    one_prompt_at_a_time: bool = False

    def __post_init__(self) -> None:
        if self.causal_lm != (self.generation is not None):
            raise ValueError(
                f"method {self.name!r}: causal_lm=True goes with a generation "
                "factory, and only with one"
            )
        if self.one_prompt_at_a_time and not self.causal_lm:
            raise ValueError(
                f"method {self.name!r}: one_prompt_at_a_time describes a "
                "generation factory; it has none"
            )

    def build(
        self,
        model: nn.Module,
        tokenizer: Any,
        decoder_texts: Optional[Sequence[str]] = None,
        layers: bool = False,
    ) -> MethodFn:
        r"""The method's ``explain`` function for ``model`` (its per-layer one
        with ``layers=True``); ``decoder_texts`` reach only a method that needs
        decoders."""
        factory = self.layer_map if layers else self.factory
        if factory is None:
            raise ValueError(f"{self.name} has no per-layer scores")
        if self.needs_decoders:
            return factory(model, tokenizer, decoder_texts)
        return factory(model, tokenizer)

    def build_generation(self, model: nn.Module, tokenizer: Any) -> GenerationFn:
        r"""The method's ``explain(prompt_ids, attention_mask, target_ids)`` for
        a causal LM: prompts ``[batch, P]`` left-padded, their continuations
        ``[batch, T]`` right-padded with -100, scores ``[batch, T, P]`` (float32;
        float64 for a float64 model), zero on padding and on missing targets
        (docs/generation.rst)."""
        if self.generation is None:
            raise ValueError(
                f"{self.name} does not explain what a causal LM generates; "
                f"methods that do: {', '.join(GENERATION_METHOD_NAMES)}"
            )
        return self.generation(model, tokenizer)


METHODS: Dict[str, MethodSpec] = {}


def register_method(
    name: str, factory: MethodFactory, family: str, **needs: Any
) -> None:
    r"""Adds a method to :data:`METHODS` (benchmark, attribute and ``explain``);
    the keywords ``needs`` are the other fields of :class:`MethodSpec`
    (``needs_gradients=True``, ``class_agnostic=True``, ...)."""
    if name in METHODS:
        raise ValueError(f"method {name!r} is already registered")
    METHODS[name] = MethodSpec(name, factory, family, **needs)


def needs_decoders(names: Sequence[str]) -> bool:
    r"""Whether any of the named methods fits decoders (and so needs texts to
    fit them on)."""
    return any(METHODS[name].needs_decoders for name in names)


# scores(input_ids, target, forward_args) -> [batch, pos] (or [batch, layers, pos]);
# forward_args[0] is the attention mask.
ScoreFn = Callable[[Tensor, Tensor, tuple], Tensor]


def _explainer(scores: ScoreFn) -> MethodFn:
    r"""The engine's call convention, ``explain(input_ids, attention_mask, target,
    token_type_ids=None)``, around ``scores``; gradients are on whatever the
    caller's mode (gradient methods need them), and the scores come back
    detached."""

    def explain(
        input_ids: Tensor,
        attention_mask: Tensor,
        target: Tensor,
        token_type_ids: Optional[Tensor] = None,
    ) -> Tensor:
        args = TokenBatch.of(input_ids, attention_mask, token_type_ids).forward_args()
        with torch.enable_grad():
            return scores(input_ids, target, args).detach()

    return explain


# ----------------------------------------------------------- captum_ext methods
def _captum_ext(method: Callable[[nn.Module], Any], **options: Any) -> MethodFactory:
    r"""Factory for a captum_ext ``Attribution``: ``method(model).attribute(...)``
    with the engine's call convention and fixed keyword ``options``."""

    def factory(model: nn.Module, tokenizer: Any) -> MethodFn:
        attribution = method(model)

        def scores(input_ids: Tensor, target: Tensor, args: tuple) -> Tensor:
            return attribution.attribute(
                input_ids, target=target, additional_forward_args=args, **options
            )

        return _explainer(scores)

    return factory


def decoders_for(
    model: nn.Module, tokenizer: Any, texts: Optional[Sequence[str]]
) -> List[nn.Module]:
    r"""One decoder per ``hidden_states`` index for Decoded Grad-CAM, fitted on
    ``texts`` with the encoder frozen and cached (a sequence classifier has no
    masked-LM head; see
    :func:`captum_ext.defaults.decoders.load_fitted_decoders`)."""
    if not texts:
        raise ValueError(
            "Decoded Grad-CAM fits decoders on real text, and none was given for "
            "this model: pass decoder_texts (e.g. the model's training texts)"
        )
    return list(load_fitted_decoders(model, tokenizer, list(texts)).heads)


def decoded_layer(model: nn.Module) -> int:
    r"""The ``hidden_states`` index the benchmark decodes: 7/12 of the depth,
    where Hou & Castanon report the best layer on SST-2 (l7 of RoBERTa-base's
    12); l4 of the default models' 6."""
    return round(7 * get_adapter(model).num_layers / 12)


def _decoded(all_layers: bool) -> MethodFactory:
    r"""Decoded Grad-CAM at :func:`decoded_layer`, or at every layer
    (``[batch, L + 1, pos]``) from one backward pass."""

    def factory(
        model: nn.Module, tokenizer: Any, decoder_texts: Optional[Sequence[str]] = None
    ) -> MethodFn:
        decoders = decoders_for(model, tokenizer, decoder_texts)
        layer = decoded_layer(model)
        method = DecodedLayerGradCam(model, layer, decoders[layer])

        def scores(input_ids: Tensor, target: Tensor, args: tuple) -> Tensor:
            if all_layers:
                return method.attribute_all_layers(
                    input_ids, target, args, decoders=decoders
                )
            return method.attribute(input_ids, target, args)

        return _explainer(scores)

    return factory


# ----------------------------------------------------------- captum baselines
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

    def scores(input_ids: Tensor, target: Tensor, args: tuple) -> Tensor:
        # Keep [CLS]/[SEP]/pads so only the content moves along the path.
        keep = torch.isin(input_ids, special.to(input_ids.device))
        reference = torch.where(keep, input_ids, tokenizer.pad_token_id)
        attributions = ig.attribute(
            input_ids,
            baselines=reference,
            target=target,
            additional_forward_args=args,
            n_steps=IG_STEPS,
            internal_batch_size=max(IG_ROWS, len(input_ids)),
        )  # [batch, pos, d_model]
        return attributions.sum(-1) * args[0]

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


def _random(model: nn.Module, tokenizer: Any) -> MethodFn:
    r"""Uniform scores seeded by each row's tokens and target, so an example
    gets the same scores in any batch, on any rank, and other scores for
    another class (Kendall-tau asks for them)."""

    def scores(input_ids: Tensor, target: Tensor, args: tuple) -> Tensor:
        attention_mask = args[0]
        uniform = torch.zeros(input_ids.shape)  # [batch, pos]
        targets = [None] * len(input_ids)
        if target is not None:
            targets = torch.as_tensor(target).expand(len(input_ids)).tolist()
        for row, label in enumerate(targets):
            valid = attention_mask[row].bool().cpu()
            kept = input_ids[row].cpu()[valid].tolist()
            seed = zlib.crc32(repr((kept, label)).encode())
            generator = torch.Generator().manual_seed(seed)
            uniform[row, valid] = torch.rand(len(kept), generator=generator)
        return uniform.to(input_ids.device) * attention_mask

    return _explainer(scores)


# ------------------------------------------------------------ generated text
GenerationScores = Callable[[Tensor, Tensor, Tensor], Tensor]


def _generation_explainer(model: nn.Module, scores: GenerationScores) -> GenerationFn:
    r"""``explain(prompt_ids, attention_mask, target_ids)`` around ``scores``:
    gradients on (gradient methods need them), scores detached, in float32
    (float64 for a float64 model)."""
    dtype = torch.promote_types(torch.float32, next(model.parameters()).dtype)

    def explain(prompt_ids: Tensor, attention_mask: Tensor, target_ids: Tensor):
        with torch.enable_grad():
            return scores(prompt_ids, attention_mask, target_ids).detach().to(dtype)

    return explain


def _captum_ext_generation(
    method: Callable[[nn.Module], Any], **options: Any
) -> GenerationFactory:
    r"""``generation`` factory of a captum_ext ``Attribution``: the same class
    on the causal LM, teacher-forced on the given continuations, whole batch
    at once."""

    def factory(model: nn.Module, tokenizer: Any) -> GenerationFn:
        attribution = method(model)

        def scores(prompt_ids: Tensor, mask: Tensor, target_ids: Tensor) -> Tensor:
            return attribution.attribute(
                prompt_ids,
                target=target_ids,
                additional_forward_args=(mask,),
                **options,
            )  # [batch, T, P]

        return _generation_explainer(model, scores)

    return factory


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


def rows_of_examples(
    prompt_ids: Tensor, mask: Tensor, target_ids: Tensor, example_scores: Callable
) -> Tensor:
    r"""``[batch, T, P]`` filled example by example: ``example_scores(prompt
    [P_b], target [T_b]) -> [T_b, P_b]`` placed at the row's attended prompt
    positions and real target steps; zero elsewhere and for a row without
    targets."""
    out = torch.zeros(*target_ids.shape, prompt_ids.shape[1], dtype=torch.float64)
    for row in range(len(prompt_ids)):
        kept, steps = mask[row].bool(), target_ids[row] != IGNORE_INDEX
        if steps.any():
            values = example_scores(prompt_ids[row][kept], target_ids[row][steps])
            out[row, steps.nonzero(), kept.nonzero().T] = values.double().cpu()
    return out.to(prompt_ids.device)


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


def _random_generation(model: nn.Module, tokenizer: Any) -> GenerationFn:
    r"""Uniform scores seeded by each example's prompt and continuation, so an
    example gets the same scores in any batch."""

    def example(prompt: Tensor, target: Tensor) -> Tensor:
        seed = zlib.crc32(repr((prompt.tolist(), target.tolist())).encode())
        generator = torch.Generator().manual_seed(seed)
        return torch.rand(len(target), len(prompt), generator=generator)

    def scores(prompt_ids: Tensor, mask: Tensor, target_ids: Tensor) -> Tensor:
        return rows_of_examples(prompt_ids, mask, target_ids, example)

    return _generation_explainer(model, scores)


# ------------------------------------------------------------ the methods
# The GlobEnc variants by decomposition depth (see GlobEnc's ``variant``).
_GLOBENC_VARIANTS = {"GlobEnc": "N_enc", "GlobEnc N_res": "N_res", "GlobEnc N": "N"}


def _decoded_own_head(model: nn.Module) -> DecodedLayerGradCam:
    r"""Decoded Grad-CAM at :func:`decoded_layer` of a causal LM, decoded by
    the model's own final norm + LM head (nothing fitted)."""
    return DecodedLayerGradCam(model, decoded_layer(model))


def _explains_generation(method: Callable[[nn.Module], Any], **options: Any) -> Any:
    r"""The keywords of an entry that also explains generated text."""
    return dict(causal_lm=True, generation=_captum_ext_generation(method, **options))


for _name, _method in (("NormXLogit", NormXLogit), ("LogAt", LogAt)):
    register_method(
        _name, _captum_ext(_method), "captum_ext", **_explains_generation(_method)
    )
register_method(
    "AttCAT",
    _captum_ext(AttCAT),
    "captum_ext",
    layer_map=_captum_ext(AttCAT, return_layers=True),
    needs_gradients=True,
    needs_attention_weights=True,
    **_explains_generation(AttCAT),
)
register_method(
    "CAT",
    _captum_ext(CAT),
    "captum_ext",
    needs_gradients=True,
    **_explains_generation(CAT),
)
for _name, _variant in _GLOBENC_VARIANTS.items():
    register_method(
        _name,
        _captum_ext(GlobEnc, variant=_variant),
        "captum_ext",
        class_agnostic=True,
        needs_attention_weights=True,
        **_explains_generation(GlobEnc, variant=_variant),
    )
register_method(
    "Decoded Grad-CAM",
    _decoded(all_layers=False),
    "captum_ext",
    needs_decoders=True,
    layer_map=_decoded(all_layers=True),
    needs_gradients=True,
    **_explains_generation(_decoded_own_head),
)
# The simple baselines the papers beat, class-agnostic like GlobEnc.
register_method(
    "Attention",
    _captum_ext(LastLayerAttention),
    "baseline",
    class_agnostic=True,
    needs_attention_weights=True,
    **_explains_generation(LastLayerAttention),
)
register_method(
    "Attention rollout",
    _captum_ext(AttentionRollout),
    "baseline",
    class_agnostic=True,
    needs_attention_weights=True,
    **_explains_generation(AttentionRollout),
)
register_method(
    "Embedding norm", _captum_ext(EmbeddingNorm), "baseline", class_agnostic=True
)
register_method("Saliency", _saliency, "captum", needs_gradients=True)
register_method(
    "InputXGradient",
    _input_x_gradient,
    "captum",
    needs_gradients=True,
    causal_lm=True,
    generation=_input_x_gradient_generation,
    one_prompt_at_a_time=True,
)
register_method(
    "IntegratedGradients",
    _integrated_gradients,
    "captum",
    needs_gradients=True,
    causal_lm=True,
    generation=_integrated_gradients_generation,
    one_prompt_at_a_time=True,
)
register_method(
    "FeatureAblation",
    _feature_ablation,
    "captum",
    causal_lm=True,
    generation=_feature_ablation_generation,
    one_prompt_at_a_time=True,
)
register_method(
    "Random", _random, "control", causal_lm=True, generation=_random_generation
)

# The causal-LM variants of the four methods (docs/generation.rst), run on
# generated text only and only when named: (name, entry it varies, class, options).
_logit = partial(AttCAT, objective="logit")


def _with_p_t(method: Callable[..., Any]) -> Callable[[nn.Module], Any]:
    r"""``method`` scoring the predicting position's own term."""
    return partial(method, score_predicting_position=True)


METHOD_VARIANTS: Dict[str, MethodSpec] = {
    name: replace(
        METHODS[base],
        name=name,
        layer_map=None,
        generation=_captum_ext_generation(method, **options),
    )
    for name, base, method, options in (
        ("AttCAT received", "AttCAT", partial(AttCAT, alpha="received"), {}),
        ("AttCAT row", "AttCAT", partial(AttCAT, alpha="row"), {}),
        ("AttCAT logit", "AttCAT", _logit, {}),
        ("AttCAT received logit", "AttCAT", partial(_logit, alpha="received"), {}),
        ("AttCAT row logit", "AttCAT", partial(_logit, alpha="row"), {}),
        ("CAT logit", "CAT", partial(CAT, objective="logit"), {}),
        ("LogAt with p_t", "LogAt", _with_p_t(LogAt), {}),
        ("NormXLogit with p_t", "NormXLogit", _with_p_t(NormXLogit), {}),
        ("GlobEnc with p_t", "GlobEnc", _with_p_t(GlobEnc), {}),
        ("GlobEnc N with p_t", "GlobEnc N", _with_p_t(GlobEnc), {"variant": "N"}),
    )
}
if tuple(METHOD_VARIANTS) != VARIANT_METHOD_NAMES:
    raise ImportError("the registry's variants differ from VARIANT_METHOD_NAMES")


def method_spec(name: str) -> MethodSpec:
    r"""The entry of a method or of a variant (:data:`METHOD_VARIANTS`)."""
    return METHODS[name] if name in METHODS else METHOD_VARIANTS[name]


# -------------------------------------------------------------------- metrics
@dataclass
class MetricContext:
    r"""What a metric gets besides the scores: one padded batch and a way to
    explain other classes (Kendall-tau needs them)."""

    forward: Callable[..., Tensor]
    input_ids: Tensor  # [batch, pos]
    attention_mask: Tensor  # [batch, pos]
    target: Tensor  # [batch]
    tokenizer: Any
    explain: Callable[[Tensor], Tensor]
    token_type_ids: Optional[Tensor] = None  # [batch, pos], text pairs only
    labels: Optional[Tensor] = None  # [batch] gold labels, when the data has them

    @property
    def batch(self) -> TokenBatch:
        return TokenBatch.of(self.input_ids, self.attention_mask, self.token_type_ids)


@dataclass
class MetricValue:
    r"""``per_example`` ``[batch]``; ``curve`` ``[batch, len(grid)]`` when the
    metric is an area under a curve."""

    per_example: Tensor
    curve: Optional[Tensor] = None
    grid: Optional[Sequence[float]] = None


MetricCompute = Callable[[MetricContext, Tensor], Dict[str, MetricValue]]


@dataclass(frozen=True)
class MetricSpec:
    r"""A metric as the engine runs it; one call may fill several columns
    (hiding and revealing come from one pass).

    Args:
        name (str): registry name (what ``--metrics`` selects).
        compute (Callable): ``compute(context, scores)`` returns a
            :class:`MetricValue` per column.
        columns (dict[str, bool]): column label -> higher is better.
        needs_labels (bool): True when the metric scores against gold labels
            (the engine refuses it on data without labels).
        explains_other_classes (bool): True when it runs the method again for
            other classes (``context.explain``); it does not apply to a
            class-agnostic method (the engine leaves its values out: NaN in
            the table, null in JSON).
        causal_lm (bool): True when it supports causal language models.
    """

    name: str
    compute: MetricCompute
    columns: Dict[str, bool]
    needs_labels: bool = False
    explains_other_classes: bool = False
    causal_lm: bool = False


METRICS: Dict[str, MetricSpec] = {}


def register_metric(
    name: str, compute: MetricCompute, columns: Dict[str, bool], **needs: Any
) -> None:
    r"""Adds a metric to :data:`METRICS`; the keywords ``needs`` are the other
    fields of :class:`MetricSpec` (``needs_labels=True``, ...)."""
    if name in METRICS:
        raise ValueError(f"metric {name!r} is already registered")
    METRICS[name] = MetricSpec(name, compute, dict(columns), **needs)


def _call_metric(
    metric: Callable[..., Any], context: MetricContext, explanation: Any
) -> Any:
    r"""THE one place the engine calls a captum_ext metric: ``explanation`` is
    the scores, or the explain function for Kendall-tau. Every metric runs
    with its default protocol against the explained target."""
    return metric(
        context.forward,
        context.input_ids,
        explanation,
        target=context.target,
        additional_forward_args=context.batch.forward_args(),
        tokens=TokenOptions.from_tokenizer(context.tokenizer),
        internal_batch_size=METRIC_ROWS,
    )


def _value(result: MetricResult) -> MetricValue:
    return MetricValue(result.score, result.curve, result.levels.tolist())


def _curve_metric(metric: Callable[..., MetricResult], column: str) -> MetricCompute:
    r"""AOPC, LOdds and sufficiency share a signature and a result type."""

    def compute(context: MetricContext, scores: Tensor) -> Dict[str, MetricValue]:
        return {column: _value(_call_metric(metric, context, scores))}

    return compute


def _kendall_tau(context: MetricContext, scores: Tensor) -> Dict[str, MetricValue]:
    # Re-explains the batch for every class: part of the metric, not timed.
    return {
        "Kendall-tau": MetricValue(_call_metric(kendall_tau, context, context.explain))
    }


def _hiding_revealing(context: MetricContext, scores: Tensor) -> Dict[str, MetricValue]:
    # Default protocol: accuracy against the unperturbed prediction, which is
    # what the explained target is; the "decoded" preset uses gold labels.
    result = _call_metric(hiding_revealing, context, scores)
    return {"Hide": _value(result.hiding), "Reveal": _value(result.revealing)}


register_metric("aopc", _curve_metric(aopc, "AOPC"), {"AOPC": True})
register_metric("log_odds", _curve_metric(log_odds, "LOdds"), {"LOdds": False})
register_metric(
    "kendall_tau", _kendall_tau, {"Kendall-tau": False}, explains_other_classes=True
)
register_metric("hiding_revealing", _hiding_revealing, {"Hide": False, "Reveal": True})
register_metric(
    "sufficiency", _curve_metric(sufficiency, "Sufficiency"), {"Sufficiency": False}
)


# ------------------------------------------------------ metrics of generated text
@dataclass
class GenerationMetricContext:
    r"""What a metric of generated text gets besides the scores ``[batch, T,
    P]``: the prompts, their continuations and the causal LM's forward pass."""

    forward: Callable[..., Tensor]  # causal_lm_forward(model)
    input_ids: Tensor  # [batch, P], left-padded prompts
    attention_mask: Tensor  # [batch, P]
    target: Tensor  # [batch, T], right-padded with -100
    tokens: TokenOptions  # the special ids: never perturbed


GenerationMetricCompute = Callable[
    [GenerationMetricContext, Tensor], Dict[str, MetricValue]
]


@dataclass(frozen=True)
class GenerationMetricSpec:
    r"""A metric of explanations of generated text as the generation benchmark
    runs it (the counterpart of :class:`MetricSpec` for causal LMs).

    Args:
        name (str): registry name (what ``--metrics`` selects with
            ``--prompt-column`` or on the built-in task ``recall``).
        compute (Callable): ``compute(context, scores)`` returns a
            :class:`MetricValue` per column: one value per example, the mean
            over its target tokens.
        columns (dict[str, bool]): column label -> higher is better.
    """

    name: str
    compute: GenerationMetricCompute
    columns: Dict[str, bool]


GENERATION_METRICS: Dict[str, GenerationMetricSpec] = {}


def register_generation_metric(
    name: str, compute: GenerationMetricCompute, columns: Dict[str, bool]
) -> None:
    r"""Adds a metric of generated text to :data:`GENERATION_METRICS`."""
    if name in GENERATION_METRICS:
        raise ValueError(f"metric {name!r} of generated text is already registered")
    GENERATION_METRICS[name] = GenerationMetricSpec(name, compute, dict(columns))


def _generation_metric(
    metric: Callable[..., GenerationMetricResult], column: str
) -> GenerationMetricCompute:
    r"""THE one place the engine calls a metric of generated text: its default
    protocol on the teacher-forced continuation; each example's value (and
    per-level curve) is the mean of ``score`` (``curve``) over its target
    tokens (NaN ones, which the protocol skips, left out), so prompts with
    longer continuations weigh the same."""

    def compute(
        context: GenerationMetricContext, scores: Tensor
    ) -> Dict[str, MetricValue]:
        result = metric(
            context.forward,
            context.input_ids,
            scores,
            context.target,
            (context.attention_mask,),
            tokens=context.tokens,
            internal_batch_size=METRIC_ROWS,
        )
        value = MetricValue(result.score.double().nanmean(1))
        if result.levels is not None:  # a curve over the protocol's levels
            value.curve = result.curve.double().nanmean(1)  # [batch, levels]
            value.grid = result.levels.tolist()
        return {column: value}

    return compute


def _soft_erasure_metric(
    metric: Callable[..., GenerationMetricResult], column: str
) -> GenerationMetricCompute:
    r"""Soft-NC / Soft-NS, one example at a time with draws seeded by its
    prompt and continuation: the library seeds draws by row position in the
    batch, and an example's value must not depend on its batch or rank."""

    def compute(
        context: GenerationMetricContext, scores: Tensor
    ) -> Dict[str, MetricValue]:
        values = []
        for row in range(len(scores)):
            prompt = context.input_ids[row][context.attention_mask[row].bool()]
            target = context.target[row][context.target[row] != IGNORE_INDEX]
            seed = zlib.crc32(repr([prompt.tolist(), target.tolist()]).encode())
            one = slice(row, row + 1)
            result = metric(
                context.forward,
                context.input_ids[one],
                scores[one],
                context.target[one],
                (context.attention_mask[one],),
                tokens=context.tokens,
                seed=seed,
            )
            values.append(result.score.double().nanmean(1))
        return {column: MetricValue(torch.cat(values))}

    return compute


for _name, _factory, _metric, _column, _higher in (
    ("aopc", _generation_metric, generation_aopc, "AOPC", True),
    ("sufficiency", _generation_metric, generation_sufficiency, "Sufficiency", False),
    ("log_odds", _generation_metric, generation_log_odds, "LOdds", False),
    ("soft_nc", _soft_erasure_metric, generation_soft_nc, "Soft-NC", True),
    ("soft_ns", _soft_erasure_metric, generation_soft_ns, "Soft-NS", True),
):
    register_generation_metric(_name, _factory(_metric, _column), {_column: _higher})

_GENERATION = tuple(name for name, spec in METHODS.items() if spec.causal_lm)
if (tuple(METHODS), _GENERATION, tuple(METRICS), tuple(GENERATION_METRICS)) != (
    METHOD_NAMES,
    GENERATION_METHOD_NAMES,
    METRIC_NAMES,
    GENERATION_METRIC_NAMES,
):
    raise ImportError(
        "the registry's methods and metrics differ from the names of "
        "captum_ext/evaluation/names.py, from which the command line builds its "
        f"choices: {list(METHODS)}, {list(_GENERATION)}, {list(METRICS)}, "
        f"{list(GENERATION_METRICS)}"
    )

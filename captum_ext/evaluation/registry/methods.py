#!/usr/bin/env python3
r"""The registry of attribution methods, :data:`METHODS`: name ->
:class:`MethodSpec`, whose ``factory(model, tokenizer)`` returns
``explain(input_ids, attention_mask, target, token_type_ids=None) ->
[batch, pos]``; a method's ``layer_map`` gives per-layer scores ``[batch,
layers, pos]`` drawn as heatmaps. Each entry states what it needs (gradients,
attention weights, fitted decoders), whether its scores ignore the target
class and whether it supports causal language models. The entries are the
captum_ext methods, the simple baselines the papers beat, Captum's own
baselines (:mod:`~captum_ext.evaluation.registry.captum_baselines`) and
``Random``: uniform scores, seeded; the floor every method should beat.

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
one prompt at a time (:attr:`MethodSpec.one_prompt_at_a_time`); ``Random`` is
seeded by each example's prompt and continuation.
"""

import zlib
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Sequence, Type

import torch
from torch import nn, Tensor

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
from captum_ext.attr._utils.token_attribution import IMAGE_METHODS, TokenAttribution
from captum_ext.defaults.decoders import load_fitted_decoders
from captum_ext.evaluation.image_tokens import image_inputs
from captum_ext.evaluation.names import GENERATION_METHOD_NAMES, VARIANT_METHOD_NAMES
from captum_ext.evaluation.registry.call_convention import (
    _explainer,
    _generation_explainer,
    GenerationFactory,
    GenerationFn,
    MethodFactory,
    MethodFn,
    rows_of_examples,
)
from captum_ext.evaluation.registry.captum_baselines import (
    _feature_ablation,
    _feature_ablation_generation,
    _input_x_gradient,
    _input_x_gradient_generation,
    _integrated_gradients,
    _integrated_gradients_generation,
    _saliency,
)

__all__ = [
    "METHODS",
    "METHOD_VARIANTS",
    "MethodSpec",
    "decoded_layer",
    "decoders_for",
    "method_spec",
    "needs_decoders",
    "register_method",
]


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
        images (bool): True when it explains a vision transformer's images
            (its ``factory`` given an
            :class:`~captum_ext.evaluation.image_tokens.ImageTokenizer`).
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
    images: bool = False

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


# ----------------------------------------------------------- captum_ext methods
def _captum_ext(method: Callable[[nn.Module], Any], **options: Any) -> MethodFactory:
    r"""Factory for a captum_ext ``Attribution``: ``method(model).attribute(...)``
    with the engine's call convention and fixed keyword ``options`` (on the
    pixels of an image task's patch token ids)."""

    def factory(model: nn.Module, tokenizer: Any) -> MethodFn:
        attribution = method(model)

        def scores(input_ids: Tensor, target: Tensor, args: tuple) -> Tensor:
            inputs, forward_args = image_inputs(tokenizer, input_ids, args)
            return attribution.attribute(
                inputs, target=target, additional_forward_args=forward_args, **options
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


# ------------------------------------------------------------ the random control
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
    r"""Decoded Grad-CAM of a causal LM at what the attention of the block
    after ``hidden_states[decoded_layer]`` reads (its first norm's output, as
    CAT's causal-LM default; the residual stream itself below the last
    block), decoded by the model's own final norm + LM head (nothing
    fitted)."""
    layer = decoded_layer(model)
    reads = get_adapter(model).attention_input_modules()
    if reads is None or layer >= len(reads):
        return _decoded_hidden_state(model)
    return DecodedLayerGradCam(model, reads[layer])


def _decoded_hidden_state(model: nn.Module) -> DecodedLayerGradCam:
    r"""Decoded Grad-CAM of a causal LM at ``hidden_states[decoded_layer]``."""
    return DecodedLayerGradCam(model, decoded_layer(model))


def _needs(
    method: Type[TokenAttribution],
    generation_method: Optional[Callable[[nn.Module], Any]] = None,
    **options: Any,
) -> Dict[str, Any]:
    r"""The keywords of a captum_ext entry, read off the method's class: what
    it needs, and whether it explains generated text (then through
    ``generation_method``, by default the class itself, with ``options``)."""
    needs: Dict[str, Any] = dict(
        needs_gradients=method.needs_gradients,
        needs_attention_weights=method.reads_attention,
        images=method.__name__ in IMAGE_METHODS,
    )
    if method.explains_generation:
        built = generation_method or method
        needs.update(
            causal_lm=True, generation=_captum_ext_generation(built, **options)
        )
    return needs


_BASELINES: Dict[str, Type[TokenAttribution]] = {
    "Attention": LastLayerAttention,
    "Attention rollout": AttentionRollout,
    "Embedding norm": EmbeddingNorm,
}
for _name, _logat in (("NormXLogit", NormXLogit), ("LogAt", LogAt)):
    register_method(_name, _captum_ext(_logat), "captum_ext", **_needs(_logat))
register_method(
    "AttCAT",
    _captum_ext(AttCAT),
    "captum_ext",
    layer_map=_captum_ext(AttCAT, return_layers=True),
    **_needs(AttCAT),
)
register_method("CAT", _captum_ext(CAT), "captum_ext", **_needs(CAT))
for _name, _variant in _GLOBENC_VARIANTS.items():
    register_method(
        _name,
        _captum_ext(GlobEnc, variant=_variant),
        "captum_ext",
        class_agnostic=True,
        **_needs(GlobEnc, variant=_variant),
    )
register_method(
    "Decoded Grad-CAM",
    _decoded(all_layers=False),
    "captum_ext",
    needs_decoders=True,
    layer_map=_decoded(all_layers=True),
    **_needs(DecodedLayerGradCam, _decoded_own_head),
)
# The simple baselines the papers beat, class-agnostic like GlobEnc.
for _name, _method in _BASELINES.items():
    register_method(
        _name, _captum_ext(_method), "baseline", class_agnostic=True, **_needs(_method)
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
    "Random",
    _random,
    "control",
    causal_lm=True,
    generation=_random_generation,
    images=True,
)

# The causal-LM variants of the four methods (docs/generation.rst), run on
# generated text only and only when named: (name, entry it varies, class, options).
# AttCAT's and CAT's variants were measured with layers="inputs" (the default
# before "attention_inputs" was chosen) and keep it unless named otherwise.
_inputs = partial(AttCAT, layers="inputs")
_logit = partial(_inputs, objective="logit")
_outputs = partial(AttCAT, layers="outputs")


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
        ("AttCAT received", "AttCAT", partial(_inputs, alpha="received"), {}),
        ("AttCAT row", "AttCAT", partial(_inputs, alpha="row"), {}),
        ("AttCAT logit", "AttCAT", _logit, {}),
        ("AttCAT received logit", "AttCAT", partial(_logit, alpha="received"), {}),
        ("AttCAT row logit", "AttCAT", partial(_logit, alpha="row"), {}),
        ("CAT logit", "CAT", partial(CAT, layers="inputs", objective="logit"), {}),
        ("CAT outputs", "CAT", partial(CAT, layers="outputs"), {}),
        ("AttCAT outputs", "AttCAT", _outputs, {}),
        ("AttCAT received outputs", "AttCAT", partial(_outputs, alpha="received"), {}),
        ("AttCAT row outputs", "AttCAT", partial(_outputs, alpha="row"), {}),
        ("CAT inputs", "CAT", partial(CAT, layers="inputs"), {}),
        ("AttCAT inputs", "AttCAT", _inputs, {}),
        (
            "Decoded Grad-CAM hidden state",
            "Decoded Grad-CAM",
            _decoded_hidden_state,
            {},
        ),
        (
            "AttCAT received attention inputs",
            "AttCAT",
            partial(AttCAT, alpha="received", layers="attention_inputs"),
            {},
        ),
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

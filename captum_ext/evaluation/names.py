#!/usr/bin/env python3
r"""The names of the registry's methods and metrics, importable without torch
(the command line builds its choices and ``--help`` from them), and the one
check of names a user chose. :mod:`captum_ext.evaluation.registry` refuses to
import when its entries and these names differ."""

from typing import Collection, List, Optional, Sequence

__all__ = [
    "CAPTUM_METRIC_NAMES",
    "GENERATION_METHOD_CHOICES",
    "GENERATION_METHOD_NAMES",
    "GENERATION_METRIC_NAMES",
    "IMAGE_METHOD_NAMES",
    "METHOD_CHOICES",
    "METHOD_NAMES",
    "METRIC_NAMES",
    "SOURCE_NAMES",
    "VARIANT_METHOD_NAMES",
    "check_names",
]

# What a prompt column of a causal LM's explanation is (--sources): a token, or
# a source of captum_ext.attr._utils.prompt_sources.SOURCE_KINDS.
SOURCE_NAMES = ("tokens", "sentences", "lines")

METHOD_NAMES = (
    "NormXLogit",
    "LogAt",
    "AttCAT",
    "CAT",
    "GlobEnc",
    "GlobEnc N_res",
    "GlobEnc N",
    "Decoded Grad-CAM",
    "Attention",
    "Attention rollout",
    "Embedding norm",
    "Saliency",
    "InputXGradient",
    "IntegratedGradients",
    "FeatureAblation",
    "Random",
)
# The methods that explain classifiers only (the embedding norm reads no
# target and the gradient norm of a class logit has no generation entry); the
# others also explain what a causal LM generates, in the same order.
CLASSIFIER_ONLY_METHOD_NAMES = ("Embedding norm", "Saliency")
GENERATION_METHOD_NAMES = tuple(
    name for name in METHOD_NAMES if name not in CLASSIFIER_ONLY_METHOD_NAMES
)
# The methods that explain a vision transformer's images (the image task):
# the others read token ids or word embeddings.
IMAGE_METHOD_NAMES = (
    "NormXLogit",
    "LogAt",
    "AttCAT",
    "CAT",
    "Attention",
    "Attention rollout",
    "Embedding norm",
    "Random",
)
# The four methods' causal-LM definitions a careful reader could defend
# (docs/generation.rst, "Choosing the causal-LM definitions"): run only when
# named, on generated text only (the registry's ``METHOD_VARIANTS``).
VARIANT_METHOD_NAMES = (
    "AttCAT received",
    "AttCAT row",
    "AttCAT logit",
    "AttCAT received logit",
    "AttCAT row logit",
    "CAT logit",
    "CAT outputs",
    "AttCAT outputs",
    "AttCAT received outputs",
    "AttCAT row outputs",
    "CAT inputs",
    "AttCAT inputs",
    "Decoded Grad-CAM hidden state",
    "AttCAT received attention inputs",
    "LogAt with p_t",
    "NormXLogit with p_t",
    "GlobEnc with p_t",
    "GlobEnc N with p_t",
)
# What --methods accepts: every method, and for generated text the variants.
METHOD_CHOICES = METHOD_NAMES + VARIANT_METHOD_NAMES
GENERATION_METHOD_CHOICES = GENERATION_METHOD_NAMES + VARIANT_METHOD_NAMES
# Captum's own metrics (captum.metrics) come last, in both lists.
CAPTUM_METRIC_NAMES = ("infidelity", "sensitivity_max")
METRIC_NAMES = (
    "aopc",
    "log_odds",
    "kendall_tau",
    "hiding_revealing",
    "sufficiency",
) + CAPTUM_METRIC_NAMES
# The metrics of explanations of generated text (the generation benchmark).
GENERATION_METRIC_NAMES = (
    "aopc",
    "sufficiency",
    "log_odds",
    "soft_nc",
    "soft_ns",
) + CAPTUM_METRIC_NAMES


def check_names(
    names: Optional[Sequence[str]], known: Collection[str], kind: str
) -> List[str]:
    r"""``names`` validated against ``known`` (all of it when None): known,
    at least one, none listed twice."""
    if names is None:  # the variants run only when named
        return [name for name in known if name not in VARIANT_METHOD_NAMES]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown {kind}(s) {unknown}; available: {', '.join(known)}")
    if not names:
        raise ValueError(f"no {kind} chosen; available: {', '.join(known)}")
    if len(set(names)) != len(names):
        raise ValueError(f"a {kind} is listed twice: {list(names)}")
    return list(names)

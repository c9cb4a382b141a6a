#!/usr/bin/env python3
r"""Arguments of Captum's ``LLMAttribution`` / ``LLMGradientAttribution`` that
:class:`~captum_ext.attr.LLMTokenAttribution` accepts, checked against what its
method can honour: each is honoured with Captum's meaning, or refused with an
error that names the argument, the method and what to do instead."""

import inspect
from typing import Any, List, Mapping, Optional

from captum.attr import TextTemplateInput, TextTokenInput
from captum.attr._core.llm_attr import LLMAttribution, LLMGradientAttribution

__all__ = ["ATTR_TARGETS", "check_attr_target", "check_keywords", "check_baselines"]

# Captum's LLMAttribution(attr_target=...) values.
ATTR_TARGETS = ("log_prob", "prob")


def check_attr_target(method: Any, attr_target: Optional[str]) -> None:
    r"""``attr_target`` (Captum's ``"log_prob"`` or ``"prob"``, or None for
    the method's own objective) is defined for a method whose ``objective`` is
    ``"log_prob"`` (its rows differentiate :math:`\log p(y_t)`); any other
    method explains another quantity, so it is refused."""
    if attr_target is None:
        return
    if attr_target not in ATTR_TARGETS:
        raise ValueError(
            f"attr_target must be one of {ATTR_TARGETS} (Captum's) or None (the "
            f"method's own objective), got {attr_target!r}"
        )
    name = type(method).__name__
    objective = getattr(method, "objective", None)
    if objective != "log_prob":
        what = f"the {objective} of y_t" if objective else "its own score of y_t"
        raise ValueError(
            f"attr_target={attr_target!r} cannot be honoured by {name}: it explains "
            f"{what}, not log p(y_t), and its scores do not convert; leave "
            f"attr_target out (the rows are {name}'s own scores) or use a method "
            "with objective='log_prob' (CAT(model), AttCAT(model))"
        )


def check_baselines(inp: Any, method: Any) -> None:
    r"""Captum's inputs carry ``baselines`` for perturbation methods; a
    captum_ext method replaces no feature by a baseline, so an input whose
    baselines differ from Captum's defaults is refused."""
    if isinstance(inp, TextTemplateInput):
        given = callable(inp.baselines) or any(b != "" for b in inp.baselines)
    elif isinstance(inp, TextTokenInput):
        given = inp.baselines != 0
    else:
        return
    if given:
        name = type(method).__name__
        raise ValueError(
            f"the {type(inp).__name__} has baselines, but {name} perturbs nothing: "
            "it explains the prompt as written and cannot score its features "
            f"against baselines (Captum's LLMAttribution(FeatureAblation(model), "
            "tokenizer) does); drop baselines=..., or explain the baseline prompt "
            "in a second call and compare the two results"
        )


def check_keywords(method: Any, keywords: Mapping[str, Any]) -> None:
    r"""Raises ``TypeError`` for a keyword that ``method.attribute`` does not
    take, naming the method and the Captum methods that take it."""
    parameters = inspect.signature(method.attribute).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    for keyword in keywords:
        if keyword not in parameters:
            owners = _captum_methods_taking(keyword)
            where = (
                f"; it is a keyword of Captum's {', '.join(owners)}.attribute()"
                if owners
                else ""
            )
            name = type(method).__name__
            raise TypeError(
                f"{keyword} is not a keyword of {name}.attribute(){where}, and "
                f"LLMTokenAttribution runs {name}: drop {keyword}=..."
            )


def _captum_methods_taking(keyword: str) -> List[str]:
    methods = (
        LLMAttribution.SUPPORTED_METHODS + LLMGradientAttribution.SUPPORTED_METHODS
    )
    return [
        m.__name__
        for m in methods
        if keyword in inspect.signature(m.attribute).parameters
    ]

#!/usr/bin/env python3
r"""Faithfulness and plausibility metrics for token attributions, in the manner of
:mod:`captum.metrics`.

Faithfulness (perturbation curves): :func:`aopc`, :func:`log_odds`,
:func:`sufficiency`, :func:`hiding_revealing`. Class sensitivity:
:func:`kendall_tau`, :func:`token_overlap`. Plausibility against known evidence:
:func:`average_precision`, :func:`dot_product`. Each has one clean default,
documented in its docstring, and presets reproducing the papers' protocols
(``preset="attcat"``, ``"normxlogit"``, ``"decoded"``, ``"ferret"``), all in
one typed table (:func:`get_protocol`). The tokenizer's ids go in one
:class:`TokenOptions` (``tokens=TokenOptions.from_tokenizer(tokenizer)``).
"""

from captum_ext.metrics._core.aopc import aopc
from captum_ext.metrics._core.average_precision import average_precision
from captum_ext.metrics._core.dot_product import dot_product
from captum_ext.metrics._core.hiding_revealing import hiding_revealing
from captum_ext.metrics._core.kendall_tau import kendall_tau
from captum_ext.metrics._core.log_odds import log_odds
from captum_ext.metrics._core.sufficiency import sufficiency
from captum_ext.metrics._core.token_overlap import token_overlap
from captum_ext.metrics._utils.inputs import TokenOptions
from captum_ext.metrics._utils.protocols import (
    get_protocol,
    KendallProtocol,
    PerturbationProtocol,
)
from captum_ext.metrics._utils.results import (
    HidingRevealingResult,
    MetricResult,
    TokenOverlapResult,
)

__all__ = [
    "HidingRevealingResult",
    "KendallProtocol",
    "MetricResult",
    "PerturbationProtocol",
    "TokenOptions",
    "TokenOverlapResult",
    "aopc",
    "average_precision",
    "dot_product",
    "get_protocol",
    "hiding_revealing",
    "kendall_tau",
    "log_odds",
    "sufficiency",
    "token_overlap",
]

#!/usr/bin/env python3
r"""captum_ext: transformer token-attribution methods and faithfulness metrics for
Captum. Methods live in :mod:`captum_ext.attr`, metrics in :mod:`captum_ext.metrics`,
evaluation jobs on your own model and data in :mod:`captum_ext.evaluation`, and
one text explained by several methods in :func:`captum_ext.explain.explain`.

The names below are imported on first use, so ``import captum_ext`` (and
``captum-ext --help``) does not import torch.
"""

from captum_ext._utils.lazy import lazy_attributes

__version__ = "0.1.0"

# name -> the module that defines it, imported on first use
_WHERE = {
    "ModelAdapter": "captum_ext.adapters",
    "UnsupportedModelError": "captum_ext.adapters",
    "causal_lm_forward": "captum_ext._utils.common",
    "classifier_forward": "captum_ext._utils.common",
    "get_adapter": "captum_ext.adapters",
}
__all__ = list(_WHERE)

__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, globals())

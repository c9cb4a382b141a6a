#!/usr/bin/env python3
r"""captum_ext: transformer token-attribution methods and faithfulness metrics for
Captum.

The library, which depends only on captum, torch, transformers and numpy and
downloads, trains and reads nothing: methods in :mod:`captum_ext.attr`, metrics in
:mod:`captum_ext.metrics`, architectures in :mod:`captum_ext.adapters`, records
and highlighting in :mod:`captum_ext.visualization`. The application on top of
it: the default models and their data in :mod:`captum_ext.defaults`, evaluation
jobs on your own model and data (and one text explained by several methods,
:func:`captum_ext.evaluation.explain.explain`) in :mod:`captum_ext.evaluation`,
and the command line in :mod:`captum_ext.cli`. Layers import downwards only
(``cli -> evaluation -> defaults -> library``); ``lint-imports`` checks it with
the contracts in ``setup.cfg``.

The names below are imported on first use, so ``import captum_ext`` (and
``captum-ext --help``) does not import torch.
"""

from captum_ext._utils.lazy import lazy_attributes

__version__ = "0.1.0"

# name -> the module that defines it, imported on first use
_WHERE = {
    "ModelAdapter": "captum_ext.adapters",
    "UnsupportedModelError": "captum_ext.adapters",
    "causal_lm_forward": "captum_ext._utils.model_forward",
    "classifier_forward": "captum_ext._utils.model_forward",
    "get_adapter": "captum_ext.adapters",
}
__all__ = list(_WHERE)

__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, globals())

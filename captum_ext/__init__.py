#!/usr/bin/env python3
r"""captum_ext: transformer token-attribution methods and faithfulness metrics for
Captum. Methods live in :mod:`captum_ext.attr`, metrics in :mod:`captum_ext.metrics`.
"""

from captum_ext._utils.common import classifier_forward
from captum_ext.adapters import get_adapter, ModelAdapter, UnsupportedModelError

__version__ = "0.1.0"

__all__ = [
    "ModelAdapter",
    "UnsupportedModelError",
    "classifier_forward",
    "get_adapter",
]

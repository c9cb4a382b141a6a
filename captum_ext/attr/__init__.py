#!/usr/bin/env python3
r"""Token-attribution methods for Hugging Face transformers, in Captum's API."""

from captum_ext.attr._core.attcat import AttCAT
from captum_ext.attr._core.cat import CAT
from captum_ext.attr._core.globenc import GlobEnc
from captum_ext.attr._core.logat import LogAt
from captum_ext.attr._core.normxlogit import NormXLogit

__all__: list = ["AttCAT", "CAT", "GlobEnc", "LogAt", "NormXLogit"]

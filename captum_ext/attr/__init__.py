#!/usr/bin/env python3
r"""Token-attribution methods for Hugging Face transformers, in Captum's API."""

__all__: list = []

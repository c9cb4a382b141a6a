#!/usr/bin/env python3
r"""The error every adapter raises for a model it cannot serve."""


class UnsupportedModelError(ValueError):
    r"""Raised when a model (or one of its parts) is not supported by a method."""

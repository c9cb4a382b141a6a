#!/usr/bin/env python3
r"""Faithfulness and plausibility metrics for token attributions."""

__all__: list = []

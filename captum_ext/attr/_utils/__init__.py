#!/usr/bin/env python3
r"""Computations shared by several attribution methods (not public API)."""

#!/usr/bin/env python3
r"""Evaluation jobs on users' models and data: loading, the benchmark engine and
dataset attribution, in one process or across ranks under ``torchrun``.

This floor sits above :mod:`captum_ext.attr` and :mod:`captum_ext.metrics`:
it imports them, never the other way round.
"""

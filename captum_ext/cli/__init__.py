#!/usr/bin/env python3
r"""The ``captum-ext`` command line: argument parsing only (one record per
command, built from the options declared once in
:mod:`~captum_ext.cli.options`); the work is done by
:func:`captum_ext.evaluation.explain.explain`,
:func:`captum_ext.evaluation.explain_generation.explain_generation`,
:func:`captum_ext.evaluation.benchmark` and
:func:`captum_ext.evaluation.attribute.attribute_dataset`.

``captum-ext explain "text"`` prints the prediction and every method's token
scores; ``captum-ext explain-generation "prompt"`` what a causal LM generates
and every method's target x prompt scores; ``captum-ext benchmark`` scores
methods with metrics on your model and data (``--model DIR --data FILE``, with
``--prompt-column`` for a causal LM) or on the built-in tasks (two classifiers,
one generator), and writes a report; ``captum-ext attribute`` writes a whole
dataset's attributions. Every error ends in one line on stderr and a
non-zero exit (``--debug`` shows the traceback). Heavy imports happen inside
the commands, which keeps ``--help`` fast.
"""

from captum_ext.cli.entry import main

__all__ = ["main"]

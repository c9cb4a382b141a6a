#!/usr/bin/env python3
r"""Attributions for a whole dataset, written as Parquet shards that a killed
run resumes, in one process or across ranks under ``torchrun``.

The user guide (layout of the output directory, columns, resuming, several
machines, what survives a kill) is ``docs/guide/attribute.rst``; the modules:

- :mod:`~captum_ext.evaluation.attribute.runner`: :func:`attribute_dataset`,
  the output directory agreed between ranks and the shards written;
- :mod:`~captum_ext.evaluation.attribute.plans`: what differs between a
  classifier's run and a causal LM's (checks, manifest arguments, schema);
- :mod:`~captum_ext.evaluation.attribute.shard_builders`: the per-batch work,
  one builder per kind of model;
- :mod:`~captum_ext.evaluation.attribute.manifest`: the run's manifest and the
  data and model fingerprints a rerun must match;
- :mod:`~captum_ext.evaluation.attribute.schema`: the Parquet schema of a run;
- :mod:`~captum_ext.evaluation.attribute.shards`: shard names, slices, atomic
  writes and the verification of finished shards on resume;
- :mod:`~captum_ext.evaluation.attribute.lock`: one writer per output
  directory;
- :mod:`~captum_ext.evaluation.attribute.prediction`: the logits of a
  method's own forward pass, so the prediction costs no extra pass.
"""

from captum_ext.evaluation.attribute.lock import OutputLockedError
from captum_ext.evaluation.attribute.manifest import ManifestMismatchError
from captum_ext.evaluation.attribute.runner import attribute_dataset

__all__ = [
    "ManifestMismatchError",
    "OutputLockedError",
    "attribute_dataset",
]

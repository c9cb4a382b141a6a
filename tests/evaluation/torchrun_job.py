#!/usr/bin/env python3
r"""``attribute_dataset`` as a user runs it under ``torchrun``; launched by
tests/evaluation/test_distributed.py.

Usage::

    python -m torch.distributed.run --nproc-per-node 2 ... \
        tests/evaluation/torchrun_job.py MODEL_DIR DATA_FILE OUT_DIR

With ``EXIT_AFTER_FIRST_SHARD=<rank>`` in the environment that rank dies right
after writing its first shard, as a killed process would.
"""

import os
import sys
from typing import Any, Dict

import torch
from captum_ext.evaluation import attribute
from captum_ext.evaluation.attribute import runner
from captum_ext.evaluation.user_data import load_data
from transformers import AutoModelForSequenceClassification, AutoTokenizer

METHODS = ["NormXLogit", "AttCAT"]
OPTIONS: Dict[str, Any] = dict(
    batch_size=2, shard_size=2, max_length=10, progress=False
)


def _die_after_first_shard() -> None:
    write = runner.write_shard

    def write_then_die(*args, **kwargs) -> None:
        write(*args, **kwargs)
        os._exit(3)

    runner.write_shard = write_then_die


def run(model_dir: str, data_file: str, out: str) -> None:
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, attn_implementation="eager"
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    data = load_data(data_file, label_column="label", label2id=model.config.label2id)
    attribute.attribute_dataset(model, tokenizer, data, METHODS, out, **OPTIONS)


if __name__ == "__main__":
    torch.set_num_threads(1)
    if os.environ.get("EXIT_AFTER_FIRST_SHARD") == os.environ.get("RANK"):
        _die_after_first_shard()
    run(*sys.argv[1:4])

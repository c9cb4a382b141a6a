#!/usr/bin/env python3
r"""How well GlobEnc agrees with gradient x input, the GlobEnc paper's protocol.

For each held-out snippet of ``load_split("sentiment")`` (the first ``--n``), the
Spearman correlation between a method's scores and the reference saliency
``||grad x input||`` (L2 norm over the hidden dimension of the gradient of the
predicted class's logit times the embedding-layer output ``hidden_states[0]``),
over all real tokens, [CLS] and [SEP] included. Prints mean +- std per method:

- ``GlobEnc N_enc`` / ``N_res`` / ``N``: rolled out over all layers;
- ``GlobEnc N_enc, last layer``: ``N^L`` alone, no rollout;
- ``Raw attention rollout``: :class:`captum_ext.attr.AttentionRollout`, attention
  averaged over heads, plain matrix products without residual or normalisation
  (the reference notebook's "W" rollout).

Reference (BERT-base on SST-2, reference notebook): N_enc 0.77 +- 0.12, N_res
0.73, N 0.44, raw attention rollout -0.11, last layer N_enc 0.41.

Usage::

    python -m benchmarks.globenc_faithfulness          # 200 snippets
    python -m benchmarks.globenc_faithfulness --n 50
"""

import argparse
from typing import Callable, Dict, List, Sequence

import numpy as np
from benchmarks.common import embedding_grad_x_activation, encode
from captum_ext.attr import AttentionRollout, GlobEnc
from scipy.stats import spearmanr
from torch import nn, Tensor

Explainer = Callable[[Tensor, Tensor], Tensor]  # (input_ids, mask) -> [batch, pos]


def grad_x_input_norm(model: nn.Module, input_ids: Tensor, mask: Tensor) -> Tensor:
    r"""``||d logit_pred / d h0 * h0||_2`` per token, ``[batch, pos]``, where ``h0``
    is the embedding-layer output and ``pred`` each example's predicted class."""
    return embedding_grad_x_activation(model, input_ids, mask).norm(dim=-1)


def explainers(model: nn.Module) -> Dict[str, Explainer]:
    globenc = GlobEnc(model)
    raw_rollout = AttentionRollout(model)

    def globenc_row(variant: str, rollout: bool = True) -> Explainer:
        return lambda ids, mask: globenc.attribute(
            ids, additional_forward_args=(mask,), variant=variant, rollout=rollout
        )

    return {
        "GlobEnc N_enc": globenc_row("N_enc"),
        "GlobEnc N_res": globenc_row("N_res"),
        "GlobEnc N": globenc_row("N"),
        "GlobEnc N_enc, last layer": globenc_row("N_enc", rollout=False),
        "Raw attention rollout": lambda ids, mask: raw_rollout.attribute(
            ids, additional_forward_args=(mask,)
        ),
    }


def spearman_per_example(
    scores: Tensor, reference: Tensor, mask: Tensor
) -> List[float]:
    r"""Spearman correlation over each example's real tokens."""
    return [
        spearmanr(s[m.bool()].double(), r[m.bool()].double()).statistic
        for s, r, m in zip(scores, reference, mask)
    ]


def correlations(
    model: nn.Module,
    tokenizer: object,
    texts: Sequence[str],
    methods: Dict[str, Explainer],
    max_length: int = 64,
    batch_size: int = 32,
) -> Dict[str, np.ndarray]:
    r"""Per-example Spearman correlation with :func:`grad_x_input_norm`, per
    method (NaN where a side is constant)."""
    results: Dict[str, List[float]] = {name: [] for name in methods}
    for start in range(0, len(texts), batch_size):
        ids, mask = encode(tokenizer, texts[start : start + batch_size], max_length)
        reference = grad_x_input_norm(model, ids, mask)
        for name, explain in methods.items():
            results[name] += spearman_per_example(explain(ids, mask), reference, mask)
    return {name: np.array(values) for name, values in results.items()}


def main() -> None:
    from captum_ext.defaults.data import load_split
    from captum_ext.defaults.models import load_default_model, MAX_LENGTH

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200, help="held-out snippets")
    args = parser.parse_args()
    model, tokenizer = load_default_model("sentiment")
    texts = load_split("sentiment").texts[: args.n]
    table = correlations(model, tokenizer, texts, explainers(model), MAX_LENGTH)
    print(f"Spearman with ||grad x input||, {len(texts)} held-out sentiment snippets")
    print(f"{'method':<28} {'mean':>6} {'std':>6}")
    for name, values in table.items():
        print(f"{name:<28} {np.nanmean(values):6.3f} {np.nanstd(values):6.3f}")


if __name__ == "__main__":
    main()

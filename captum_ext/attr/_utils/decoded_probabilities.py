#!/usr/bin/env python3
r"""Hidden states decoded through the vocabulary onto the input tokens, for
decoded layer attribution
(:mod:`captum_ext.attr._core.layer.decoded_layer_attribution`): the
probabilities ``D[b, j, i] = softmax(decoder(h[b, j]))[t_i]`` (Hou &
Castanon, ICML 2023, Eq. 4), or their sums against per-position scores
without forming ``D``."""

from typing import Callable, Optional

import torch
from torch import Tensor

from captum_ext._utils.decoder_vocabulary import check_decoder_vocabulary
from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.token_ids import TokenBatch
from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = [
    "check_decoded_ids",
    "decoded_input_probabilities",
    "decoded_token_sums",
    "Decoder",
]

Decoder = Callable[[Tensor], Tensor]  # [batch, pos, d] -> [batch, pos, vocab]

# Hidden-state rows decoded at once: bounds the [rows, vocab] logits (about
# 60 MiB for a 30k vocabulary in float32).
_DECODE_ROWS = 512


def check_decoded_ids(ids: Tensor, vocab_size: int) -> None:
    r"""Raises unless every input id is a column of the decoder's logits."""
    if ids.numel() and int(ids.max()) >= vocab_size:
        raise ValueError(
            f"input id {int(ids.max())} is outside the decoder's vocabulary of "
            f"{vocab_size} tokens; decode with a head over the inputs' vocabulary"
        )


@torch.no_grad()
def decoded_input_probabilities(
    decoder: Decoder, hidden: Tensor, batch: TokenBatch, vocab_size: Optional[int]
) -> Tensor:
    r"""``D[b, j, i] = softmax(decoder(h[b, j]))[t_i]``: the probability, over the
    full vocabulary, that position ``j`` decodes to the token at position ``i``.

    Args:
        decoder (Callable): ``[1, rows, d] -> [1, rows, vocab]`` logits.
        hidden (Tensor): ``[batch, pos, d]``, ``h_l``.
        batch (TokenBatch): the input ids and masks.
        vocab_size (int or None): the model's vocabulary size, which the
            decoder must match; None: the decoder's own, which must hold every
            input id.

    Returns:
        Tensor ``[batch, pos, pos]`` (rows ``j``, columns ``i``) in float32 (or
        wider), zero on pad rows.
    """
    example, position = batch.valid.nonzero(as_tuple=True)  # decode real tokens only
    states = hidden[example, position]  # [rows, d]
    tokens = batch.input_ids[example]  # [rows, pos]: the tokens of each row's example
    dtype = result_dtype(hidden.dtype)
    pieces = []
    with eval_semantics(decoder):
        for start in range(0, len(states), _DECODE_ROWS):
            # The vocabulary matmul runs in the decoder's dtype; the log-sum-exp
            # over the vocabulary in float32.
            logits = decoder(states[None, start : start + _DECODE_ROWS])[0].to(dtype)
            check_decoder_vocabulary(logits, vocab_size or logits.shape[-1])
            rows = tokens[start : start + _DECODE_ROWS]
            check_decoded_ids(rows, logits.shape[-1])
            chosen = logits.gather(-1, rows)
            pieces.append((chosen - logits.logsumexp(-1, keepdim=True)).exp())
    shape = batch.input_ids.shape + batch.input_ids.shape[1:]
    probabilities = hidden.new_zeros(shape, dtype=dtype)
    probabilities[example, position] = torch.cat(pieces)
    return probabilities


@torch.no_grad()
def decoded_token_sums(
    decoder: Decoder,
    hidden: Tensor,
    batch: TokenBatch,
    position_scores: Tensor,
    vocab_size: int,
) -> Tensor:
    r"""``sum_j D[b, j, i] a[b, r, j]`` for every row ``r`` of per-position
    scores, without forming ``D`` (:func:`decoded_input_probabilities`): with
    ``D[b, j, i] = softmax(decoder(h[b, j]))[t_i]`` the sum is the vocabulary
    vector ``w_r = sum_j a_{r,j} softmax(decoder(h_j))`` read at ``t_i``, so
    memory and time are linear in the positions (tau None only:
    a top-tau mask depends on ``D``'s ranks).

    Args:
        decoder (Callable): ``[1, rows, d] -> [1, rows, vocab]`` logits.
        hidden (Tensor): ``[batch, pos, d]``, ``h_l``.
        batch (TokenBatch): the input ids and masks (pad rows ``j`` decode
                    nothing).
        position_scores (Tensor): ``[batch, R, pos_j]``, ``a_{r,j}``.
        vocab_size (int): the model's vocabulary size; the decoder must match it.

    Returns:
        Tensor ``[batch, R, pos_i]`` in float32 (or wider).
    """
    dtype = result_dtype(hidden.dtype)
    per_example = []
    with eval_semantics(decoder):
        for example in range(len(hidden)):
            real = batch.valid[example].nonzero().flatten()  # decode real rows only
            scores = position_scores[example].to(dtype)  # [R, pos]
            weights = scores.new_zeros(len(scores), vocab_size)  # [R, vocab]
            for start in range(0, len(real), _DECODE_ROWS):
                rows = real[start : start + _DECODE_ROWS]
                # The vocabulary matmul in the decoder's dtype, the rest in float32.
                logits = decoder(hidden[example, rows][None])[0].to(dtype)
                check_decoder_vocabulary(logits, vocab_size)
                # In place: a block of rows over the vocabulary is the peak.
                probabilities = logits.sub_(logits.logsumexp(-1, keepdim=True)).exp_()
                weights += scores[:, rows] @ probabilities
            per_example.append(weights[:, batch.input_ids[example]])
    return torch.stack(per_example)

#!/usr/bin/env python3
r"""The per-shard work of :func:`~captum_ext.evaluation.attribute.attribute_dataset`:
a shard's examples in batches, each batch's output columns, put back in data
order and checked against the run's schema (:class:`ShardBuilder`); a
classifier's columns (:class:`ClassifierShards`) and a causal LM's
(:class:`CausalLMShards`) are what differs."""

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import torch
from torch import nn, Tensor

from captum_ext._utils.model_forward import classifier_forward
from captum_ext.attr._utils.continuations import right_padded
from captum_ext.attr._utils.llm_prompts import Prompt
from captum_ext.evaluation.attribute.prediction import (
    first_logits,
    predicts_with_target_none,
)
from captum_ext.evaluation.attribute.schema import (
    generation_source_columns,
    source_columns,
)
from captum_ext.evaluation.attribute.sources import by_source
from captum_ext.evaluation.engine.classifier_metrics import (
    explain_batch,
    metric_values,
    SharedForward,
)
from captum_ext.evaluation.prompt_batches import EncodedPrompts, prompt_batches
from captum_ext.evaluation.tokenized_batches import bucketed_batches, EncodedBatch
from captum_ext.evaluation.user_data import LoadedExamples

__all__ = ["CausalLMShards", "ClassifierShards", "ShardBuilder"]

# Per batch: its positions in the shard and its output columns.
Batches = Iterator[Tuple[List[int], Iterator[Tuple[str, List[Any]]]]]


class ShardBuilder:
    r"""The per-shard work shared by both kinds of model: batches of a shard,
    their columns put back in data order, checked against the run's schema.
    A kind of model supplies :meth:`batches`, :meth:`source_columns` and
    :meth:`truncated`."""

    def shard_table(
        self,
        data: LoadedExamples,
        schema: pa.Schema,
        batch_size: int,
        device: torch.device,
        advance: Callable[[int], None],
    ) -> pa.Table:
        r"""One shard's rows, in the order of ``data``, with ``schema``;
        ``advance(n)`` after each batch of ``n`` examples."""
        columns: Dict[str, List[Any]] = {}
        order: List[int] = []
        for rows, batch_columns in self.batches(data, batch_size, device):
            for name, values in batch_columns:
                columns.setdefault(name, []).extend(values)
            order.extend(rows)
            advance(len(rows))
        back = sorted(range(len(order)), key=order.__getitem__)
        columns = self.source_columns(data) | {
            name: [values[i] for i in back] for name, values in columns.items()
        }
        if set(columns) != set(schema.names):  # the schema is the run's contract
            raise RuntimeError(
                f"shard columns {sorted(columns)} are not the run's schema "
                f"{schema.names}"
            )
        return pa.Table.from_pydict(columns, schema=schema)

    def batches(
        self, data: LoadedExamples, batch_size: int, device: torch.device
    ) -> Batches:
        r"""Per batch: its data positions and its output columns."""
        raise NotImplementedError

    def source_columns(self, data: LoadedExamples) -> Dict[str, List[Any]]:
        r"""The columns copied from ``data``."""
        raise NotImplementedError

    def truncated(self, table: pa.Table) -> int:
        r"""How many of a written shard's texts were cut to ``max_length``."""
        raise NotImplementedError


class ClassifierShards(ShardBuilder):
    r"""A classifier's batch: prediction, each method's scores, metric values."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        method_specs: Sequence[Any],
        metric_specs: Sequence[Any],
        max_length: int,
        target: str,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.forward = classifier_forward(model)
        self.names = [spec.name for spec in method_specs]
        self.families = [spec.family for spec in method_specs]
        self.explainers = [spec.factory(model, tokenizer) for spec in method_specs]
        self.metric_specs = list(metric_specs)
        self.max_length = max_length
        self.target = target  # "predicted" or "label"

    def batches(
        self, data: LoadedExamples, batch_size: int, device: torch.device
    ) -> Batches:
        gold = data.labels if self.target == "label" else None
        for batch in bucketed_batches(
            self.tokenizer,
            data.texts,
            data.text_pairs,
            batch_size=batch_size,
            max_length=self.max_length,
        ):
            classes = None if gold is None else [gold[i] for i in batch.rows]
            yield batch.rows, self.batch_columns(batch.to(device), classes)

    def source_columns(self, data: LoadedExamples) -> Dict[str, List[Any]]:
        return source_columns(data)

    def truncated(self, table: pa.Table) -> int:
        return sum(table.column("truncated").to_pylist())

    def batch_columns(
        self, batch: EncodedBatch, classes: Optional[List[int]]
    ) -> Iterator[Tuple[str, List[Any]]]:
        r"""Output columns of one batch; ``classes`` to explain, or None for the
        predicted ones."""
        device = batch.input_ids.device
        gold = None if classes is None else torch.tensor(classes, device=device)
        first_scores, logits = self._first_method(batch, gold)
        probabilities = logits.float().softmax(-1)  # [batch, classes]
        predicted = probabilities.argmax(-1)
        target = predicted if gold is None else gold
        valid = batch.attention_mask.bool()  # [batch, pos]
        ids = [row[keep].tolist() for row, keep in zip(batch.input_ids, valid)]
        yield "tokens", [self.tokenizer.convert_ids_to_tokens(row) for row in ids]
        yield "input_ids", ids
        if batch.token_type_ids is not None:
            yield "token_type_ids", [
                row[keep].tolist() for row, keep in zip(batch.token_type_ids, valid)
            ]
        yield "truncated", list(batch.truncated)
        yield "predicted", predicted.tolist()
        yield "probabilities", probabilities.cpu().tolist()
        yield "target", target.tolist()
        shared = SharedForward(self.forward)  # one forward per distinct row
        for index, name in enumerate(self.names):
            explain = self.explainers[index]
            scores = (
                first_scores if index == 0 else explain_batch(explain, batch, target)
            )
            yield name, _per_token(scores, valid, name)
            for column, value in metric_values(
                self.metric_specs,
                shared,
                batch,
                target,
                scores,
                explain,
                self.tokenizer,
            ):
                yield f"{name}/{column}", value.per_example.reshape(-1).tolist()

    def _first_method(
        self, batch: EncodedBatch, gold: Optional[Tensor]
    ) -> Tuple[Tensor, Tensor]:
        r"""The first method's scores and the model's logits ``[batch, C]``.

        The logits come from the first method's own forward pass when they can
        (a plain prediction pass would cost NormXLogit half its speed): with
        gold targets, or for captum_ext methods, whose ``target=None`` is the
        predicted class. Otherwise, or when that pass cannot be recognised, a
        ``no_grad`` forward predicts first and the method gets the classes.
        """
        explain = self.explainers[0]
        if gold is not None or predicts_with_target_none(self.families[0]):
            with first_logits(self.model, batch) as seen:
                scores = explain_batch(explain, batch, gold)
            if seen:
                return scores, seen[0]
            if gold is not None:
                return scores, self._logits(batch)
        logits = self._logits(batch)
        target = gold if gold is not None else logits.argmax(-1)
        return explain_batch(explain, batch, target), logits

    def _logits(self, batch: EncodedBatch) -> Tensor:
        with torch.no_grad():
            return self.forward(batch.input_ids, *batch.forward_args())


class CausalLMShards(ShardBuilder):
    r"""A causal LM's batch: left-padded prompts, their given or greedily
    generated continuations, each method's ``[T, P]`` matrix per prompt.
    ``encoded`` holds ``data``'s token ids
    (:func:`~captum_ext.evaluation.prompt_batches.encode_prompts`, checked
    before any work)."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        method_specs: Sequence[Any],
        data: LoadedExamples,
        encoded: EncodedPrompts,
        groups: Optional[List[Prompt]] = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.names = [spec.name for spec in method_specs]
        self.explainers = [
            spec.build_generation(model, tokenizer) for spec in method_specs
        ]
        self.encoded = encoded
        self.groups = groups  # each prompt's sources; None: its tokens
        self._position = {row: i for i, row in enumerate(data.rows)}

    def batches(
        self, data: LoadedExamples, batch_size: int, device: torch.device
    ) -> Batches:
        positions = [self._position[row] for row in data.rows]
        in_shard = {position: i for i, position in enumerate(positions)}
        for batch in prompt_batches(
            self.model, self.tokenizer, self.encoded, positions, batch_size, device
        ):
            groups = None
            if self.groups is not None:
                groups = [self.groups[position] for position in batch.rows]
            columns = self._columns(
                batch.input_ids,
                batch.attention_mask,
                batch.prompts,
                batch.continuations,
                groups,
            )
            yield [in_shard[position] for position in batch.rows], columns

    def _columns(
        self,
        ids: Tensor,
        mask: Tensor,
        prompts: List[Tensor],
        continuations: List[Tensor],
        groups: Optional[List[Prompt]],
    ) -> Iterator[Tuple[str, List[Any]]]:
        prompt_ids = [prompt.tolist() for prompt in prompts]
        target_ids = [row.tolist() for row in continuations]
        to_tokens = self.tokenizer.convert_ids_to_tokens
        yield "tokens", [to_tokens(row) for row in prompt_ids]
        yield "input_ids", prompt_ids
        if groups is not None:
            yield "sources", [list(group.names) for group in groups]
        yield "continuation_tokens", [to_tokens(row) for row in target_ids]
        yield "continuation_ids", target_ids
        if self.encoded.given is None:
            yield "continuation", [self.tokenizer.decode(row) for row in target_ids]
        target = right_padded(continuations, ids.device)  # [batch, T]
        for name, explain in zip(self.names, self.explainers):
            scores = explain(ids, mask, target)  # [batch, T, P]
            matrices = _matrices(scores, prompt_ids, target_ids, name)
            yield name, matrices if groups is None else by_source(matrices, groups)

    def source_columns(self, data: LoadedExamples) -> Dict[str, List[Any]]:
        return generation_source_columns(data)

    def truncated(self, table: pa.Table) -> int:
        return 0  # too long a prompt is refused before any work


def _per_token(scores: Tensor, valid: Tensor, name: str) -> List[List[float]]:
    if scores.shape != valid.shape:
        raise ValueError(
            f"method {name!r} returned scores of shape {tuple(scores.shape)}, "
            f"not one per token {tuple(valid.shape)}"
        )
    scores = scores.float().cpu()
    return [row[keep].tolist() for row, keep in zip(scores, valid.cpu())]


def _matrices(
    scores: Tensor, prompts: List[List[int]], targets: List[List[int]], name: str
) -> List[List[List[float]]]:
    r"""Each prompt's ``[T_i][P_i]`` scores from the batch's ``[batch, T, P]``
    (prompts left-padded, continuations right-padded)."""
    batch, steps, width = len(prompts), max(map(len, targets)), max(map(len, prompts))
    if tuple(scores.shape) != (batch, steps, width):
        raise ValueError(
            f"method {name!r} returned scores of shape {tuple(scores.shape)}, "
            f"not one per target and prompt token {(batch, steps, width)}"
        )
    scores = scores.float().cpu()
    return [
        scores[row, : len(target), width - len(prompt) :].tolist()
        for row, (prompt, target) in enumerate(zip(prompts, targets))
    ]

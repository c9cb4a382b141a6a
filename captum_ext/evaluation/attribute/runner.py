#!/usr/bin/env python3
r""":func:`attribute_dataset`: every example of a dataset explained by several
methods (and scored by metrics), one Parquet row per example; the user guide is
``docs/guide/attribute.rst``."""

import warnings
from contextlib import ExitStack
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
)

import pyarrow as pa
import torch
from captum.attr._core.llm_attr import DEFAULT_GEN_ARGS
from torch import nn, Tensor

from captum_ext._utils.common import classifier_forward
from captum_ext._utils.progress import Progress
from captum_ext._utils.row_chunks import check_internal_batch_size
from captum_ext.adapters import get_adapter, UnsupportedModelError
from captum_ext.attr._utils.continuations import (
    generate_continuations,
    left_padded,
    prompt_pad_id,
    right_padded,
)
from captum_ext.attr._utils.llm_prompts import Prompt
from captum_ext.evaluation.attribute.lock import output_lock
from captum_ext.evaluation.attribute.manifest import (
    check_or_write_manifest,
    ManifestMismatchError,
    run_manifest,
)
from captum_ext.evaluation.attribute.prediction import (
    first_logits,
    predicts_with_target_none,
)
from captum_ext.evaluation.attribute.schema import (
    generation_schema,
    generation_source_columns,
    run_schema,
    source_columns,
)
from captum_ext.evaluation.attribute.shards import (
    remove_temporary_files,
    shard_name,
    shard_positions,
    shard_problem,
    write_shard,
)
from captum_ext.evaluation.attribute.sources import by_source, prompt_groups
from captum_ext.evaluation.distributed import distributed_context, DistributedContext
from captum_ext.evaluation.engine import (
    checked_max_length,
    metric_values,
    SharedForward,
)
from captum_ext.evaluation.names import check_names
from captum_ext.evaluation.registry import METHODS, METRICS
from captum_ext.evaluation.tokenized_batches import (
    bucketed_batches,
    EncodedBatch,
    texts_without_words,
)
from captum_ext.evaluation.user_data import DataError, LoadedExamples

__all__ = ["attribute_dataset", "encode_prompts"]

_TARGETS = ("predicted", "label")
# A causal LM's generated continuation length when none is given (Captum's).
DEFAULT_MAX_NEW_TOKENS = DEFAULT_GEN_ARGS["max_new_tokens"]

Explain = Callable[..., Tensor]


def attribute_dataset(
    model: nn.Module,
    tokenizer: Any,
    data: LoadedExamples,
    methods: Sequence[str],
    out_dir: Any,
    *,
    metrics: Optional[Sequence[str]] = None,
    batch_size: int = 16,
    max_length: Optional[int] = None,
    device: str = "cpu",
    progress: bool = True,
    shard_size: int = 1000,
    target: str = "predicted",
    max_new_tokens: Optional[int] = None,
    sources: str = "tokens",
) -> Path:
    r"""Explains every example of ``data`` with each of ``methods`` and writes one
    Parquet row per example (layout and columns: see the module docstring).

    A causal LM (the adapter's ``is_causal_lm``) explains its continuation of
    each prompt (``data.texts``): the given one (``data.continuations``), or
    the one it generates greedily (at most ``max_new_tokens`` tokens, ending at
    its first EOS), one ``[T, P]`` matrix per method (row ``t`` explains
    ``log p(y_t | prompt, y_<t)``); the run is the same in every other way.

    The class explained is the model's prediction (``target="predicted"``, the
    benchmark's convention) or the gold label (``target="label"``, which needs a
    label column). Under ``torchrun`` every rank runs this same call; the model
    is moved to the rank's device (``cuda:LOCAL_RANK`` for ``device="cuda"``).

    Args:
        model (nn.Module): a Hugging Face sequence classifier or causal LM in
            eval mode.
        tokenizer (PreTrainedTokenizerBase): its tokenizer (with a pad token).
        data (LoadedExamples): the examples (see :func:`load_data`).
        methods (Sequence[str]): method names of the registry, e.g.
            ``["NormXLogit", "AttCAT"]``.
        out_dir (str or Path): where shards and manifest go; shared by all
            ranks (a shared file system across machines).
        metrics (Sequence[str], optional): metric names of the registry whose
            per-example values are added. Default: None.
        batch_size (int, optional): examples per attribution call. Default: 16.
        max_length (int, optional): tokens per example after truncation.
            Default: the most both the tokenizer and the model's positions
            allow (:func:`~captum_ext.evaluation.engine.default_max_length`).
        device (str, optional): ``"cpu"`` or ``"cuda"``. Default: ``"cpu"``.
        progress (bool, optional): progress with examples/s and ETA on stderr
            (rank 0). Default: True.
        shard_size (int, optional): examples per output file. Default: 1000.
        target (str, optional): ``"predicted"`` or ``"label"`` (a
            classifier's). Default: ``"predicted"``.
        max_new_tokens (int, optional): a causal LM's generated continuation
            length when ``data`` has none. Default: None (Captum's 25).
        sources (str, optional): a causal LM's prompt columns: ``"tokens"``,
            or ``"sentences"`` / ``"lines"`` (column ``sources``; each score the
            sum of the source's tokens', see
            :mod:`~captum_ext.evaluation.attribute.sources`). Default:
            ``"tokens"``

    Returns:
        Path: ``out_dir``.

    Raises:
        ManifestMismatchError: ``out_dir`` holds another run's outputs.
        OutputLockedError: another run is writing into ``out_dir``.
        ValueError: unknown method or metric, bad sizes, no labels for
            ``target="label"``, a model in training mode; for a causal LM a
            method that does not explain one, metrics, a prompt and
            continuation longer than ``max_length``.
    """
    method_specs, metric_specs = _check_names(methods, metrics)
    for name, value in (("batch_size", batch_size), ("shard_size", shard_size)):
        check_internal_batch_size(value, name)
    if model.training:
        raise ValueError("the model is in training mode; call model.eval() first")
    length = checked_max_length(model, tokenizer, max_length)
    _check_words(tokenizer, data)
    arguments: Dict[str, Any] = {
        "methods": list(methods),
        "max_length": length,
        "shard_size": shard_size,
    }
    # The one place the run branches on the kind of model (the adapter's call).
    make_plan = _generation_plan if _is_causal_lm(model) else _classifier_plan
    plan = make_plan(
        _RunInputs(
            model,
            tokenizer,
            data,
            method_specs,
            metric_specs,
            length,
            target,
            max_new_tokens,
            sources,
        )
    )
    arguments.update(plan.arguments)
    with distributed_context(device) as context, ExitStack() as held:
        if next(model.parameters()).device != context.device:
            model.to(context.device)
        run = _Run(Path(out_dir), arguments, plan.schema, data)
        missing = _agreed_missing_shards(context, run, model, tokenizer, held)
        job = plan.job()
        out = run.out
        mine = context.shard(missing)
        total = sum(len(shard_positions(k, shard_size, len(data))) for k in mine)
        truncated = 0
        enabled = progress and context.is_main
        with Progress(
            total, "attribute", "examples", enabled=enabled, summary=False
        ) as bar:
            for shard in mine:
                positions = shard_positions(shard, shard_size, len(data))
                table = job.shard_table(
                    data.select(positions),
                    plan.schema,
                    batch_size,
                    context.device,
                    bar.update,
                )
                write_shard(table, out / shard_name(shard), context.rank)
                truncated += job.truncated(table)
        context.barrier()
    if truncated:
        warnings.warn(
            f"{truncated} of the texts this run attributed were cut to "
            f"max_length={length} tokens (column 'truncated'); their "
            "attributions cover the kept tokens only"
        )
    return out


def _is_causal_lm(model: nn.Module) -> bool:
    r"""The adapter's verdict; a model no adapter knows is run as a classifier
    (Captum's baselines need no adapter)."""
    try:
        return get_adapter(model).is_causal_lm
    except UnsupportedModelError:
        return False


class _Plan(NamedTuple):
    r"""What differs between a classifier's run and a causal LM's: the
    manifest's arguments, the schema, and the job (made once the model is on
    the rank's device)."""

    arguments: Dict[str, Any]
    schema: pa.Schema
    job: Callable[[], "_Job"]


class _RunInputs(NamedTuple):
    r"""The checked arguments of :func:`attribute_dataset` a plan is made from."""

    model: nn.Module
    tokenizer: Any
    data: LoadedExamples
    method_specs: Sequence[Any]
    metric_specs: Sequence[Any]
    length: int  # tokens per example
    target: str
    max_new_tokens: Optional[int]
    sources: str  # a causal LM's prompt columns: tokens, sentences or lines


def _classifier_plan(run: _RunInputs) -> _Plan:
    _check_target(run.target, run.data)
    given = (run.data.continuations, run.max_new_tokens)
    if given != (None, None) or run.sources != "tokens":
        raise ValueError(
            f"continuations, max_new_tokens and sources are for a causal LM's "
            "prompts; "
            f"{type(run.model).__name__} is not a causal LM (it has no LM head, or "
            "has a classification head)"
        )
    names = [spec.name for spec in run.method_specs]
    type_ids = _gives_type_ids(run.tokenizer, run.data)
    return _Plan(
        {
            # No "mode" entry: a classifier run's arguments stay as they were,
            # so output written by an earlier version still resumes.
            "metrics": [spec.name for spec in run.metric_specs],
            "target": run.target,
        },
        run_schema(run.data, names, run.metric_specs, type_ids),
        lambda: _ClassifierJob(run),
    )


def _generation_plan(run: _RunInputs) -> _Plan:
    unsupported = [spec.name for spec in run.method_specs if not spec.causal_lm]
    if unsupported:
        able = [name for name, spec in METHODS.items() if spec.causal_lm]
        raise ValueError(
            f"{', '.join(unsupported)} cannot explain a causal LM's text; "
            f"methods that can: {', '.join(able)}"
        )
    if run.metric_specs:
        raise ValueError(
            "metrics are written for classifiers only; drop --metrics for a "
            "causal LM's prompts"
        )
    if run.target != "predicted" or run.data.labels is not None or run.data.text_pairs:
        raise ValueError(
            "a causal LM's prompts take no label, text pair or target class: "
            "give prompts and, optionally, their continuations"
        )
    names = [spec.name for spec in run.method_specs]
    # Checked now, before any shard is written.
    encoded = encode_prompts(run.tokenizer, run.data, run.length, run.max_new_tokens)
    groups = prompt_groups(run.tokenizer, run.data, encoded[0], run.sources)
    arguments = {
        "mode": "causal_lm",
        "continuations": "generated" if encoded[1] is None else "given",
        "max_new_tokens": encoded[2],
    }
    if groups is not None:  # token runs keep their arguments, so they resume
        arguments["sources"] = run.sources
    return _Plan(
        arguments,
        generation_schema(names, sources=groups is not None),
        lambda: _GenerationJob(
            run.model, run.tokenizer, run.method_specs, run.data, *encoded, groups
        ),
    )


def _check_names(
    methods: Sequence[str], metrics: Optional[Sequence[str]]
) -> Tuple[List[Any], List[Any]]:
    if isinstance(methods, str) or not methods:
        raise ValueError("methods must be a non-empty list of method names")
    method_specs = [METHODS[name] for name in check_names(methods, METHODS, "method")]
    if not metrics:
        return method_specs, []
    return method_specs, [
        METRICS[name] for name in check_names(metrics, METRICS, "metric")
    ]


def _check_target(target: str, data: LoadedExamples) -> None:
    if target not in _TARGETS:
        raise ValueError(f"target must be one of {_TARGETS}, got {target!r}")
    if target == "label" and data.labels is None:
        raise ValueError(
            f"target='label' explains the gold labels, but {data.source} was "
            "loaded without a label column; pass label_column (--label-column)"
        )


def _check_words(tokenizer: Any, data: LoadedExamples) -> None:
    empty = texts_without_words(tokenizer, data.texts, data.text_pairs)
    if empty:
        rows = ", ".join(str(data.rows[i]) for i in empty[:10])
        more = f" and {len(empty) - 10} more" if len(empty) > 10 else ""
        raise DataError(
            f"{data.source}: the text(s) in row(s) {rows}{more} have no word after "
            "tokenisation (only control characters or special-token strings); "
            "remove them"
        )


def _gives_type_ids(tokenizer: Any, data: LoadedExamples) -> bool:
    r"""Whether the tokenizer gives segment ids for ``data``'s pairs (BERT
    does; RoBERTa-like tokenizers mark pairs with separators only)."""
    if data.text_pairs is None or not len(data):
        return False
    encoded = tokenizer(data.texts[:1], data.text_pairs[:1], verbose=False)
    return encoded.get("token_type_ids") is not None


class _Run(NamedTuple):
    r"""What rank 0 checks the output directory against."""

    out: Path
    arguments: Dict[str, Any]
    schema: pa.Schema
    data: LoadedExamples


def _agreed_missing_shards(
    context: DistributedContext,
    run: _Run,
    model: nn.Module,
    tokenizer: Any,
    held: ExitStack,
) -> List[int]:
    r"""Rank 0 takes the output lock (held in ``held`` until the run ends),
    checks (or writes) the manifest and lists the shards still to do; every
    rank gets the same list, or the same error."""
    verdict: Tuple[Optional[Exception], List[int]] = (None, [])
    if context.is_main:
        try:
            run.out.mkdir(parents=True, exist_ok=True)
            held.enter_context(output_lock(run.out))
            manifest = run_manifest(run.arguments, model, tokenizer, run.data)
            verdict = (None, _prepare(run, manifest))
        except (OSError, ManifestMismatchError) as error:
            verdict = (error, [])
    failure, missing = context.broadcast(verdict)  # pickled: the same error
    if failure is not None:
        raise failure
    return missing


def _prepare(run: _Run, manifest: Dict[str, Any]) -> List[int]:
    r"""Writes or checks the manifest, removes temporary files of runs that are
    gone, and returns the shards still to do: those missing and those that do
    not verify (removed, with a notice)."""
    remove_temporary_files(run.out)
    check_or_write_manifest(run.out, manifest)
    missing = []
    for shard in range(manifest["shards"]):
        path = run.out / shard_name(shard)
        if not path.exists():
            missing.append(shard)
            continue
        positions = shard_positions(shard, run.arguments["shard_size"], len(run.data))
        problem = shard_problem(path, [run.data.rows[i] for i in positions], run.schema)
        if problem is not None:
            warnings.warn(f"{path} is redone: it does not verify ({problem})")
            path.unlink()
            missing.append(shard)
    return missing


class _Job:
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
    ) -> Iterator[Tuple[List[int], Iterator[Tuple[str, List[Any]]]]]:
        r"""Per batch: its data positions and its output columns."""
        raise NotImplementedError

    def source_columns(self, data: LoadedExamples) -> Dict[str, List[Any]]:
        r"""The columns copied from ``data``."""
        raise NotImplementedError

    def truncated(self, table: pa.Table) -> int:
        r"""How many of a written shard's texts were cut to ``max_length``."""
        raise NotImplementedError


class _ClassifierJob(_Job):
    r"""A classifier's batch: prediction, each method's scores, metric values."""

    def __init__(self, run: _RunInputs) -> None:
        model, tokenizer = run.model, run.tokenizer
        self.model = model
        self.tokenizer = tokenizer
        self.forward = classifier_forward(model)
        self.names = [spec.name for spec in run.method_specs]
        self.families = [spec.family for spec in run.method_specs]
        self.explainers = [spec.factory(model, tokenizer) for spec in run.method_specs]
        self.metric_specs = list(run.metric_specs)
        self.max_length = run.length
        self.target = run.target

    def batches(
        self, data: LoadedExamples, batch_size: int, device: torch.device
    ) -> Iterator[Tuple[List[int], Iterator[Tuple[str, List[Any]]]]]:
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
            scores = first_scores if index == 0 else _call(explain, batch, target)
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
                scores = _call(explain, batch, gold)
            if seen:
                return scores, seen[0]
            if gold is not None:
                return scores, self._logits(batch)
        logits = self._logits(batch)
        target = gold if gold is not None else logits.argmax(-1)
        return _call(explain, batch, target), logits

    def _logits(self, batch: EncodedBatch) -> Tensor:
        with torch.no_grad():
            return self.forward(batch.input_ids, *batch.forward_args())


class _GenerationJob(_Job):
    r"""A causal LM's batch: left-padded prompts, their given or greedily
    generated continuations, each method's ``[T, P]`` matrix per prompt.
    ``prompts`` and ``given`` are ``data``'s token ids (:func:`encode_prompts`,
    checked before any work)."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        method_specs: Sequence[Any],
        data: LoadedExamples,
        prompts: List[List[int]],
        given: Optional[List[List[int]]],
        max_new_tokens: Optional[int],
        groups: Optional[List[Prompt]] = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.names = [spec.name for spec in method_specs]
        self.explainers = [
            spec.build_generation(model, tokenizer) for spec in method_specs
        ]
        self.max_new_tokens = max_new_tokens
        self.pad_id = prompt_pad_id(tokenizer)
        self.prompts, self.given = prompts, given
        self.groups = groups  # each prompt's sources; None: its tokens
        self._position = {row: i for i, row in enumerate(data.rows)}

    def batches(
        self, data: LoadedExamples, batch_size: int, device: torch.device
    ) -> Iterator[Tuple[List[int], Iterator[Tuple[str, List[Any]]]]]:
        positions = [self._position[row] for row in data.rows]

        def length(i: int) -> int:
            given = 0 if self.given is None else len(self.given[positions[i]])
            return len(self.prompts[positions[i]]) + given

        order = sorted(range(len(data)), key=length)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            prompts = [torch.tensor(self.prompts[positions[i]]) for i in rows]
            ids, mask = left_padded(prompts, self.pad_id, device)
            if self.given is None:
                continuations = generate_continuations(
                    self.model,
                    self.tokenizer,
                    ids,
                    mask,
                    {"max_new_tokens": self.max_new_tokens},
                )
            else:
                continuations = [torch.tensor(self.given[positions[i]]) for i in rows]
            groups = None
            if self.groups is not None:
                groups = [self.groups[positions[i]] for i in rows]
            yield rows, self._columns(ids, mask, prompts, continuations, groups)

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
        if self.given is None:
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


def _call(explain: Explain, batch: EncodedBatch, target: Optional[Tensor]) -> Tensor:
    return explain(batch.input_ids, batch.attention_mask, target, batch.token_type_ids)


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


def encode_prompts(
    tokenizer: Any, data: LoadedExamples, max_length: int, max_new_tokens: Optional[int]
) -> Tuple[List[List[int]], Optional[List[List[int]]], Optional[int]]:
    r"""Token ids of the prompts (with the tokenizer's special tokens, BOS
    where it adds one) and of the given continuations (none added: no BOS
    inside a continuation), and the tokens to generate (None for given
    continuations; ``max_new_tokens``, by default 25, otherwise).
    ``ValueError`` for ``max_new_tokens`` with given continuations;
    :class:`DataError` naming the rows whose prompt and continuation (or
    ``max_new_tokens``) exceed ``max_length``."""
    if data.continuations is not None and max_new_tokens is not None:
        raise ValueError(
            "max_new_tokens applies when the model generates the continuations; "
            "these are given (drop --max-new-tokens or --target-column)"
        )
    if max_new_tokens is not None:
        check_internal_batch_size(max_new_tokens, "max_new_tokens")
    if data.continuations is None:
        max_new_tokens = max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    prompts = list(tokenizer(list(data.texts), verbose=False)["input_ids"])
    given = None
    if data.continuations is not None:
        encoded = tokenizer(
            list(data.continuations), add_special_tokens=False, verbose=False
        )
        given = list(encoded["input_ids"])
    lengths = [
        len(prompt) + (max_new_tokens or 0) + (0 if given is None else len(given[i]))
        for i, prompt in enumerate(prompts)
    ]
    too_long = [data.rows[i] for i, n in enumerate(lengths) if n > max_length]
    if too_long:
        shown = ", ".join(map(str, too_long[:10]))
        more = f" and {len(too_long) - 10} more" if len(too_long) > 10 else ""
        raise DataError(
            f"{data.source}: the prompt and continuation of row(s) {shown}{more} "
            f"take more than max_length={max_length} tokens; shorten them, raise "
            "--max-length (up to the model's positions) or lower --max-new-tokens"
        )
    empty = [data.rows[i] for i, ids in enumerate(given or []) if not ids]
    if empty:
        raise DataError(
            f"{data.source}: the continuation of row(s) {empty[:10]} has no token"
        )
    return prompts, given, max_new_tokens

#!/usr/bin/env python3
r"""The built-in tasks as plain inputs of the engines: a default fine-tuned
classifier (:mod:`captum_ext.defaults.models`) and the first examples of its
held-out split (:mod:`captum_ext.defaults.data`), the default digits ViT on
held-out digits (``digits``, :mod:`captum_ext.defaults.digits`: its images
as patch tokens, :class:`~captum_ext.evaluation.image_tokens.ImageTokenizer`),
and the default generators
(:mod:`captum_ext.defaults.generator`) on held-out prompts with their planted
evidence: key-value recall (``recall``, :mod:`captum_ext.defaults.recall`),
its long-context variant (``recall_long``: over 1,024 prompt tokens, 16
prompts at most, as each costs about 30 short ones) and flag sum (``flags``,
:mod:`captum_ext.defaults.flags`: an answer that copies no prompt token).
Nothing about them is special to the engines.
"""

import warnings
from dataclasses import dataclass, replace
from typing import Any, ContextManager, Dict, List, Optional, Sequence, Tuple

from torch import nn, Tensor

from captum_ext._utils.progress import duration
from captum_ext._utils.teacher_forcing import IGNORE_INDEX
from captum_ext.defaults.background import generators_trained_alongside
from captum_ext.defaults.cache import cache_root
from captum_ext.defaults.data import load_split, TaskExamples, TASKS
from captum_ext.defaults.digits import (
    digits_cache_name,
    DIGITS_RECIPE,
    digits_split,
    load_default_vit,
)
from captum_ext.defaults.generator import (
    DEFAULT_RECIPE,
    FLAG_RECIPE,
    generator_cached,
    GeneratorRecipe,
    load_default_generator,
    LONG_RECALL_RECIPE,
)
from captum_ext.defaults.models import load_default_model, MAX_LENGTH
from captum_ext.defaults.recall import encode_examples, RecallTask
from captum_ext.evaluation.engine import run_benchmark
from captum_ext.evaluation.engine.causal_lm import run_generation_benchmark
from captum_ext.evaluation.image_tokens import ImageTokenizer
from captum_ext.evaluation.names import (
    check_names,
    GENERATION_METHOD_CHOICES,
    GENERATION_METRIC_NAMES,
    IMAGE_METHOD_NAMES,
    METHOD_CHOICES,
    METHOD_NAMES,
    METRIC_NAMES,
)
from captum_ext.evaluation.options import BenchmarkOptions, GenerationBenchmarkOptions
from captum_ext.evaluation.registry import needs_decoders
from captum_ext.evaluation.results import BenchmarkResult
from captum_ext.evaluation.user_data import LoadedExamples

__all__ = [
    "BUILT_IN_TASKS",
    "DefaultTask",
    "GENERATION_TASK",
    "GENERATION_TASKS",
    "IMAGE_TASK",
    "benchmark_default_tasks",
    "benchmark_seconds",
    "default_decoder_texts",
    "default_task",
    "first_run_estimate",
    "preparing_generators_alongside",
    "task_examples",
    "held_out_images",
    "recall_data",
    "run_default_tasks",
]

# The decoders of both default models are fitted on the sentiment training
# texts (the fitted-decoder cache is keyed by them).
DECODER_TASK = "sentiment"
# The generation task: the default generator on key-value recall.
GENERATION_TASK = "recall"
# Each generation task's generator recipe and its most prompts (None: n).
GENERATION_TASKS: Dict[str, Tuple[GeneratorRecipe, Optional[int]]] = {
    GENERATION_TASK: (DEFAULT_RECIPE, None),
    "recall_long": (LONG_RECALL_RECIPE, 16),
    "flags": (FLAG_RECIPE, None),
}
# The image task: the default digits ViT on held-out digits, IMAGES_PER_EXAMPLE
# images per example of the other tasks: an image costs far less than a text
# (a 17-token, 2-layer model), and Captum's metrics measure one example in 8
# (Infidelity) and in 32 (SensMax), so 16 images would leave SensMax empty.
IMAGE_TASK = "digits"
IMAGES_PER_EXAMPLE = 8
BUILT_IN_TASKS = TASKS + (IMAGE_TASK,) + tuple(GENERATION_TASKS)


# The first run's pieces on an idle 2-core CPU. Preparation: the seconds each
# one-time piece took in the idle first run of docs/results/main (sentiment's
# fine-tuning, the decoders' fitting and the digits ViT's training in the main
# process; the recall and flags generators' training beside them in a second
# process, :func:`preparing_generators_alongside`); source's and
# recall_long's from earlier first runs. Benchmark: each task's seconds per
# example, its model's loading included. Sentiment, digits, recall and flags
# in the proportions of one cached run's CPU seconds per task, scaled to 150 s
# for the default job: between its idle cached rerun (2 min 16 s) and the
# benchmark part of the first run (2 min 34 s), both in docs/results. Source
# and recall_long from earlier runs of them (recall_long runs 16 prompts at
# most). docs/measurements.rst gives the runs these add up to.
PREPARATION_SECONDS = {
    "sentiment": 265.0,
    "source": 30.0,
    "decoders": 25.0,
    IMAGE_TASK: 12.0,
    GENERATION_TASK: 185.0,
    "recall_long": 222.0,
    "flags": 10.0,
}
BENCHMARK_SECONDS_PER_EXAMPLE = {
    "sentiment": 6.1,
    "source": 6.5,
    IMAGE_TASK: 0.08,
    GENERATION_TASK: 1.05,
    "recall_long": 40.0,
    "flags": 1.6,
}


def _missing(tasks: Sequence[str]) -> List[str]:
    r"""The one-time pieces ``tasks`` need that the cache lacks."""
    root = cache_root()
    cached = {
        "sentiment": any(root.glob("default-sentiment-*")),
        "source": any(root.glob("default-source-*")),
        "decoders": any(root.glob("fitted-decoder-*")),
        IMAGE_TASK: (root / digits_cache_name()).is_dir(),
        **{
            task: generator_cached(recipe)
            for task, (recipe, _) in GENERATION_TASKS.items()
        },
    }
    wanted = [t for t in tasks if t in cached]
    if any(t in TASKS for t in tasks):
        wanted.append("decoders")
    return [piece for piece in wanted if not cached[piece]]


def task_examples(task: str, n: int) -> int:
    r"""The examples ``task`` runs at ``n`` examples a task: at most a
    generation task's cap; :data:`IMAGES_PER_EXAMPLE` images per example for
    the image task (at most its held-out split)."""
    if task == IMAGE_TASK:
        return min(IMAGES_PER_EXAMPLE * n, len(digits_split("test")))
    return min(n, GENERATION_TASKS.get(task, (None, None))[1] or n)


def benchmark_seconds(tasks: Sequence[str], n: int) -> float:
    r"""The benchmark's seconds for ``tasks`` at ``n`` examples each
    (:func:`task_examples`), from :data:`BENCHMARK_SECONDS_PER_EXAMPLE`."""
    return sum(
        BENCHMARK_SECONDS_PER_EXAMPLE[task] * task_examples(task, n) for task in tasks
    )


def _alongside(tasks: Sequence[str], missing: Sequence[str]) -> List[str]:
    r"""The generation tasks whose generators train in a second process: all
    of ``tasks``' when the cache also lacks a piece the caller prepares first
    (else there is nothing to overlap them with)."""
    if all(piece in GENERATION_TASKS for piece in missing):
        return []
    return [task for task in tasks if task in GENERATION_TASKS]


def preparing_generators_alongside(
    tasks: Sequence[str],
) -> ContextManager[List[GeneratorRecipe]]:
    r""":func:`~captum_ext.defaults.background.generators_trained_alongside`
    for the generation tasks among ``tasks``, when the cache also lacks a
    classifier, the decoders or the digits ViT (which the caller then prepares
    meanwhile): what :func:`first_run_estimate` counts on."""
    generation = _alongside(tasks, _missing(tasks))
    return generators_trained_alongside(
        [GENERATION_TASKS[task][0] for task in generation]
    )


def first_run_estimate(tasks: Sequence[str], n: int) -> str:
    r"""What the run of ``tasks`` at ``n`` examples will take, added up from
    the measured pieces (:data:`PREPARATION_SECONDS` for the default models
    the cache lacks, :func:`benchmark_seconds`); the generators trained
    alongside (:func:`preparing_generators_alongside`) count as long as they
    take beyond the other pieces."""
    missing = _missing(tasks)
    alongside = [p for p in missing if p in _alongside(tasks, missing)]
    ahead = [p for p in missing if p not in alongside]
    bench = benchmark_seconds(tasks, n)
    preparing = max(_seconds(ahead), _seconds(alongside))
    pieces = _pieces(ahead)
    if alongside:
        pieces += f"; alongside them in a second process: {_pieces(alongside)}"
    lead = (
        f"preparing the default models once ({pieces}), then "
        if missing
        else f"the models cached in {cache_root()}, "
    )
    return (
        f"estimate: {lead}the benchmark of {' '.join(tasks)} at --n {n} "
        f"(about {duration(bench)}): about {duration(preparing + bench)} in all "
        "on an idle 2-core CPU, longer on a busy one"
    )


def _seconds(pieces: Sequence[str]) -> float:
    return sum(PREPARATION_SECONDS[piece] for piece in pieces)


def _pieces(pieces: Sequence[str]) -> str:
    return ", ".join(f"{p} {duration(PREPARATION_SECONDS[p])}" for p in pieces)


@dataclass
class DefaultTask:
    r"""A default model, its tokenizer, ``n`` held-out examples and the texts
    its decoders are fitted on."""

    name: str
    model: nn.Module
    tokenizer: Any
    data: TaskExamples
    max_length: int = MAX_LENGTH


def default_decoder_texts() -> List[str]:
    r"""The texts the default models' decoders are fitted on."""
    return list(load_split(DECODER_TASK, "train").texts)


def default_task(name: str, n: int, device: Any = None) -> DefaultTask:
    r"""Task ``name`` (``"sentiment"``, ``"source"`` or ``"digits"``) with
    its first ``n`` held-out examples."""
    if name not in TASKS + (IMAGE_TASK,):
        raise ValueError(f"task must be one of {TASKS + (IMAGE_TASK,)}, got {name!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if name == IMAGE_TASK:
        return _digits_task(n, device)
    model, tokenizer = load_default_model(name, device=device)
    return DefaultTask(name, model, tokenizer, load_split(name).head(n))


def _digits_task(n: int, device: Any) -> DefaultTask:
    r"""The digits ViT and its first ``n`` held-out images, as patch tokens
    whose masked patches are 0 (the training pixels' mean)."""
    images = digits_split("test").head(n)
    tokenizer = ImageTokenizer(images.images, DIGITS_RECIPE.patch_size)
    data = TaskExamples(
        ImageTokenizer.texts(len(images)), images.labels, images.label_names
    )
    model = load_default_vit(device)
    return DefaultTask(IMAGE_TASK, model, tokenizer, data, tokenizer.model_max_length)


def held_out_images(task: str) -> Optional[Tuple[Tensor, Tuple[int, int]]]:
    r"""An image task's held-out images ``[n, channels, height, width]`` (its
    examples ``"image i"`` in order) and patch grid; None for another task."""
    if task != IMAGE_TASK:
        return None
    return digits_split("test").images, DIGITS_RECIPE.grid


def recall_data(
    n: int, tokenizer: Any, recipe: GeneratorRecipe = DEFAULT_RECIPE
) -> LoadedExamples:
    r"""``n`` prompts of ``recipe``'s task (default: the default generator's
    key-value recall), drawn with its held-out test seed
    (``GeneratorRecipe.seeds()``: never a training or validation prompt),
    their continuations (the queried values, or the flag sum's label), each
    continuation token's single evidence position (recall: the value; None
    for a task where no single token decides the answer) and its evidence set
    (every prompt token it needs: recall's queried key and value, the two
    flags), in the prompt's own tokens (``<bos>`` is 0) as ``tokenizer`` (the
    generator's) encodes them."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    seed = recipe.seeds()[2]
    examples = recipe.task.sample(n, seed)
    batch = encode_examples(examples, tokenizer)  # positions in the padded batch
    padding = batch.attention_mask.shape[1] - batch.attention_mask.sum(1)  # [n]
    name = "key-value recall" if isinstance(recipe.task, RecallTask) else "flag sum"
    return LoadedExamples(
        source=f"{name}, held-out seed {seed}",
        texts=[e.prompt for e in examples],
        continuations=[e.continuation for e in examples],
        evidence=(
            _own_positions(batch.evidence[..., None], padding, batch.target)
            if bool((batch.evidence >= 0).any())
            else None
        ),
        evidence_sets=_own_sets(batch.needed, padding, batch.target),
    )


def _own_sets(
    positions: Tensor, padding: Tensor, target: Tensor
) -> List[List[List[int]]]:
    r"""``[n, T, S]`` positions in the padded batch -> each row's target steps'
    positions in its own prompt (negative entries left out)."""
    return [
        [
            [int(p - pad) for p in step if p >= 0]
            for step, real in zip(row, steps)
            if real
        ]
        for row, pad, steps in zip(positions, padding, target != IGNORE_INDEX)
    ]


def _own_positions(
    positions: Tensor, padding: Tensor, target: Tensor
) -> List[List[int]]:
    r"""``[n, T, 1]`` single positions -> each row's list of them."""
    return [[step[0] for step in row] for row in _own_sets(positions, padding, target)]


def benchmark_default_tasks(
    n: int,
    tasks: Sequence[str] = BUILT_IN_TASKS,
    methods: Optional[Sequence[str]] = None,
    metrics: Optional[Sequence[str]] = None,
    **options: Any,
) -> BenchmarkResult:
    r""":func:`~captum_ext.evaluation.benchmark` on each built-in task, one
    result (see :func:`run_default_tasks`); ``options`` are fields of
    :class:`~captum_ext.evaluation.options.BenchmarkOptions` (``batch_size``,
    ``device``, ``progress``)."""
    chosen = BenchmarkOptions(methods=methods, metrics=metrics, **options)
    return run_default_tasks(n, tasks, chosen)


def _applicable(
    chosen: Optional[Sequence[str]], known: Sequence[str]
) -> Optional[List[str]]:
    r"""The chosen names a task knows (None: its defaults)."""
    return None if chosen is None else [name for name in chosen if name in known]


def _task_options(name: str, options: BenchmarkOptions) -> Optional[BenchmarkOptions]:
    r"""``options`` for task ``name``: the chosen methods and metrics it knows,
    or None (with a notice) when it knows none of them."""
    generation = name in GENERATION_TASKS
    methods = _applicable(
        options.methods, GENERATION_METHOD_CHOICES if generation else METHOD_NAMES
    )
    if name == IMAGE_TASK:  # only the methods that explain a vision transformer
        methods = _applicable(methods or IMAGE_METHOD_NAMES, IMAGE_METHOD_NAMES)
    metrics = _applicable(
        options.metrics, GENERATION_METRIC_NAMES if generation else METRIC_NAMES
    )
    if methods == [] or metrics == []:
        kind = "method" if methods == [] else "metric"
        warnings.warn(
            f"task {name} skipped: none of the chosen {kind}s applies to it",
            stacklevel=3,
        )
        return None
    if generation:
        return GenerationBenchmarkOptions(
            methods=methods,
            metrics=metrics,
            batch_size=options.batch_size,
            device=options.device,
            progress=options.progress,
            task=name,
            n_examples=options.n_examples,
        )
    return replace(options, methods=methods, metrics=metrics, task=name)


def run_default_tasks(
    n: int, tasks: Sequence[str], options: BenchmarkOptions
) -> BenchmarkResult:
    r""":func:`~captum_ext.evaluation.engine.run_benchmark` on the first ``n``
    held-out examples of each built-in classifier task in ``tasks`` and
    :func:`~captum_ext.evaluation.engine.causal_lm.run_generation_benchmark`
    on ``n`` held-out prompts (:func:`recall_data`; fewer where the task caps
    them) for each generation task, one result. ``options``' ``task``,
    ``max_length`` and ``decoder_texts`` are the task's; a task runs the
    chosen methods and metrics it knows and is skipped, with a notice, when it
    knows none of them."""
    check_names(options.methods, METHOD_CHOICES, "method")
    check_names(
        options.metrics,
        tuple(dict.fromkeys(METRIC_NAMES + GENERATION_METRIC_NAMES)),
        "metric",
    )
    unknown = [name for name in tasks if name not in BUILT_IN_TASKS]
    if unknown:
        raise ValueError(f"tasks must be among {BUILT_IN_TASKS}, got {unknown}")
    results = []
    decoder_texts: Optional[List[str]] = None
    for name in tasks:
        for_task = _task_options(name, options)
        if for_task is None:
            continue
        if isinstance(for_task, GenerationBenchmarkOptions):
            recipe, _ = GENERATION_TASKS[name]
            model, tokenizer = load_default_generator(options.device, recipe)
            data = recall_data(task_examples(name, n), tokenizer, recipe)
            results.append(run_generation_benchmark(model, tokenizer, data, for_task))
            continue
        chosen = check_names(for_task.methods, METHOD_NAMES, "method")
        if decoder_texts is None and needs_decoders(chosen):
            decoder_texts = default_decoder_texts()
        task = default_task(name, task_examples(name, n), device=options.device)
        for_task = replace(
            for_task, max_length=task.max_length, decoder_texts=decoder_texts
        )
        results.append(run_benchmark(task.model, task.tokenizer, task.data, for_task))
    if not results:
        raise ValueError("none of the chosen methods and metrics applies to any task")
    return BenchmarkResult.combine(results)

#!/usr/bin/env python3
r"""The tools users pick instead for generated text, side by side with
captum_ext's methods and Captum's own baselines, when they are installed.

Every row runs on the default generator's held-out key-value recall prompts
(:func:`captum_ext.evaluation.tasks.recall_data`: the generation benchmark's
task ``recall``), with the same continuations, planted evidence, metrics and
timing protocol
(:func:`~captum_ext.evaluation.engine.causal_lm.run_generation_benchmark`):
the time per prompt divided by one forward pass over the same prompt +
continuation at the method's own batch size. The peers explain one prompt per
call, so their time is divided by forward passes of one prompt each, as
Captum's LLM API rows are.

The peers (none is a dependency; nothing of theirs is copied here; each is
called through its public API only when its package imports):

- ``inseq`` (Apache-2.0): ``attention``, ``input_x_gradient``, ``saliency`` and
  ``integrated_gradients`` (its defaults: 50 steps, gradients aggregated as
  inseq does by default, an L2 norm over the hidden size), on the prompt text
  and ``generated_texts`` = prompt + continuation; it forces eager attention;
- ``context_cite`` (ContextCite, MIT): word sources of the prompt before its
  last word (the query), 64 ablations; the continuation is fixed to the given
  one and each target token's span is attributed on its own; the prompt goes
  through a chat template that writes it unchanged where the tokenizer has none;
- ``lxt`` (AttnLRP and CP-LRP; Clear BSD without a patent grant, its README
  says LRP is patented: only run when the user installed it): the model's
  family patched in place by ``lxt.efficient.monkey_patch`` with the
  ``attnLRP`` / ``cp_LRP`` map, relevance = input embeddings' gradient x input
  of each target token's logit, seeded with the logit (lxt's own recipe), one
  backward pass per target token.

A peer's patches and hooks stay in the process that ran it (inseq forces eager
attention, lxt patches the model's classes), so each peer runs in a child
process of its own (``--only``) that writes its row as JSON; a peer that is not
installed is skipped with a notice, a peer that fails is reported with its error
and the other rows still print.

Usage::

    python -m benchmarks.bench_peers                 # 64 prompts, every row
    python -m benchmarks.bench_peers --limit 8 --methods CAT InputXGradient
"""

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from captum_ext.evaluation.engine.causal_lm import run_generation_benchmark
from captum_ext.evaluation.options import GenerationBenchmarkOptions
from captum_ext.evaluation.registry import MethodSpec, rows_of_examples
from captum_ext.evaluation.results import BenchmarkResult
from captum_ext.evaluation.tasks import recall_data
from captum_ext.evaluation.user_data import LoadedExamples
from torch import nn, Tensor

# The captum_ext methods and Captum baselines printed beside the peers.
DEFAULT_METHODS = (
    "CAT",
    "AttCAT",
    "InputXGradient",
    "IntegratedGradients",
    "FeatureAblation",
    "NormXLogit",
    "LogAt",
    "GlobEnc",
    "Random",
)
COLUMNS = ("Evidence@1", "Evidence@3", "AOPC", "Soft-NC", "Soft-NS")
CONTEXT_CITE_ABLATIONS = 64

# example(prompt [P_b], target [T_b]) -> scores [T_b, P_b]
Example = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class Peer:
    r"""A peer tool's method: its row name, the module that must import, the
    distribution whose version is printed and ``build(model, tokenizer) ->
    example``."""

    name: str
    module: str
    distribution: str
    build: Callable[[nn.Module, Any], Example]


# ------------------------------------------------------------------ text
def _prompt_text(tokenizer: Any, prompt: Tensor) -> str:
    return tokenizer.decode(prompt, skip_special_tokens=True)


def _checked_text(tokenizer: Any, text: str, ids: Tensor, what: str) -> None:
    r"""Raises where ``text`` does not encode back to ``ids`` (a peer that
    takes text would then explain other tokens than the benchmark's)."""
    encoded = tokenizer(text)["input_ids"]
    if encoded != ids.tolist():
        raise RuntimeError(f"the {what} text does not encode back to its ids")


# ------------------------------------------------------------------ inseq
def _inseq(method: str) -> Callable[[nn.Module, Any], Example]:
    def build(model: nn.Module, tokenizer: Any) -> Example:
        import inseq

        attribution_model = inseq.load_model(model, method, tokenizer=tokenizer)

        def example(prompt: Tensor, target: Tensor) -> Tensor:
            text = _prompt_text(tokenizer, prompt)
            _checked_text(tokenizer, text, prompt, "prompt")
            continuation = tokenizer.decode(target, skip_special_tokens=True)
            out = attribution_model.attribute(
                input_texts=text,
                generated_texts=f"{text} {continuation}",
                show_progress=False,
            )
            aggregated = out.sequence_attributions[0].aggregate()
            scores = torch.as_tensor(aggregated.target_attributions).float()
            ids = [token.id for token in aggregated.target]
            return prompt_rows(scores, ids, prompt, target)  # [T_b, P_b]

        return example

    return build


def prompt_rows(
    scores: Tensor, ids: List[int], prompt: Tensor, target: Tensor
) -> Tensor:
    r"""inseq's ``[sequence, steps]`` matrix of a decoder-only model as
    ``[T_b, P_b]`` on the benchmark's prompt positions (a BOS it left out
    scores 0). Raises where its tokens or steps are not the benchmark's."""
    prompt_ids, steps = prompt.tolist(), len(target)
    for offset in (0, 1):  # 1: without the BOS
        if ids[: len(prompt_ids) - offset] == prompt_ids[offset:]:
            break
    else:
        raise RuntimeError("the peer's tokens are not the benchmark's prompt")
    if scores.shape[1] != steps:
        raise RuntimeError(f"the peer explained {scores.shape[1]} steps, not {steps}")
    out = torch.zeros(steps, len(prompt_ids))
    out[:, offset:] = scores[: len(prompt_ids) - offset].T
    return out


# ------------------------------------------------------------------ ContextCite
_PLAIN_CHAT = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"


def _context_cite(model: nn.Module, tokenizer: Any) -> Example:
    from context_cite import ContextCiter

    if tokenizer.chat_template is None:
        tokenizer.chat_template = _PLAIN_CHAT  # the prompt, unchanged

    def example(prompt: Tensor, target: Tensor) -> Tensor:
        text = _prompt_text(tokenizer, prompt)
        _checked_text(tokenizer, text, prompt, "prompt")
        context, query = text.rsplit(" ", 1)
        citer = ContextCiter(
            model,
            tokenizer,
            context,
            query,
            source_type="word",
            num_ablations=CONTEXT_CITE_ABLATIONS,
            batch_size=CONTEXT_CITE_ABLATIONS,
            prompt_template="{context} {query}",
        )
        words = [tokenizer.decode([int(y)]) for y in target]
        _, chat_prompt = citer._get_prompt_ids(return_prompt=True)
        citer._cache["output"] = chat_prompt + " " + " ".join(words)  # given target
        if citer.num_sources != len(prompt) - 2:  # BOS and the query are no source
            raise RuntimeError("ContextCite's words are not the prompt's tokens")
        out = torch.zeros(len(target), len(prompt))
        start = 0
        for t, word in enumerate(words):
            start = citer.response.index(word, start)
            weights = citer.get_attributions(start, start + len(word), verbose=False)
            out[t, 1:-1] = torch.as_tensor(weights).float()
            start += len(word)
        return out

    return example


# ------------------------------------------------------------------ lxt
def _lxt(patch_map: str) -> Callable[[nn.Module, Any], Example]:
    def build(model: Any, tokenizer: Any) -> Example:  # a transformers model
        from lxt.efficient import monkey_patch

        family = model.config.model_type
        maps = importlib.import_module(f"lxt.efficient.models.{family}")
        modeling = importlib.import_module(
            f"transformers.models.{family}.modeling_{family}"
        )
        monkey_patch(modeling, getattr(maps, patch_map))

        def example(prompt: Tensor, target: Tensor) -> Tensor:
            ids = torch.cat([prompt, target[:-1]])[None]  # [1, P_b + T_b - 1]
            embedded = model.get_input_embeddings()(ids).detach().requires_grad_()
            logits = model(inputs_embeds=embedded, use_cache=False).logits[0]
            out = torch.zeros(len(target), len(prompt))
            for t, y in enumerate(target):
                embedded.grad = None
                logit = logits[len(prompt) - 1 + t, y]
                logit.backward(logit.detach(), retain_graph=t + 1 < len(target))
                relevance = (embedded.grad * embedded).sum(-1)[0]  # [P_b + T_b - 1]
                out[t] = relevance[: len(prompt)].detach().float()
            return out

        return example

    return build


PEERS = (
    Peer("inseq attention", "inseq", "inseq", _inseq("attention")),
    Peer("inseq input x gradient", "inseq", "inseq", _inseq("input_x_gradient")),
    Peer("inseq saliency", "inseq", "inseq", _inseq("saliency")),
    Peer(
        "inseq integrated gradients",
        "inseq",
        "inseq",
        _inseq("integrated_gradients"),
    ),
    Peer(
        "ContextCite (64 ablations, words)",
        "context_cite",
        "context-cite",
        _context_cite,
    ),
    Peer("lxt AttnLRP", "lxt.efficient", "lxt", _lxt("attnLRP")),
    Peer("lxt CP-LRP", "lxt.efficient", "lxt", _lxt("cp_LRP")),
)


def _no_classifier(*args: Any) -> Any:
    raise ValueError("a peer row explains generated text only")


def peer_spec(peer: Peer) -> MethodSpec:
    r"""``peer`` as a method the generation benchmark runs: one prompt at a
    time, its ``[T_b, P_b]`` scores placed on the batch's positions."""

    def generation(model: nn.Module, tokenizer: Any) -> Callable:
        example = peer.build(model, tokenizer)

        def explain(prompt_ids: Tensor, mask: Tensor, target_ids: Tensor) -> Tensor:
            with torch.enable_grad():  # the gradient peers need it
                scores = rows_of_examples(prompt_ids, mask, target_ids, example)
            return scores.float()  # [batch, T, P]

        return explain

    return MethodSpec(
        peer.name,
        _no_classifier,
        "peer",
        needs_gradients=True,
        causal_lm=True,
        generation=generation,
        one_prompt_at_a_time=True,
    )


# ------------------------------------------------------------------ runs
def recall_task(limit: int) -> Tuple[nn.Module, Any, LoadedExamples]:
    r"""The default generator, its tokenizer and ``limit`` held-out recall
    prompts with their continuations and planted evidence."""
    from captum_ext.defaults.generator import load_default_generator

    model, tokenizer = load_default_generator()
    return model, tokenizer, recall_data(limit, tokenizer)


def _run(
    methods: Sequence[str], limit: int, extra: Sequence[MethodSpec] = ()
) -> BenchmarkResult:
    model, tokenizer, data = recall_task(limit)
    options = GenerationBenchmarkOptions(
        methods=list(methods), task="recall", progress=False, n_examples=0
    )
    return run_generation_benchmark(model, tokenizer, data, options, extra)


def _record(result: BenchmarkResult) -> List[Dict[str, Any]]:
    return [
        {"method": row.method, "metrics": row.metrics, "time": row.time_ratio}
        for row in result.rows
    ]


def installed(peer: Peer) -> Optional[str]:
    r"""The peer's version, or None (with a notice) when its module is absent."""
    root = peer.module.split(".")[0]
    if importlib.util.find_spec(root) is None:
        print(f"skipped {peer.name}: {peer.distribution} is not installed")
        return None
    try:
        return importlib.metadata.version(peer.distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


def _peer_in_child(peer: Peer, limit: int) -> List[Dict[str, Any]]:
    r"""The peer's row from a child process of its own (its patches stay
    there); [] with a notice where it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        command = [sys.executable, "-m", "benchmarks.bench_peers", "--limit"]
        command += [str(limit), "--only", peer.name, "--json", str(out)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode or not out.exists():
            error = (done.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"failed {peer.name}: {error}")
            return []
        return json.loads(out.read_text())


def _print_table(records: List[Dict[str, Any]]) -> None:
    header = f"{'method':<36}" + "".join(f"{c:>11}" for c in COLUMNS)
    print(header + f"{'x forward':>11}")
    ranked = sorted(records, key=lambda r: -r["metrics"].get("Evidence@1", 0.0))
    for record in ranked:
        cells = "".join(
            f"{record['metrics'].get(column, float('nan')):>11.3f}"
            for column in COLUMNS
        )
        print(f"{record['method']:<36}{cells}{record['time']:>11.1f}")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=64, help="recall prompts")
    parser.add_argument("--methods", nargs="*", default=list(DEFAULT_METHODS))
    parser.add_argument("--only", help=argparse.SUPPRESS)  # a peer, in a child
    parser.add_argument("--json", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    if options.only:
        peer = next(p for p in PEERS if p.name == options.only)
        result = _run([], options.limit, [peer_spec(peer)])
        Path(options.json).write_text(json.dumps(_record(result)))
        return
    import captum
    import transformers

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"captum {captum.__version__}; {options.limit} recall prompts, one thread"
    )
    records = []
    for peer in PEERS:
        version = installed(peer)
        if version is not None:
            print(f"running {peer.name} ({peer.distribution} {version})")
            records += _peer_in_child(peer, options.limit)
    if options.methods:
        records += _record(_run(options.methods, options.limit))
    print(
        "time: per prompt over one forward pass of prompt + continuation at the "
        "method's batch size (peers and Captum's LLM API: one prompt per call)"
    )
    _print_table(records)


if __name__ == "__main__":
    main()

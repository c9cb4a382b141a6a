#!/usr/bin/env python3
r"""Loading the user's classifier or causal LM: a local Hugging Face
sequence-classifier (or ``*ForCausalLM``) directory (``save_pretrained``) or a
Hub model id, loaded the default way (``sdpa`` attention where the family has
it: the attention-reading methods recompute what they need from its query and
key), and a clear error for everything else.

A Hub id goes through ``huggingface_hub`` and ``from_pretrained`` and their
cache, so ``HF_HOME``, ``HF_HUB_OFFLINE`` and ``HF_TOKEN`` (or ``hf auth
login``) work as everywhere else; :func:`resolve_model_source` pins the
snapshot's commit, which the benchmark's configuration records."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, TYPE_CHECKING, Union

import torch
from torch import nn

from captum_ext._utils.token_batch import check_tokenizer_vocabulary
from captum_ext.adapters import get_adapter, UnsupportedModelError
from captum_ext.defaults.library_bars import quiet_library_bars
from captum_ext.defaults.models import quiet_transformers
from captum_ext.evaluation.hub import cache_only_unless_reachable, is_hub_id
from captum_ext.evaluation.model_files import read_model_config

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "DTYPES",
    "ModelSource",
    "load_causal_lm",
    "load_classifier",
    "resolve_device",
    "resolve_model_source",
]

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

PathLike = Union[str, Path]


def resolve_device(device: Union[str, torch.device, None]) -> torch.device:
    r"""``device`` as a ``torch.device`` that exists on this machine, or a
    ``ValueError`` saying what is available."""
    try:
        chosen = torch.device(device or "cpu")
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"unknown device {device!r} ({error}); use cpu, cuda, cuda:N or mps"
        ) from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but CUDA is not available")
    if chosen.type == "cuda" and chosen.index is not None:
        if chosen.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r} asked for, but this machine has "
                f"{torch.cuda.device_count()} CUDA device(s)"
            )
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} asked for, but MPS is not available")
    return chosen


@dataclass(frozen=True)
class ModelSource:
    r"""Where a model (or tokenizer) comes from: a local directory, or a Hub
    id pinned to the commit of its snapshot.

    Attributes:
        name (str): what the user gave: a directory or a Hub id.
        local (bool): ``True`` for a local directory.
        revision (str or None): the snapshot's commit hash (Hub ids only).
        directory (Path): where ``config.json`` is (the local directory, or
            the snapshot in the Hub cache).
    """

    name: str
    local: bool
    revision: Optional[str]
    directory: Path

    def record(self) -> Dict[str, Optional[str]]:
        r"""``{"path": ..., "revision": None}`` or ``{"id": ..., "revision":
        commit}``: what a manifest or report records about the model."""
        key = "path" if self.local else "id"
        return {key: self.name, "revision": self.revision}

    @classmethod
    def of(cls, model: nn.Module) -> "ModelSource":
        r"""The source a loaded model names in its config (``_name_or_path``
        and, when :func:`load_classifier` loaded it from the Hub, the commit)."""
        config = getattr(model, "config", None)
        name = str(getattr(config, "_name_or_path", "") or "")
        revision = getattr(config, "_commit_hash", None)
        local = not revision and (not name or Path(name).exists())
        return cls(name, local, revision if not local else None, Path(name))


def _hub_error(name: str, revision: Optional[str], error: Exception) -> ValueError:
    r"""One line naming the id and what to do, for each way a Hub lookup
    fails (the local-cache miss first: it subclasses the not-found error)."""
    from huggingface_hub import constants, errors

    if isinstance(error, errors.LocalEntryNotFoundError):
        if constants.is_offline_mode():  # set by the user, or the Hub unreachable
            return ValueError(
                f"Hub model {name!r} is not in the local cache "
                f"({constants.HF_HUB_CACHE}), and the Hub is unreachable or "
                "HF_HUB_OFFLINE is set: download it once with a network (and "
                "HF_HUB_OFFLINE unset), or set HF_HOME to a cache that holds it"
            )
        return ValueError(
            f"cannot download Hub model {name!r}: the Hub is unreachable and the "
            f"model is not in the local cache ({constants.HF_HUB_CACHE}); check "
            "the network (or HF_ENDPOINT), or set HF_HOME to a cache that holds it"
        )
    if isinstance(error, errors.RevisionNotFoundError):
        return ValueError(f"Hub model {name!r} has no revision {revision!r}")
    if isinstance(error, errors.RepositoryNotFoundError):
        return ValueError(
            f"{name!r} is neither a local directory nor a Hub model you can "
            "access (private or gated: set HF_TOKEN or run `hf auth login`)"
        )
    if isinstance(error, errors.EntryNotFoundError):
        return ValueError(
            f"Hub repository {name!r} has no config.json: it is not a "
            "transformers model"
        )
    return ValueError(f"cannot fetch Hub model {name!r}: {error}")


def resolve_model_source(
    name_or_path: Union[str, Path], revision: Optional[str] = None
) -> ModelSource:
    r"""A local directory as it is, or a Hub id resolved to the commit of its
    snapshot, fetching only its ``config.json`` (through the Hub cache, so it
    works offline once cached).

    Args:
        name_or_path (str or Path): a directory written by ``save_pretrained``,
            or a Hub model id (``"org/name"``).
        revision (str, optional): branch, tag or commit of a Hub id. Default:
            the repository's default branch.

    Returns:
        ModelSource: with :meth:`ModelSource.record` for manifests and reports.

    Raises:
        ValueError: a missing directory, a revision for a directory, an id the
            Hub does not have, or one that is not cached when offline.
    """
    name = str(name_or_path)
    path = Path(name).expanduser()
    if not is_hub_id(name):
        if revision is not None:
            raise ValueError(
                f"--revision applies to Hub ids, but {name!r} is a local path"
            )
        if not path.is_dir():
            raise ValueError(
                f"model directory {name!r} does not exist (give a directory "
                "written by save_pretrained, or a Hub model id like org/name)"
            )
        return ModelSource(name, True, None, path)
    from huggingface_hub import hf_hub_download

    try:
        with cache_only_unless_reachable():
            config = Path(hf_hub_download(name, "config.json", revision=revision))
    except Exception as error:  # every failure becomes one line naming the id
        raise _hub_error(name, revision, error) from error
    # The cache's layout: snapshots/<commit>/config.json.
    return ModelSource(name, False, config.parent.name, config.parent)


@dataclass(frozen=True)
class _Kind:
    r"""What a loader loads: its name in messages, the architecture suffixes a
    directory must declare, and what to give instead."""

    name: str
    suffixes: Tuple[str, ...]
    advice: str


_CLASSIFIER = _Kind(
    "sequence classifier",
    ("ForSequenceClassification",),
    "Fine-tune an AutoModelForSequenceClassification and save that (a causal "
    "LM's prompts: --prompt-column)",
)
_CAUSAL_LM = _Kind(
    "causal LM",
    ("ForCausalLM", "LMHeadModel"),  # GPT2LMHeadModel
    "--prompt-column explains a causal LM's text; for a classifier drop it "
    "and --target-column and give --text-column",
)


def _check_architecture(name: str, config: dict, kind: _Kind) -> None:
    architectures = config.get("architectures") or []
    if architectures and not any(
        architecture.endswith(kind.suffixes) for architecture in architectures
    ):
        raise UnsupportedModelError(
            f"{name!r} holds a {', '.join(architectures)}, not a {kind.name}: "
            f"its head would be randomly initialised. {kind.advice}"
        )


def _check_head(name: str, info: dict, kind: _Kind) -> None:
    r"""Refuses weights the directory did not provide: a head initialised at
    random would be explained as if it were trained."""
    missing = list(info.get("missing_keys") or [])
    if missing:
        shown = ", ".join(missing[:4]) + (" ..." if len(missing) > 4 else "")
        raise UnsupportedModelError(
            f"{name!r} lacks weights the {kind.name} needs ({shown}); they "
            f"would be randomly initialised. Give a trained {kind.name} directory"
        )


def _dtype(dtype: Union[str, torch.dtype]) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def _pretrained(source: ModelSource, trust_remote_code: bool) -> Dict[str, Any]:
    r"""``from_pretrained`` arguments that load exactly ``source``: the local
    directory without a hub, or the Hub id at its resolved commit."""
    return {
        "pretrained_model_name_or_path": (
            str(source.directory) if source.local else source.name
        ),
        "revision": source.revision,
        "local_files_only": source.local,
        "trust_remote_code": trust_remote_code,
    }


def _tokenizer(source: ModelSource, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    advice = (
        "save it with tokenizer.save_pretrained(path) or give --tokenizer DIR_OR_ID"
    )
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            **_pretrained(source, trust_remote_code)
        )
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(
            f"no tokenizer could be loaded from {source.name!r} ({error}); {advice}"
        ) from None
    # A directory without vocabulary files still gives a tokenizer (built from
    # the config's class alone) that knows only its special tokens, so every
    # word would become the unknown token.
    if not set(tokenizer.get_vocab()) - set(tokenizer.all_special_tokens):
        raise ValueError(
            f"{source.name!r} holds no tokenizer vocabulary (no tokenizer.json, "
            f"vocab.txt, vocab.json or sentencepiece model); {advice}"
        )
    return tokenizer


def _set_padding(model: nn.Module, tokenizer: Any) -> None:
    r"""Decoder-only classifiers often ship without a pad token; the eos token
    is the usual choice, and the model must know it to find the last token."""
    if tokenizer.pad_token_id is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    config: Any = model.config
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = tokenizer.pad_token_id


def load_classifier(
    path: PathLike,
    *,
    tokenizer: Optional[PathLike] = None,
    device: Union[str, torch.device] = "cpu",
    dtype: Union[str, torch.dtype] = "float32",
    max_length: Optional[int] = None,
    revision: Optional[str] = None,
    trust_remote_code: bool = False,
) -> Tuple["PreTrainedModel", Any]:
    r"""A Hugging Face sequence classifier and its tokenizer, from a local
    directory or a Hub id, ready to explain: eval mode, the default attention (sdpa), on
    ``device`` in ``dtype``.

    A Hub id is loaded through the Hub cache (``HF_HOME``; offline with
    ``HF_HUB_OFFLINE=1`` once cached; private and gated models with
    ``HF_TOKEN``), pinned to the commit :func:`resolve_model_source` resolved;
    ``ModelSource.of(model)`` gives it back.

    Args:
        path (str or Path): a directory written by ``save_pretrained`` of an
            ``AutoModelForSequenceClassification``, or a Hub model id.
        tokenizer (str or Path, optional): the tokenizer's directory or Hub id.
            Default: ``path``.
        device (str or torch.device, optional): Default: ``"cpu"``.
        dtype (str or torch.dtype, optional): ``"float32"``, ``"bfloat16"`` or
            ``"float16"``. Default: ``"float32"``.
        max_length (int, optional): tokens per input the engine should use
            (sets ``tokenizer.model_max_length``). Default: the tokenizer's.
        revision (str, optional): branch, tag or commit of a Hub id.
            Default: its default branch.
        trust_remote_code (bool, optional): run the repository's own model
            code (only for repositories you trust). Default: ``False``.

    Returns:
        tuple: ``(model, tokenizer)``.

    Raises:
        ValueError: a missing directory, an id the Hub lacks (or not cached
            when offline), no tokenizer, an unknown device or dtype.
        UnsupportedModelError: not a sequence classifier (a masked-LM or bare
            encoder directory), weights missing from the directory, or an
            architecture captum_ext has no adapter for.

    When stderr is not a terminal, transformers' own progress bars are turned
    off (they would write carriage returns into the log).
    """
    from transformers import AutoModelForSequenceClassification

    return _load(
        AutoModelForSequenceClassification,
        _CLASSIFIER,
        path,
        tokenizer,
        device,
        dtype,
        max_length,
        revision,
        trust_remote_code,
    )


def load_causal_lm(
    path: PathLike,
    *,
    tokenizer: Optional[PathLike] = None,
    device: Union[str, torch.device] = "cpu",
    dtype: Union[str, torch.dtype] = "float32",
    max_length: Optional[int] = None,
    revision: Optional[str] = None,
    trust_remote_code: bool = False,
) -> Tuple["PreTrainedModel", Any]:
    r"""A Hugging Face causal language model (``AutoModelForCausalLM``) and its
    tokenizer, as :func:`load_classifier` loads a classifier (same arguments,
    same errors): eval mode, the default attention, a pad token (the EOS token when
    the tokenizer has none). The adapter must see a causal LM
    (``is_causal_lm``: an LM head, no classification head), or
    :class:`UnsupportedModelError` says what the model lacks."""
    from transformers import AutoModelForCausalLM

    model, loaded = _load(
        AutoModelForCausalLM,
        _CAUSAL_LM,
        path,
        tokenizer,
        device,
        dtype,
        max_length,
        revision,
        trust_remote_code,
    )
    get_adapter(model).require_causal_lm("captum-ext attribute --prompt-column")
    return model, loaded


def _load(
    auto_class: Any,
    kind: _Kind,
    path: PathLike,
    tokenizer: Optional[PathLike],
    device: Union[str, torch.device],
    dtype: Union[str, torch.dtype],
    max_length: Optional[int],
    revision: Optional[str],
    trust_remote_code: bool,
) -> Tuple["PreTrainedModel", Any]:
    quiet_library_bars()
    chosen_device = resolve_device(device)
    chosen_dtype = _dtype(dtype)
    if max_length is not None and max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    source = resolve_model_source(path, revision)
    _check_architecture(source.name, read_model_config(source.directory), kind)
    tokenizer_source = resolve_model_source(tokenizer) if tokenizer else source
    with cache_only_unless_reachable():
        loaded_tokenizer = _tokenizer(tokenizer_source, trust_remote_code)
    try:
        # quiet_transformers: no weight-loading bar or load report
        with quiet_transformers(), cache_only_unless_reachable():
            model, info = auto_class.from_pretrained(
                **_pretrained(source, trust_remote_code),
                dtype=chosen_dtype,
                output_loading_info=True,
            )
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(
            f"cannot load a {kind.name} from {source.name!r}: {error}"
        ) from None
    _check_head(source.name, info, kind)
    # UnsupportedModelError for a family without an adapter.
    check_tokenizer_vocabulary(get_adapter(model), loaded_tokenizer)
    _set_padding(model, loaded_tokenizer)
    # transformers' own field for the snapshot's commit (never saved to disk).
    model.config._commit_hash = source.revision
    if max_length is not None:
        loaded_tokenizer.model_max_length = max_length
    return model.to(chosen_device).eval(), loaded_tokenizer

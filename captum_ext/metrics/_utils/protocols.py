#!/usr/bin/env python3
r"""Perturbation protocols: which tokens are perturbed at which level, and how.

The papers disagree on the grid, the replacement token, signed vs absolute
differences and which tokens may be removed, so each metric has one clean
default plus presets that reproduce each paper's reference code exactly.
"""

from dataclasses import dataclass, replace
from typing import (
    Dict,
    Literal,
    Optional,
    overload,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

import numpy as np

__all__ = [
    "CurveMetric",
    "KendallProtocol",
    "PerturbationProtocol",
    "get_protocol",
    "resolve_protocol",
]

_MODES = ("delete", "mask", "pad")
_ROUNDINGS = ("round", "floor")
_PROTECTS = ("specials", "first")
_OTHERS = ("all", "reference")
_COMPARES = ("argsort", "scores")

CurveMetric = Literal["aopc", "log_odds", "sufficiency", "hiding_revealing"]


def _check_choice(name: str, value: str, allowed: Tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


@dataclass(frozen=True)
class PerturbationProtocol:
    r"""How a perturbation curve is built.

    At level :math:`g` the :math:`k` highest-ranked perturbable tokens are
    perturbed (or, for sufficiency and revealing, every perturbable token but
    them), with :math:`k = \mathrm{round}(g \cdot n)` or :math:`\lfloor g \cdot n
    \rfloor`, capped at the number of perturbable tokens.

    Attributes:
        levels (sequence of float): fractions :math:`g`, increasing, in [0, 1];
            stored as a tuple.
        mode (str): ``"delete"`` (remove the tokens and re-pack the sequence,
            attention mask updated), ``"mask"`` (replace them with
            ``mask_token_id``) or ``"pad"`` (replace them with ``pad_token_id``).
        attend_replaced (bool): replaced tokens keep attention mask 1 (True) or
            get 0 (False). Ignored by ``"delete"``.
        rounding (str): ``"round"`` (half to even, as ``numpy.round``) or
            ``"floor"`` (``int(g * n)``).
        count_specials (bool): :math:`n` counts special tokens too; otherwise
            :math:`n` is the number of real non-special tokens.
        protect (str): ``"specials"``: special tokens are never perturbed;
            ``"first"``: only the first real token ([CLS]) is, special or not.
        protect_last_ranked (bool): the lowest-ranked real token (specials
            included in that ranking) is never perturbed.
        only_positive (bool): only tokens with a score > 0 may be perturbed
            (or kept, for sufficiency).
        skip_repeated (bool): a level whose token set is empty or equal to the
            previous level's is skipped (NaN in the curve, left out of the mean).
        min_length (int): examples with fewer real tokens (specials included)
            are skipped: NaN curve and score.
        absolute (bool): AOPC takes :math:`|p - \tilde p|` instead of
            :math:`p - \tilde p`.
        empty_score (float, optional): the score of an example whose levels were
            all skipped; None gives NaN.
    """

    levels: Sequence[float]
    mode: str = "delete"
    attend_replaced: bool = True
    rounding: str = "round"
    count_specials: bool = False
    protect: str = "specials"
    protect_last_ranked: bool = False
    only_positive: bool = False
    skip_repeated: bool = False
    min_length: int = 0
    absolute: bool = False
    empty_score: Optional[float] = None

    def __post_init__(self) -> None:
        levels = tuple(float(g) for g in self.levels)
        object.__setattr__(self, "levels", levels)
        if not levels or any(not 0.0 <= g <= 1.0 for g in levels):
            raise ValueError(f"levels must be fractions in [0, 1], got {levels}")
        if any(b <= a for a, b in zip(levels, levels[1:])):
            raise ValueError(f"levels must be strictly increasing, got {levels}")
        _check_choice("mode", self.mode, _MODES)
        _check_choice("rounding", self.rounding, _ROUNDINGS)
        _check_choice("protect", self.protect, _PROTECTS)


@dataclass(frozen=True)
class KendallProtocol:
    r"""Which classes and which rankings :func:`~captum_ext.metrics.kendall_tau`
    compares.

    Attributes:
        other (str): ``"all"`` (mean of :math:`\tau_{c, c'}` over every class
            :math:`c' \neq c`) or ``"reference"`` (AttCAT's single :math:`c'`:
            :math:`1 - c` for two classes, else 1 if :math:`c = 0` else
            :math:`c - 1`).
        compare (str): ``"argsort"`` (:math:`\tau` between the index
            permutations :math:`\mathrm{argsort}(-S)`, as AttCAT's code) or
            ``"scores"`` (:math:`\tau_b` between the two score vectors).
        count_specials (bool): rank every real token, special tokens included;
            otherwise the special tokens of ``tokens`` are left out.
    """

    other: str = "all"
    compare: str = "argsort"
    count_specials: bool = False

    def __post_init__(self) -> None:
        _check_choice("other", self.other, _OTHERS)
        _check_choice("compare", self.compare, _COMPARES)


Protocol = Union[PerturbationProtocol, KendallProtocol]
P = TypeVar("P", PerturbationProtocol, KendallProtocol)


def _tenths(first: int, last: int) -> Tuple[float, ...]:
    return tuple(i / 10 for i in range(first, last + 1))


# AttCAT's `np.linspace(0, 1, 10)[1:]` and ferret's `np.arange(0.1, 1.1, 0.1)`
# are kept bit for bit: their float values decide k at the rounding boundaries.
_ATTCAT_LEVELS = tuple(np.linspace(0, 1, 10)[1:].tolist())
_FERRET_LEVELS = tuple(np.arange(0.1, 1.1, 0.1).tolist())

_DEFAULT = PerturbationProtocol(levels=_tenths(1, 10))
_ATTCAT = PerturbationProtocol(
    levels=_ATTCAT_LEVELS,
    count_specials=True,
    protect_last_ranked=True,
    min_length=10,
)
_NORMXLOGIT = PerturbationProtocol(
    levels=_tenths(1, 9),
    mode="mask",
    rounding="floor",
    count_specials=True,
    protect="first",
)
_FERRET = PerturbationProtocol(
    levels=_FERRET_LEVELS, rounding="floor", only_positive=True, skip_repeated=True
)

_PRESETS: Dict[str, Dict[Optional[str], Protocol]] = {
    "aopc": {
        None: _DEFAULT,
        "attcat": replace(_ATTCAT, absolute=True),
        "normxlogit": _NORMXLOGIT,
        "ferret": replace(_FERRET, empty_score=0.0),
    },
    "log_odds": {
        None: _DEFAULT,
        "attcat": replace(_ATTCAT, mode="pad"),
    },
    "sufficiency": {
        None: _DEFAULT,
        "normxlogit": _NORMXLOGIT,
        "ferret": replace(_FERRET, empty_score=1.0),
    },
    "hiding_revealing": {
        None: replace(_DEFAULT, levels=_tenths(0, 10)),
        "decoded": PerturbationProtocol(
            levels=_tenths(0, 10),
            mode="mask",
            attend_replaced=False,
            count_specials=True,
        ),
    },
    # Generated text: the same clean default (delete the top fraction of the
    # non-special prompt tokens, BOS and chat-template tokens protected).
    "generation_aopc": {None: _DEFAULT},
    "generation_log_odds": {None: _DEFAULT},
    "generation_sufficiency": {None: _DEFAULT},
    "kendall_tau": {
        None: KendallProtocol(),
        "attcat": KendallProtocol(other="reference", count_specials=True),
    },
}


@overload
def get_protocol(
    metric: Literal["kendall_tau"], preset: Optional[str] = None
) -> KendallProtocol: ...


@overload
def get_protocol(
    metric: CurveMetric, preset: Optional[str] = None
) -> PerturbationProtocol: ...


@overload
def get_protocol(metric: str, preset: Optional[str] = None) -> Protocol: ...


def get_protocol(metric: str, preset: Optional[str] = None) -> Protocol:
    r"""The protocol of ``metric`` under ``preset`` (None = the clean default):
    a :class:`PerturbationProtocol` for the perturbation-curve metrics, a
    :class:`KendallProtocol` for ``"kendall_tau"``. Custom protocols start from
    one: ``dataclasses.replace(get_protocol("aopc"), levels=(0.1, 0.2))``.

    Args:

        metric (str): a metric's name, e.g. ``"aopc"`` or ``"kendall_tau"``.
        preset (str, optional): one of the metric's presets (``"attcat"``,
                ``"normxlogit"``, ``"ferret"``, where the metric has it).
                Default: None (the metric's default protocol)

    Returns:
        PerturbationProtocol or KendallProtocol: the protocol, a frozen record.
    """
    if metric not in _PRESETS:
        raise ValueError(f"no metric {metric!r}; available: {sorted(_PRESETS)}")
    presets = _PRESETS[metric]
    if preset not in presets:
        names = sorted(name for name in presets if name is not None)
        raise ValueError(
            f"{metric} has no preset {preset!r}; available: None (default), "
            + ", ".join(repr(name) for name in names)
        )
    return presets[preset]


def resolve_protocol(
    metric: str, preset: Union[None, str, Protocol], kind: Type[P]
) -> P:
    r"""``preset`` as a protocol of type ``kind``: a preset name of ``metric``
    (None = the default) or a protocol given as it is."""
    protocol = (
        preset
        if isinstance(preset, (PerturbationProtocol, KendallProtocol))
        else get_protocol(metric, preset)
    )
    if not isinstance(protocol, kind):
        raise TypeError(
            f"{metric} takes a {kind.__name__} as preset, got "
            f"{type(protocol).__name__}"
        )
    return protocol

#!/usr/bin/env python3
r"""Perturbation protocols: which tokens are perturbed at which level, and how.

The papers disagree on the grid, the replacement token, signed vs absolute
differences and which tokens may be removed, so each metric has one clean
default plus presets that reproduce each paper's reference code exactly.
"""

from dataclasses import dataclass, replace
from typing import Dict, Optional, Tuple, Union

import numpy as np

__all__ = ["PerturbationProtocol", "get_protocol", "resolve_protocol"]

_MODES = ("delete", "mask", "pad")
_ROUNDINGS = ("round", "floor")
_PROTECTS = ("specials", "first")


@dataclass(frozen=True)
class PerturbationProtocol:
    r"""How a perturbation curve is built.

    At level :math:`g` the :math:`k` highest-ranked perturbable tokens are
    perturbed (or, for sufficiency and revealing, every perturbable token but
    them), with :math:`k = \mathrm{round}(g \cdot n)` or :math:`\lfloor g \cdot n
    \rfloor`, capped at the number of perturbable tokens.

    Attributes:
        levels (tuple[float, ...]): fractions :math:`g`, increasing, in [0, 1].
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

    levels: Tuple[float, ...]
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
        for name, value, allowed in (
            ("mode", self.mode, _MODES),
            ("rounding", self.rounding, _ROUNDINGS),
            ("protect", self.protect, _PROTECTS),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


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

_PRESETS: Dict[str, Dict[Optional[str], PerturbationProtocol]] = {
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
}


def get_protocol(metric: str, preset: Optional[str] = None) -> PerturbationProtocol:
    r"""The protocol of ``metric`` under ``preset`` (None = the clean default)."""
    presets = _PRESETS[metric]
    if preset not in presets:
        names = sorted(name for name in presets if name is not None)
        raise ValueError(
            f"{metric} has no preset {preset!r}; available: None (default), "
            + ", ".join(repr(name) for name in names)
        )
    return presets[preset]


def resolve_protocol(
    metric: str,
    preset: Union[None, str, PerturbationProtocol],
    **overrides: object,
) -> PerturbationProtocol:
    r"""``preset`` (a name or a protocol) with the non-None ``overrides`` applied."""
    protocol = (
        preset
        if isinstance(preset, PerturbationProtocol)
        else get_protocol(metric, preset)
    )
    changes = {name: value for name, value in overrides.items() if value is not None}
    if "levels" in changes:
        changes["levels"] = tuple(changes["levels"])  # type: ignore[arg-type]
    return replace(protocol, **changes) if changes else protocol

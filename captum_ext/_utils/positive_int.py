#!/usr/bin/env python3
r"""The one check of a count that must be a positive int (a batch size, a length,
tokens to generate), or None where the caller has a default."""

from typing import Optional

__all__ = ["check_positive_int"]


def check_positive_int(
    value: Optional[int], name: str, unit: Optional[str] = None
) -> Optional[int]:
    r"""Returns ``value`` unchanged if it is ``None`` or a positive int.

    Args:
        value (int or None): the count to check.
        name (str): the argument's name, the start of the error message.
        unit (str, optional): what is counted, shown in the error (e.g.
            ``"examples per chunk"``). Default: None

    Raises:
        TypeError: ``value`` is not an int (``bool`` included).
        ValueError: ``value`` is zero or negative.
    """
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be a positive int or None, got {value!r}")
    if value < 1:
        shown = f" ({unit})" if unit else ""
        raise ValueError(f"{name} must be a positive int{shown}, got {value}")
    return value

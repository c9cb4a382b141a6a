#!/usr/bin/env python3
r"""Package attributes imported on first use (PEP 562), so that importing a
package, or ``captum-ext --help``, does not import torch."""

import importlib
from typing import Any, Callable, Dict, List, Tuple

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, where: Dict[str, str], names: Dict[str, Any]
) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    r"""``__getattr__`` and ``__dir__`` for ``package``: ``where`` maps each lazy
    name to the module that defines it; ``names`` is the package's ``globals()``.
    """

    def getattr_(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    def dir_() -> List[str]:
        return sorted(set(names) | set(where))

    return getattr_, dir_

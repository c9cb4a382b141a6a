#!/usr/bin/env python3
r"""A minimal stand-in for ``captum_ext.evaluation.data.TextData`` (helper
"attribute" writes the real one): the fields the engine reads."""

from dataclasses import dataclass, field
from typing import List, Optional

from tests.helpers import TINY_LABEL_NAMES, TINY_TEXTS


@dataclass
class TextData:
    texts: List[str]
    labels: Optional[List[int]] = None
    label_names: Optional[List[str]] = None
    text_pairs: Optional[List[str]] = None
    source: str = "tiny"
    rows: List[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)


def tiny_data(n: int = 4, labels: bool = True, pairs: bool = False) -> TextData:
    texts = list(TINY_TEXTS[:n])
    return TextData(
        texts,
        [i % 3 for i in range(n)] if labels else None,
        list(TINY_LABEL_NAMES),
        list(reversed(texts)) if pairs else None,
        rows=list(range(n)),
    )

#!/usr/bin/env python3
r"""An image classification task as the classifier engine runs it: the images
of a data set as patch tokens (:class:`~captum_ext.metrics.PatchTokens`), read
through a tokenizer-like :class:`ImageTokenizer`. Example ``i`` is the text
``"image i"``; its "tokens" are the vision transformer's class token(s) and
patches, so the engine's batches, methods, metrics (masking patches), timings
and tables are those of a text classifier's, unchanged."""

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from torch import nn, Tensor

from captum_ext._utils.model_forward import ImageClassifierLogits
from captum_ext.metrics import PatchTokens

__all__ = ["ImageTokenizer", "image_inputs"]

_PREFIX = "image "


class ImageTokenizer:
    r"""The tokenizer of a vision transformer's image task.

    Args:
        images (Tensor): the data set's images ``[n, channels, height,
                width]``, as the model reads them.
        patch_size (int or tuple of int): the model's patch size.
        class_tokens (int, optional): the model's class tokens. Default: 1
        baseline (float, optional): the pixel value of a masked patch.
                Default: 0.0
    """

    def __init__(
        self,
        images: Tensor,
        patch_size: Union[int, Tuple[int, int]],
        class_tokens: int = 1,
        baseline: float = 0.0,
    ) -> None:
        self.patches = PatchTokens(images, patch_size, class_tokens, baseline)
        self.ids = self.patches.input_ids  # [n, class_tokens + patches]
        self.mask_token_id = self.pad_token_id = self.patches.mask_token_id
        self.unk_token_id: Optional[int] = None
        self.all_special_ids = [*range(class_tokens), self.mask_token_id]
        self.model_max_length = self.ids.shape[1]

    @staticmethod
    def texts(n: int) -> List[str]:
        r"""The texts that name the first ``n`` images."""
        return [f"{_PREFIX}{i}" for i in range(n)]

    def __call__(
        self, texts: Sequence[str], text_pairs: Any = None, **_: Any
    ) -> Dict[str, List[List[int]]]:
        if text_pairs is not None:
            raise ValueError("an image task has no text pairs")
        return {"input_ids": [self.ids[self._index(text)].tolist() for text in texts]}

    def _index(self, text: str) -> int:
        if not text.startswith(_PREFIX) or not text[len(_PREFIX) :].isdigit():
            raise ValueError(f"an image task's examples are 'image <i>', got {text!r}")
        return int(text[len(_PREFIX) :])

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> List[str]:
        r"""``[CLS]`` (``[DIST]`` for a second class token), ``[MASK]``, and
        ``r,c`` for the patch in row ``r``, column ``c`` of the grid."""
        names = ["[CLS]", "[DIST]"][: self.patches.class_tokens]
        cols, first = self.patches.grid[1], self.mask_token_id + 1
        out = []
        for token in ids:
            if token < len(names):
                out.append(names[token])
            elif token == self.mask_token_id:
                out.append("[MASK]")
            else:
                row, col = divmod((token - first) % self.patches.num_patches, cols)
                out.append(f"{row},{col}")
        return out

    def pixels(self, input_ids: Tensor, attention_mask: Optional[Tensor]) -> Tensor:
        r"""The images of rows of patch token ids (masked patches at the
        baseline)."""
        return self.patches.pixels(input_ids, attention_mask)

    def forward_func(self, model: nn.Module) -> Any:
        r"""``f(input_ids, attention_mask=None, token_type_ids=None) ->
        logits``: the model on the images of the ids."""
        logits = ImageClassifierLogits(model)
        # The engine passes a text model's token_type_ids third: images have none.
        return self.patches.forward_func(lambda pixels, _=None: logits(pixels))


def image_inputs(tokenizer: Any, input_ids: Tensor, args: tuple) -> Tuple[Any, Any]:
    r"""A method's ``(inputs, additional_forward_args)`` for the engine's
    ``(input_ids, forward_args)``: the pixels and no further argument for an
    :class:`ImageTokenizer`'s ids, else as given."""
    if isinstance(tokenizer, ImageTokenizer):
        return tokenizer.pixels(input_ids, args[0]), None
    return input_ids, args

#!/usr/bin/env python3
r"""A vision transformer's token scores on its patch grid and on pixels, for
Captum's ``visualize_image_attr``."""

from typing import Tuple

from torch import Tensor

__all__ = ["patch_grid", "patch_pixels"]


def patch_grid(scores: Tensor, grid: Tuple[int, int], class_tokens: int = 1) -> Tensor:
    r"""The patch scores of ``[batch, class_tokens + rows * cols]`` token scores
    (a ViT's sequence: its class token(s) first, then the patches row by row)
    laid out on the patch grid, ``[batch, rows, cols]``.

    Args:
        scores (Tensor): ``[batch, class_tokens + rows * cols]``, e.g.
                ``AttCAT(forward_func, layer, attention).attribute(pixels)``.
        grid (tuple of int): ``(rows, cols)``, the image size divided by the
                patch size (``image_size // patch_size`` each way).
        class_tokens (int, optional): tokens before the patches (1 for ViT's
                [CLS], 2 for DeiT's class and distillation tokens).
                Default: 1

    Returns:
        Tensor ``[batch, rows, cols]``.
    """
    rows, cols = grid
    if scores.dim() != 2 or scores.shape[1] != class_tokens + rows * cols:
        raise ValueError(
            f"scores {tuple(scores.shape)} are not [batch, {class_tokens} + "
            f"{rows} x {cols}] for a {rows} x {cols} patch grid after "
            f"{class_tokens} class token(s)"
        )
    return scores[:, class_tokens:].reshape(len(scores), rows, cols)


def patch_pixels(
    scores: Tensor,
    grid: Tuple[int, int],
    image_size: Tuple[int, int],
    class_tokens: int = 1,
) -> Tensor:
    r"""Each patch's score on every pixel of its patch, ``[batch, height, width,
    1]`` (channels last, Captum's ``visualize_image_attr`` layout).

    Args:
        scores (Tensor): ``[batch, class_tokens + rows * cols]``, as in
                :func:`patch_grid`.
        grid (tuple of int): ``(rows, cols)``.
        image_size (tuple of int): ``(height, width)``, multiples of ``rows``
                and ``cols``.
        class_tokens (int, optional): As in :func:`patch_grid`.
                Default: 1

    Returns:
        Tensor ``[batch, height, width, 1]``.

    Example::

        >>> from captum.attr import visualization as viz
        >>> heat = patch_pixels(scores, (14, 14), (224, 224))
        >>> viz.visualize_image_attr(heat[0].numpy(), image_hwc, "blended_heat_map")
    """
    (rows, cols), (height, width) = grid, image_size
    if height % rows or width % cols:
        raise ValueError(
            f"image_size {image_size} is not a whole number of {rows} x {cols} "
            "patches"
        )
    on_grid = patch_grid(scores, grid, class_tokens)  # [batch, rows, cols]
    pixels = on_grid.repeat_interleave(height // rows, 1)
    pixels = pixels.repeat_interleave(width // cols, 2)  # [batch, height, width]
    return pixels[..., None]

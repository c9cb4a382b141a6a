#!/usr/bin/env python3
r"""A vision transformer's token scores on its patch grid and on pixels."""

import pytest
import torch

from captum_ext.visualization import patch_grid, patch_pixels


def test_patches_are_laid_out_row_by_row_after_the_class_token() -> None:
    scores = torch.arange(1 + 6.0)[None]  # [CLS] then patches 1..6
    assert patch_grid(scores, (2, 3)).tolist() == [[[1, 2, 3], [4, 5, 6]]]
    deit = torch.arange(2 + 4.0).expand(3, -1)  # class + distillation tokens
    assert patch_grid(deit, (2, 2), class_tokens=2)[2].tolist() == [[2, 3], [4, 5]]


def test_every_pixel_of_a_patch_gets_its_score() -> None:
    scores = torch.tensor([[9.0, 1.0, 2.0, 3.0, 4.0]])
    pixels = patch_pixels(scores, (2, 2), (4, 6))  # patches of 2 x 3 pixels
    assert pixels.shape == (1, 4, 6, 1)
    expected = torch.tensor([[1.0] * 3 + [2.0] * 3] * 2 + [[3.0] * 3 + [4.0] * 3] * 2)
    assert torch.equal(pixels[0, ..., 0], expected)


def test_shapes_that_do_not_fit_the_grid_are_refused() -> None:
    with pytest.raises(ValueError, match=r"not \[batch, 1 \+ 2 x 2\]"):
        patch_grid(torch.zeros(1, 6), (2, 2))
    with pytest.raises(ValueError, match="not a whole number of 2 x 2 patches"):
        patch_pixels(torch.zeros(1, 5), (2, 2), (5, 4))

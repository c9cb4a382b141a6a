#!/usr/bin/env python3
r"""Input parsing, ranking, perturbation and batching shared by the metrics."""

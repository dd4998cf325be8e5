"""Paired significance between two systems over the same queries."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def paired_randomization(a: Sequence[float], b: Sequence[float], n_resamples: int = 10_000, seed: int = 0) -> float:
    """Two-sided paired randomization (sign-flip) test on the mean difference; returns the p-value.

    Under H0 the sign of each query's difference is exchangeable; p = (1 + #{|mean flipped| >= |observed|})
    / (1 + n_resamples). Seeded, so reports are reproducible byte for byte.
    """
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if not diff.any():
        return 1.0
    observed = abs(diff.mean())
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(n_resamples, diff.size))
    extreme = int((np.abs((signs * diff).mean(axis=1)) >= observed - 1e-12).sum())
    return (1 + extreme) / (1 + n_resamples)

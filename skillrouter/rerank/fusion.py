"""Fusing the two stages' evidence over a query's reranked head (``fusion`` config group).

* ``none``: the reranker's order alone, as both papers rerank;
* ``interpolate``: ``alpha * z(reranker) + (1 - alpha) * z(first stage)``, each score z-normalised over the query's
  head (population s.d.; a head whose scores are all equal scores 0 for all), so the two scales meet: ``alpha = 0``
  is the first stage's order, ``alpha = 1`` the reranker's;
* ``rrf``: reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009), ``1 / (k + rank)`` summed over the
  first stage's and the reranker's orders of the head, ranks from 1, ``k`` 60.

Ties keep the first stage's order. ranx implements the same two fusions (``wsum`` over ``zmuv``-normalised runs,
``rrf``) and their grid optimisation; it is not called here because its numba kernels cost a one-off compile of about
a minute and seconds more in every new process on this CPU, where a fusion stage takes milliseconds
(``benchmarks/fusion_parity.py`` checks our fused orders against ranx's on the same runs: equal for interpolation,
equal up to the order of tied candidates for RRF).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

METHODS = ("none", "interpolate", "rrf")
ALPHA_GRID = tuple(round(0.1 * i, 1) for i in range(11))  # what alpha=dev chooses from


@dataclass(frozen=True)
class Fusion:
    method: str = "none"
    alpha: float = 0.5   # interpolate: the reranker's weight
    k: int = 60          # rrf

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"fusion.method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.method == "interpolate" and not 0.0 <= float(self.alpha) <= 1.0:
            raise ValueError(f"fusion.alpha must be in [0, 1] (or dev), got {self.alpha!r}")
        if self.method == "rrf" and int(self.k) < 0:
            raise ValueError(f"fusion.k must be >= 0, got {self.k!r}")


def znorm(scores: Sequence[float]) -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64)
    if x.size == 0:
        return x
    sd = x.std()
    return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)


def ranks(scores: Sequence[float]) -> np.ndarray:
    """1-based rank of each score, best first, ties broken by position (the order a stable sort gives)."""
    order = sorted(range(len(scores)), key=lambda j: (-scores[j], j))
    out = np.empty(len(scores), dtype=np.float64)
    out[order] = np.arange(1, len(scores) + 1)
    return out


def fuse(first: Sequence[float], reranker: Sequence[float], fusion: Fusion) -> list[float]:
    """The fused score of each head candidate, from its first-stage and reranker scores (same order)."""
    if len(first) != len(reranker):
        raise ValueError(f"{len(first)} first-stage scores for {len(reranker)} reranker scores")
    if fusion.method == "none":
        return [float(s) for s in reranker]
    if fusion.method == "interpolate":
        alpha = float(fusion.alpha)
        return (alpha * znorm(reranker) + (1 - alpha) * znorm(first)).tolist()
    return (1.0 / (fusion.k + ranks(first)) + 1.0 / (fusion.k + ranks(reranker))).tolist()


def standard_error(values: Sequence[float]) -> float:
    """The standard error of the mean of per-query ``values`` (0 for fewer than two): the noise a dev split's choice,
    of a fusion weight or of an epoch, is read against."""
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def one_standard_error(per_alpha: Mapping[float, Sequence[float]]) -> tuple[float, float, float]:
    """``(chosen, best, se)`` from each weight's per-query dev scores: ``best`` scores the highest mean, ``se`` is the
    standard error of its mean over the queries, and ``chosen`` is the smallest weight whose mean is within ``se`` of
    the best (the one-standard-error rule: the reranker moves the first stage's order only as far as the dev split
    says, beyond its noise, that it helps)."""
    means = {a: float(np.mean(v)) for a, v in per_alpha.items() if len(v)}
    if not means:
        raise ValueError("no dev query was scored: the fusion weight cannot be chosen")
    best = max(means, key=lambda a: (means[a], -a))
    se = standard_error(per_alpha[best])
    return min(a for a, m in means.items() if m >= means[best] - se - 1e-12), best, se

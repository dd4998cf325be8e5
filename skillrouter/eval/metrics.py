"""Every routing metric of the two papers, per query and aggregated.

Conventions (shared by all metrics):

* ``ranked`` is a query's ranking, best first; duplicate ids count once, at their first position.
* ``gt`` is the set of *core* ground-truth ids (the SkillRouter protocol); ranks are 1-based.
* A query with no ranking is scored on an empty list, i.e. as a miss: denominators never shrink.
* Means are over the queries of a subset: ``single`` (|GT| = 1) and ``multi`` (|GT| >= 2); an empty
  subset reports ``None`` with ``n = 0``.

Per-query definitions:

=============  ==================================================================================
``hit@1``      1 if ranked[1] in GT else 0
``mrr@10``     1 / r for the first rank r <= 10 holding a GT id, else 0
``r@K``        |GT ∩ top-K| / |GT|                           (K = 10, 20, 50; recall)
``fc@10``      1 if GT ⊆ top-10 else 0                       (full coverage)
``ndcg@10``    DCG@10 / IDCG@10 with DCG = Σ_r gain(ranked[r]) / log2(r + 1), linear gains.
               Gains are the query's graded labels where it has any, else 1 for each GT id
               (binary); IDCG sorts all positive gains descending. ``ndcg_graded`` in the
               aggregate says how many queries were scored with graded gains.
``comp@10``    |GT ∩ top-10| / min(|GT|, 10)                 (R3's completeness)
``set_compat`` multi-GT queries only: 1 if GT ⊆ top-|GT| else 0 (R3's Set-Compat)
=============  ==================================================================================
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

from ..data.types import Query

RECALL_KS = (10, 20, 50)
METRIC_NAMES = ("hit@1", "mrr@10", "r@10", "r@20", "r@50", "fc@10", "ndcg@10", "comp@10", "set_compat")


def _dedupe(ranked: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranked))


def hit_at_1(ranked: Sequence[str], gt: set[str]) -> float:
    return float(bool(ranked) and ranked[0] in gt)


def mrr_at(ranked: Sequence[str], gt: set[str], k: int = 10) -> float:
    for rank, sid in enumerate(ranked[:k], start=1):
        if sid in gt:
            return 1.0 / rank
    return 0.0


def recall_at(ranked: Sequence[str], gt: set[str], k: int) -> float:
    return len(gt.intersection(ranked[:k])) / len(gt)


def full_coverage_at(ranked: Sequence[str], gt: set[str], k: int = 10) -> float:
    return float(gt.issubset(ranked[:k]))


def completeness_at(ranked: Sequence[str], gt: set[str], k: int = 10) -> float:
    return len(gt.intersection(ranked[:k])) / min(len(gt), k)


def set_compat(ranked: Sequence[str], gt: set[str]) -> float:
    return float(gt.issubset(ranked[: len(gt)]))


def ndcg_at(ranked: Sequence[str], gains: Mapping[str, float], k: int = 10) -> float:
    dcg = sum(gains.get(sid, 0.0) / math.log2(rank + 1) for rank, sid in enumerate(ranked[:k], start=1))
    ideal = sorted((g for g in gains.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def gains_of(query: Query) -> dict[str, float]:
    """Graded gains where the query has them, else binary gains on the core GT."""
    return dict(query.grades) if query.grades else {g: 1.0 for g in query.gt}


def per_query(ranked: Sequence[str], query: Query) -> dict[str, float]:
    """All metrics of one query (``set_compat`` only for multi-GT queries)."""
    ranked = _dedupe(ranked)
    gt = set(query.gt)
    out = {
        "hit@1": hit_at_1(ranked, gt),
        "mrr@10": mrr_at(ranked, gt, 10),
        **{f"r@{k}": recall_at(ranked, gt, k) for k in RECALL_KS},
        "fc@10": full_coverage_at(ranked, gt, 10),
        "ndcg@10": ndcg_at(ranked, gains_of(query), 10),
        "comp@10": completeness_at(ranked, gt, 10),
    }
    if len(gt) >= 2:
        out["set_compat"] = set_compat(ranked, gt)
    return out


def _mean(rows: list[dict[str, float]], name: str) -> float | None:
    values = [r[name] for r in rows if name in r]
    return sum(values) / len(values) if values else None


def per_query_rows(rankings: Mapping[str, Sequence[str]], queries: Iterable[Query]) -> dict[str, dict[str, float]]:
    """Every query's metrics, keyed by query id (a query without a ranking scores as a miss)."""
    return {q.id: per_query(rankings.get(q.id, ()), q) for q in queries}


def aggregate(rankings: Mapping[str, Sequence[str]], queries: Iterable[Query]) -> tuple[dict[str, float | None], dict[str, int]]:
    """Mean metrics overall and per subset, plus the query count of each subset.

    Returns ``(metrics, counts)``: ``metrics`` has ``name`` and ``single/name``, ``multi/name`` keys;
    ``counts`` has ``all``, ``single``, ``multi`` and ``graded`` (queries scored with graded gains).
    """
    queries = list(queries)
    return aggregate_rows(per_query_rows(rankings, queries), queries)


def aggregate_rows(rows: Mapping[str, Mapping[str, float]], queries: list[Query]) -> tuple[dict[str, float | None], dict[str, int]]:
    """:func:`aggregate` over per-query rows already computed (so a run computes them once)."""
    subsets = {
        "": [rows[q.id] for q in queries],
        "single/": [rows[q.id] for q in queries if len(q.gt) == 1],
        "multi/": [rows[q.id] for q in queries if len(q.gt) >= 2],
    }
    metrics: dict[str, float | None] = {}
    for prefix, subset in subsets.items():
        for name in METRIC_NAMES:
            if prefix == "single/" and name == "set_compat":
                continue  # undefined for single-GT queries
            metrics[prefix + name] = _mean(subset, name)
    counts = {"all": len(queries), "single": len(subsets["single/"]), "multi": len(subsets["multi/"]),
              "graded": sum(1 for q in queries if q.grades)}
    return metrics, counts


def recall_curve(rankings: Mapping[str, Sequence[str]], queries: Iterable[Query], max_k: int = 50) -> list[float]:
    """Mean R@K for K = 1..max_k (the SkillRouter recall figure)."""
    queries = list(queries)
    sums = [0.0] * max_k
    for q in queries:
        ranked, gt = _dedupe(rankings.get(q.id, ())), set(q.gt)
        for k in range(1, max_k + 1):
            sums[k - 1] += recall_at(ranked, gt, k)
    return [s / len(queries) for s in sums] if queries else []

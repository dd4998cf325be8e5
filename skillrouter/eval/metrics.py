"""Every routing metric of the two papers, for any cutoff, per query and aggregated.

A metric is named ``<family>@<K>`` (or ``set_compat``) and parsed by :func:`parse_metric`, so
``eval.metrics`` can ask for any cutoff: ``hit@K``, ``mrr@K``, ``r@K``, ``p@K``, ``map@K``, ``fc@K``,
``ndcg@K``, ``comp@K``, ``set_compat``.

Conventions (shared by all metrics):

* ``ranked`` is a query's ranking, best first; duplicate ids count once, at their first position.
* ``gt`` is the set of scored ground-truth ids (the *core* GT under the SkillRouter protocol,
  restricted to the pool); ranks are 1-based.
* A query with no ranking is scored on an empty list, i.e. as a miss: denominators never shrink.
* Means are over the queries of a subset: ``single`` (|GT| = 1), ``multi`` (|GT| >= 2) and, per
  ``eval.breakdown`` tag, ``<tag>=<value>``; an empty subset reports ``None`` with ``n = 0``.

Per-query definitions:

=============  ==================================================================================
``hit@K``      1 if some GT id is in the top K else 0           (``hit@1``: top-1 accuracy)
``mrr@K``      1 / r for the first rank r <= K holding a GT id, else 0
``r@K``        |GT ∩ top-K| / |GT|                              (recall)
``p@K``        |GT ∩ top-K| / K                                 (precision; SkillRouter's P@3)
``map@K``      Σ over ranks r <= K holding a GT id of p@r, / |GT|  (trec_eval's map_cut_K, as SkillRet's
               evaluator reports it through pytrec_eval: the denominator is |GT|, not min(|GT|, K))
``fc@K``       1 if GT ⊆ top-K else 0                           (SkillRouter's full coverage)
``ndcg@K``     DCG@K / IDCG@K, DCG = Σ_r gain(ranked[r]) / log2(r + 1), linear gains. Gains are the
               query's graded labels where it has any (SkillRouter: ``relevance`` restricted to the
               pool; IDCG sorts all of them), else 1 per GT id (R3: IDCG over min(K, |GT|) ones).
``comp@K``     |GT ∩ top-K| / min(|GT|, K)                      (R3's completeness)
``set_compat`` multi-GT queries only: 1 if GT ⊆ top-|GT| else 0 (R3's Set-Compat)
=============  ==================================================================================
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from ..data.types import Query

HEADLINE = ("hit@1", "mrr@10", "r@10")  # what a grid's summary shows of each cell

DEFAULT_METRICS = ("hit@1", "mrr@10", "r@10", "r@20", "r@50", "fc@10", "ndcg@10", "comp@10", "set_compat")
_NAME = re.compile(r"^(hit|mrr|r|p|map|fc|ndcg|comp)@([1-9][0-9]*)$")


def _dedupe(ranked: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranked))


def hit_at(ranked: Sequence[str], gt: set[str], k: int = 1) -> float:
    return float(any(sid in gt for sid in ranked[:k]))


def hit_at_1(ranked: Sequence[str], gt: set[str]) -> float:
    return hit_at(ranked, gt, 1)


def mrr_at(ranked: Sequence[str], gt: set[str], k: int = 10) -> float:
    for rank, sid in enumerate(ranked[:k], start=1):
        if sid in gt:
            return 1.0 / rank
    return 0.0


def recall_at(ranked: Sequence[str], gt: set[str], k: int) -> float:
    return len(gt.intersection(ranked[:k])) / len(gt)


def precision_at(ranked: Sequence[str], gt: set[str], k: int) -> float:
    return len(gt.intersection(ranked[:k])) / k


def average_precision_at(ranked: Sequence[str], gt: set[str], k: int = 10) -> float:
    hits, total = 0, 0.0
    for rank, sid in enumerate(ranked[:k], start=1):
        if sid in gt:
            hits += 1
            total += hits / rank
    return total / len(gt)


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
    """Graded gains where the query has them, else binary gains on the scored GT."""
    return dict(query.grades) if query.grades else {g: 1.0 for g in query.gt}


_FAMILIES: dict[str, Callable[[list[str], set[str], Query, int], float]] = {
    "hit": lambda r, gt, q, k: hit_at(r, gt, k),
    "mrr": lambda r, gt, q, k: mrr_at(r, gt, k),
    "r": lambda r, gt, q, k: recall_at(r, gt, k),
    "p": lambda r, gt, q, k: precision_at(r, gt, k),
    "map": lambda r, gt, q, k: average_precision_at(r, gt, k),
    "fc": lambda r, gt, q, k: full_coverage_at(r, gt, k),
    "ndcg": lambda r, gt, q, k: ndcg_at(r, gains_of(q), k),
    "comp": lambda r, gt, q, k: completeness_at(r, gt, k),
}


@dataclass(frozen=True)
class Metric:
    """One parsed metric name: ``family`` and cutoff ``k`` (``set_compat`` has none)."""

    name: str
    family: str
    k: int | None

    def multi_only(self) -> bool:
        return self.family == "set_compat"

    def __call__(self, ranked: list[str], gt: set[str], query: Query) -> float:
        if self.family == "set_compat":
            return set_compat(ranked, gt)
        return _FAMILIES[self.family](ranked, gt, query, self.k)


def parse_metric(name: str) -> Metric:
    """``"ndcg@5"`` -> ``Metric("ndcg@5", "ndcg", 5)``; a clear error names what is accepted."""
    name = str(name).strip().lower()
    if name == "set_compat":
        return Metric(name, "set_compat", None)
    match = _NAME.match(name)
    if not match:
        raise ValueError(f"unknown metric {name!r}: use hit@K, mrr@K, r@K, p@K, map@K, fc@K, ndcg@K, comp@K or set_compat")
    return Metric(name, match.group(1), int(match.group(2)))


def parse_metrics(names: Iterable[str]) -> tuple[Metric, ...]:
    return tuple(dict.fromkeys(parse_metric(n) for n in names))


def per_query(ranked: Sequence[str], query: Query, metrics: Sequence[Metric] | None = None) -> dict[str, float]:
    """The metrics of one query (``set_compat`` only for multi-GT queries)."""
    ranked = _dedupe(ranked)
    gt = set(query.gt)
    return {m.name: m(ranked, gt, query) for m in (metrics or parse_metrics(DEFAULT_METRICS))
            if not (m.multi_only() and len(gt) < 2)}


def _mean(rows: list[Mapping[str, float]], name: str) -> float | None:
    values = [r[name] for r in rows if name in r]
    return sum(values) / len(values) if values else None


def per_query_rows(rankings: Mapping[str, Sequence[str]], queries: Iterable[Query],
                   metrics: Sequence[Metric] | None = None) -> dict[str, dict[str, float]]:
    """Every query's metrics, keyed by query id (a query without a ranking scores as a miss)."""
    metrics = metrics or parse_metrics(DEFAULT_METRICS)
    return {q.id: per_query(rankings.get(q.id, ()), q, metrics) for q in queries}


def subsets(queries: list[Query], breakdown: Sequence[str] = ()) -> dict[str, list[Query]]:
    """``"" -> all``, ``single/``, ``multi/`` and one ``<tag>=<value>/`` subset per value of each
    breakdown tag (queries without the tag are left out of that breakdown)."""
    out = {"": list(queries), "single/": [q for q in queries if len(q.gt) == 1],
           "multi/": [q for q in queries if len(q.gt) >= 2]}
    for tag in breakdown:
        for value in sorted({q.tags[tag] for q in queries if tag in q.tags}):
            out[f"{tag}={value}/"] = [q for q in queries if q.tags.get(tag) == value]
    return out


def aggregate_rows(rows: Mapping[str, Mapping[str, float]], queries: list[Query],
                   metrics: Sequence[Metric] | None = None,
                   breakdown: Sequence[str] = ()) -> tuple[dict[str, float | None], dict[str, int]]:
    """Mean metrics overall and per subset, plus the query count of each subset.

    Returns ``(metrics, counts)``: ``metrics`` has ``name``, ``single/name``, ``multi/name`` and
    ``<tag>=<value>/name`` keys; ``counts`` has ``all``, ``single``, ``multi``, ``graded`` (queries
    scored with graded gains) and ``<tag>=<value>``.
    """
    metrics = metrics or parse_metrics(DEFAULT_METRICS)
    out: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for prefix, subset in subsets(queries, breakdown).items():
        subset_rows = [rows[q.id] for q in subset]
        counts[prefix.rstrip("/") or "all"] = len(subset)
        for m in metrics:
            if prefix == "single/" and m.multi_only():
                continue  # undefined for single-GT queries
            out[prefix + m.name] = _mean(subset_rows, m.name)
    counts["graded"] = sum(1 for q in queries if q.grades)
    return out, counts


def aggregate(rankings: Mapping[str, Sequence[str]], queries: Iterable[Query], metrics: Sequence[Metric] | None = None,
              breakdown: Sequence[str] = ()) -> tuple[dict[str, float | None], dict[str, int]]:
    """:func:`aggregate_rows` over rankings (computes the per-query rows first)."""
    queries = list(queries)
    return aggregate_rows(per_query_rows(rankings, queries, metrics), queries, metrics, breakdown)


def recall_curve(rankings: Mapping[str, Sequence[str]], queries: Iterable[Query], max_k: int = 50) -> list[float]:
    """Mean R@K for K = 1..max_k (the SkillRouter recall figure)."""
    queries = list(queries)
    sums = [0.0] * max_k
    for q in queries:
        ranked, gt = _dedupe(rankings.get(q.id, ())), set(q.gt)
        for k in range(1, max_k + 1):
            sums[k - 1] += recall_at(ranked, gt, k)
    return [s / len(queries) for s in sums] if queries else []

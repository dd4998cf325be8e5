"""Derived query strata: ``eval.breakdown`` tags computed from the benchmark instead of read from the queries.

* ``gt_desc_words_quartile`` — SkillRouter's stratification of the nd→all gap by description length: a
  query's value is the mean description word count (whitespace tokens) of its GT skills in the pool; the
  edges are the 25th/50th/75th percentiles of those values over the benchmark's queries (numpy's linear
  interpolation), and a query falls in ``Q1`` (value <= first edge) ... ``Q4`` (above the third). Queries are
  the unit (four strata of about equal size); the edges are reported with the metrics, so Easy and Hard (the
  same queries) share them. A query with no GT skill in the pool gets no tag.
* ``gt_count`` — how many GT skills a query has: ``1``, ``2``, ``3``, ``4+``.
* ``query_chars_quartile`` — the query's own length in characters (the benchmark's text, before any condensation),
  in quartiles as above: where condensing a long instruction should matter most.

Any other breakdown tag is a stored one (``domain``, ``task_type``, a release's ``major``/``sub``...).
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Callable, Sequence

import numpy as np

from ..data.types import Query, Skill

QUARTILE, COUNT, CHARS = "gt_desc_words_quartile", "gt_count", "query_chars_quartile"


def desc_words(skill: Skill) -> int:
    return len(skill.description.split())


def quartile_edges(values: Sequence[float]) -> list[float]:
    return [float(e) for e in np.quantile(np.asarray(values, dtype=float), [0.25, 0.5, 0.75])] if len(values) else []


def quartile_of(value: float, edges: Sequence[float]) -> str:
    return f"Q{int(np.searchsorted(edges, value, side='left')) + 1}"


def gt_count_label(n: int) -> str:
    return str(n) if n < 4 else "4+"


def _desc_quartiles(queries: Sequence[Query], skills: Sequence[Skill]) -> tuple[dict[str, str], dict[str, Any]]:
    words = {s.id: desc_words(s) for s in skills}
    values = {q.id: float(np.mean([words[g] for g in q.gt if g in words])) for q in queries if any(g in words for g in q.gt)}
    edges = quartile_edges(list(values.values()))
    return {qid: quartile_of(v, edges) for qid, v in values.items()}, {"edges": edges, "unit": "description words"}


def _chars_quartiles(queries: Sequence[Query], skills: Sequence[Skill]) -> tuple[dict[str, str], dict[str, Any]]:
    values = {q.id: float(len(q.text)) for q in queries}
    edges = quartile_edges(list(values.values()))
    return {qid: quartile_of(v, edges) for qid, v in values.items()}, {"edges": edges, "unit": "query characters"}


def _gt_counts(queries: Sequence[Query], skills: Sequence[Skill]) -> tuple[dict[str, str], dict[str, Any]]:
    return {q.id: gt_count_label(len(q.gt)) for q in queries}, {}


DERIVED: dict[str, Callable[[Sequence[Query], Sequence[Skill]], tuple[dict[str, str], dict[str, Any]]]] = {
    QUARTILE: _desc_quartiles, COUNT: _gt_counts, CHARS: _chars_quartiles}


def derive(queries: Sequence[Query], skills: Sequence[Skill], breakdown: Sequence[str]) -> tuple[list[Query], dict[str, Any]]:
    """The queries with every derived tag ``breakdown`` asks for, and per derived tag what defines it
    (edges) and how many queries each stratum holds."""
    asked = [t for t in breakdown if t in DERIVED]
    if not asked:
        return list(queries), {}
    tags: dict[str, dict[str, str]] = {q.id: {} for q in queries}
    report: dict[str, Any] = {}
    for tag in asked:
        labels, info = DERIVED[tag](queries, skills)
        for qid, label in labels.items():
            tags[qid][tag] = label
        report[tag] = {**info, "counts": dict(sorted(Counter(labels.values()).items()))}
    return [dataclasses.replace(q, tags={**q.tags, **tags[q.id]}) if tags[q.id] else q for q in queries], report

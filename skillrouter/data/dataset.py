"""Assemble a :class:`Dataset` from a pool, a benchmark and an optional Hard-tier distractor file."""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from .loaders import ErrorPolicy, load_pool, load_queries
from .types import DataError, Dataset, LoadReport, Query, Skill

log = logging.getLogger(__name__)


def check_ground_truth(queries: list[Query], pool_ids: set[str], policy: ErrorPolicy, source: str) -> list[Query]:
    """Every scored GT id must exist in the pool; otherwise a query could never be a hit and its
    score would be a silent zero. Under ``skip`` the missing ids are dropped (counted) and queries left
    without GT are skipped. Missing *non-core* ids never affect metrics and are only counted."""
    kept: list[Query] = []
    for q in queries:
        missing = [g for g in q.gt if g not in pool_ids]
        extra_missing = [g for g in q.all_gt if g not in pool_ids and g not in q.gt]
        if extra_missing:
            policy.report.count("gt: non-core id missing from pool (not scored)", f"{source} query {q.id}: {extra_missing}")
        if missing:
            err = DataError(source, f"query {q.id}", "gt", f"ground-truth ids missing from the pool: {missing}")
            policy.bad(err)
            if len(missing) == len(q.gt):
                continue
            q = dataclasses.replace(q, gt=tuple(g for g in q.gt if g in pool_ids))
        kept.append(q)
    return kept


def load_dataset(
    pool: str | Path,
    queries: str | Path,
    *,
    distractors: str | Path | None = None,
    pool_format: str = "auto",
    queries_format: str = "auto",
    on_error: str = "raise",
    max_field_chars: int = 200_000,
) -> Dataset:
    """Load pool (+ distractors for the Hard tier) and queries, then validate ids across them."""
    report = LoadReport()
    policy = ErrorPolicy(on_error, report)
    skills: list[Skill] = load_pool(pool, pool_format, policy, max_field_chars)
    qs, shipped = load_queries(queries, queries_format, policy, max_field_chars)
    ids = {s.id for s in skills}
    skills += [s for s in shipped if s.id not in ids]
    added: set[str] = set()
    if distractors:
        extra = load_pool(distractors, "auto", policy, max_field_chars)
        ids = {s.id for s in skills}
        for s in extra:
            if s.id in ids:
                policy.bad(DataError(str(distractors), f"skill {s.id}", "id", "distractor id already in the pool"))
                continue
            skills.append(s)
            added.add(s.id)
    qs = check_ground_truth(qs, {s.id for s in skills}, policy, str(queries))
    if not qs:
        raise DataError(str(queries), None, None, "no query left to evaluate after validation")
    if report.skipped:
        log.warning("data: %s", ", ".join(f"{n} x {r}" for r, n in sorted(report.skipped.items())))
    log.info("data: %d skills, %d queries", len(skills), len(qs))
    return Dataset(skills=skills, queries=qs, report=report, distractor_ids=frozenset(added))

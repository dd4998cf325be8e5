"""Assemble a :class:`Dataset`: from a pool, a benchmark and an optional Hard-tier distractor file, or
from a released benchmark, as a ``data`` config slice names it."""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Mapping

from .loaders import ErrorPolicy, check_ground_truth, is_number, load_pool, load_queries
from .releases import POOL_READERS, load_release, reader
from .types import DataError, Dataset, LoadReport, Query, Skill

log = logging.getLogger(__name__)


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
    """Load pool (+ distractors for the Hard tier) and queries, then validate ids across them.

    A distractor that is a degraded variant of a GT skill (``"variant_of": id, "grade": g``, as
    ``gen_distractors`` writes them) becomes a graded gain of every query with that GT, as the
    SkillRouter release grades its ``degraded/`` ids; such a query's GT gains are put on the release's
    scale (3) when it had none.
    """
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
        qs = grade_variants(qs, [s for s in extra if s.id in added], policy, str(distractors))
    qs = check_ground_truth(qs, {s.id for s in skills}, policy, str(queries))
    if not qs:
        raise DataError(str(queries), None, None, "no query left to evaluate after validation")
    if report.skipped:
        log.warning("data: %s", ", ".join(f"{n} x {r}" for r, n in sorted(report.skipped.items())))
    log.info("data: %d skills, %d queries", len(skills), len(qs))
    return Dataset(skills=skills, queries=qs, report=report, distractor_ids=frozenset(added))


def grade_variants(queries: list[Query], distractors: list[Skill], policy: ErrorPolicy, source: str) -> list[Query]:
    variants: dict[str, dict[str, float]] = {}
    for d in distractors:
        if "variant_of" not in d.extra:
            continue
        grade = d.extra.get("grade", 1)
        if not is_number(grade) or not isinstance(d.extra["variant_of"], str):
            policy.bad(DataError(source, f"skill {d.id}", "grade", "a variant needs a string variant_of and a numeric grade"))
            continue
        variants.setdefault(d.extra["variant_of"], {})[d.id] = float(grade)
    out = []
    for q in queries:
        extra = {v: g for gt in q.gt for v, g in variants.get(gt, {}).items()}
        if extra:
            q = dataclasses.replace(q, grades={**(q.grades or {g: 3.0 for g in q.gt}), **extra})
        out.append(q)
    return out


def load_source(data: Mapping[str, Any], tier: str, with_distractors: bool, role: str = "eval") -> Dataset:
    """The dataset a ``data`` config slice names, for one tier.

    ``source: files`` reads ``pool`` + ``queries`` (+ ``distractors`` on the Hard tier); a release source
    (:data:`skillrouter.data.releases.READERS`) reads the release under ``root`` (already downloaded).
    ``role="train"`` with a ``train_pool``: that pool, with the benchmark's queries (what the training stages
    keep out of their positives), instead of the benchmark's pool.
    """
    source = data.get("source", "files")
    policy = ErrorPolicy(data.get("on_error", "raise"), LoadReport())
    max_chars = data.get("max_field_chars", 200_000)
    if source == "files":
        if not data.get("pool") or not data.get("queries"):
            raise DataError("config", None, "data.pool/data.queries",
                            "both paths are required (data=jsonl data.pool=PATH data.queries=PATH)")
        if with_distractors and not data.get("distractors"):
            raise DataError("config", None, "data.distractors", "tier=hard needs a distractor JSONL")
        dataset = load_dataset(data["pool"], data["queries"], distractors=data["distractors"] if with_distractors else None,
                               pool_format=data.get("pool_format", "auto"), queries_format=data.get("queries_format", "auto"),
                               on_error=policy.on_error, max_field_chars=max_chars)
    elif not data.get("root"):
        raise DataError("config", None, "data.root", f"data={source} needs the release folder")
    else:
        dataset = load_release(source, data, tier, policy, max_chars)
    if role == "train" and data.get("train_pool"):
        return training_dataset(data, dataset, ErrorPolicy(policy.on_error, dataset.report), max_chars)
    return dataset


def training_dataset(data: Mapping[str, Any], benchmark: Dataset, policy: ErrorPolicy, max_chars: int) -> Dataset:
    """The training pool ``data.train_pool`` (``train_pool_format``: auto | jsonl | tree | r3 | skillret) with
    the benchmark's queries; a training pool that shares an id with the benchmark's ground truth is refused
    (its negatives or candidates could be evaluated skills)."""
    fmt, path = data.get("train_pool_format") or "auto", data["train_pool"]
    pool = POOL_READERS[fmt](path, policy, max_chars) if fmt in POOL_READERS else load_pool(path, fmt, policy, max_chars)
    labelled = {g for q in benchmark.queries for g in q.all_gt}
    overlap = sorted(labelled.intersection(s.id for s in pool))
    if overlap:
        raise DataError(str(path), None, "id", f"{len(overlap)} training-pool skills are benchmark ground truth "
                        f"(first: {overlap[:3]}): a training pool must be disjoint from what is evaluated")
    log.info("data: training pool %s: %d skills", path, len(pool))
    return Dataset(skills=pool, queries=benchmark.queries, report=benchmark.report)


def source_files(data: Mapping[str, Any], tier: str, with_distractors: bool, role: str = "eval") -> list[Path]:
    """Every file :func:`load_source` reads for this slice (a folder stands for all files under it):
    what a cached, parsed copy of the dataset is keyed on."""
    source = data.get("source", "files")
    if source == "files":
        named = [data.get("pool"), data.get("queries")] + ([data.get("distractors")] if with_distractors else [])
    else:
        named = reader(source).files(Path(data["root"]), tier, data)
    if role == "train" and data.get("train_pool"):
        named.append(data["train_pool"])
    files: list[Path] = []
    for p in (Path(p) for p in named if p):
        files += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    return files

"""Training pairs: ``{"query", "skill_id"}`` or multi-positive ``{"query", "skill_ids"}``, optional
``"skip": [...]`` (skills an LLM judged not to belong together under this query)."""
from __future__ import annotations

from dataclasses import dataclass

from .jsonl import read_jsonl
from .loaders import ErrorPolicy, id_list, str_field
from .types import DataError


@dataclass(frozen=True)
class TrainExample:
    query: str
    positives: tuple[str, ...]
    skip: tuple[str, ...] = ()


def load_pairs(path: str, pool_ids: set[str], benchmark_ids: set[str], policy: ErrorPolicy) -> list[TrainExample]:
    """Load pairs; benchmark-labelled skills are removed from the positives (as in the paper, so no
    evaluated skill is ever a training target) and counted; examples left empty are dropped."""
    out: list[TrainExample] = []
    for lineno, rec in read_jsonl(path):
        try:
            text = str_field(rec, "query", path, lineno, required=True)
            positives = (id_list(rec, "skill_ids", path, lineno, required=True) if "skill_ids" in rec
                         else (str_field(rec, "skill_id", path, lineno, required=True),))
            missing = [p for p in positives if p not in pool_ids]
            if missing:
                raise DataError(path, lineno, "skill_id", f"training positives missing from the pool: {missing}")
            skip = tuple(s for s in id_list(rec, "skip", path, lineno, required=False) if s in pool_ids)
        except DataError as err:
            policy.bad(err)
            continue
        kept = tuple(p for p in positives if p not in benchmark_ids)
        if len(kept) < len(positives):
            policy.report.count("train: benchmark-labelled positive excluded", f"{path}:{lineno}")
        if kept:
            out.append(TrainExample(text, kept, skip))
    if not out:
        raise DataError(path, None, None, "no training pair left after validation")
    return out

"""R3-Skill as released in the R3 repository (``Tencent/R3-Skill``)."""
from __future__ import annotations

from pathlib import Path

from ..loaders import ErrorPolicy, check_ground_truth, load_pool_r3, load_r3_queries
from ..types import DataError, Dataset


def load_r3_skill(root: str | Path, policy: ErrorPolicy, max_field_chars: int) -> Dataset:
    """R3-Skill as released in the R3 repository: ``data/skills_test.jsonl``
    ``{"id", "text": "name | description | body"}`` and ``data/test.jsonl``
    ``{"query", "skill_ids": [...], ...}`` (see :func:`load_r3_queries`). Every GT id must be in the
    pool (R3 scores all of them)."""
    root = Path(root)
    skills = load_pool_r3(root / "data" / "skills_test.jsonl", policy, max_field_chars)
    queries_path = root / "data" / "test.jsonl"
    queries = check_ground_truth(load_r3_queries(queries_path, policy), {s.id for s in skills}, policy, str(queries_path))
    if not queries:
        raise DataError(str(queries_path), None, None, "no query left to evaluate after validation")
    return Dataset(skills=skills, queries=queries, report=policy.report)



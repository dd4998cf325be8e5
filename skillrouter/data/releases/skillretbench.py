"""SkillRetBench (Hugging Face ``thaki-AI/SkillRetBench``), its two files as published:

* ``skill_corpus.json`` ``{meta, statistics, skills: [{skill_id, skill_name, description, trigger_phrases,
  anti_triggers, korean_triggers, composable_skills, category, full_text}]}`` — ``full_text`` is the body;
* ``skillretbench_queries.json`` ``{meta, queries: [{query_id, query, setting, gold_skills, distractor_skills,
  outdated_skill_id}]}`` — ``gold_skills`` is the ground truth, ``setting`` a tag; ``distractor_skills`` are
  kept as a tag; an ``outdated_skill_id`` that is not in the corpus is counted and reported, not an error.

The two files are read from the release folder or its ``data/`` folder (where the Hugging Face repository keeps
its files, beside ``baseline_results.json``). The release ships no evaluator code, so there is no release text:
the ``release`` style renders these skills as ``name | description | body``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..loaders import ErrorPolicy, check_ground_truth, collect_unique, id_list, make_query, make_skill, str_field
from ..types import DataError, Dataset, LoadReport, Query, Skill

CORPUS = "skill_corpus.json"
QUERIES = "skillretbench_queries.json"


def release_file(root: Path, name: str) -> Path:
    """``root/name``, else ``root/data/name`` (the hub repository's layout); the first when neither exists."""
    return next((p for p in (root / name, root / "data" / name) if p.exists()), root / name)


def _read_list(path: Path, key: str) -> list[Any]:
    """``path``'s top-level object's ``key`` list."""
    if not path.exists():
        raise DataError(str(path), None, None, "missing: a SkillRetBench release has skill_corpus.json and "
                        "skillretbench_queries.json")
    try:
        top = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(str(path), None, None, f"not valid JSON ({exc})") from None
    if not isinstance(top, dict) or not isinstance(top.get(key), list):
        raise DataError(str(path), None, key, "expected a top-level object with a list here")
    return top[key]


def _skill(rec: Any, path: str, where: str, max_field_chars: int, report: LoadReport) -> Skill:
    if not isinstance(rec, dict):
        raise DataError(path, where, None, "expected an object")
    for key in ("skill_id", "skill_name", "description", "full_text"):
        if key not in rec:
            raise DataError(path, where, key, "missing")
    fields = {k: v for k, v in rec.items() if k not in ("skill_id", "skill_name", "full_text", "category")}
    fields.update(id=str_field(rec, "skill_id", path, where, required=True), name=rec["skill_name"], body=rec["full_text"],
                  category=rec.get("category") if isinstance(rec.get("category"), str) else None)
    return make_skill(fields, path, where, max_field_chars, report)


def _query(rec: Any, path: str, where: str, pool: set[str], report: LoadReport) -> Query:
    if not isinstance(rec, dict):
        raise DataError(path, where, None, "expected an object")
    qid = str_field(rec, "query_id", path, where, required=True)
    where = f"{where} ({qid})"
    gt = id_list(rec, "gold_skills", path, where, required=True)
    tags = {"setting": str_field(rec, "setting", path, where, required=False)}
    distractors = id_list(rec, "distractor_skills", path, where, required=False)
    if distractors:
        tags["distractor_skills"] = json.dumps(list(distractors))
    outdated = rec.get("outdated_skill_id")
    if outdated is not None:
        if not isinstance(outdated, str):
            raise DataError(path, where, "outdated_skill_id", "expected a skill-id string or null")
        tags["outdated_skill_id"] = outdated
        if outdated not in pool:
            report.count("queries: outdated_skill_id not in the corpus (reported, not an error)", f"{path} {where}: {outdated}")
    return make_query(path, where, qid, str_field(rec, "query", path, where, required=True), gt, None,
                      tags={k: v for k, v in tags.items() if v}, gt_field="gold_skills")


def load_skillretbench(root: str | Path, policy: ErrorPolicy, max_field_chars: int) -> Dataset:
    root = Path(root)
    corpus_path, queries_path = release_file(root, CORPUS), release_file(root, QUERIES)
    skills = collect_unique(((str(corpus_path), f"skills[{i}]",
                              lambda r=r, i=i: _skill(r, str(corpus_path), f"skills[{i}]", max_field_chars, policy.report))
                             for i, r in enumerate(_read_list(corpus_path, "skills"))), policy)
    pool = {s.id for s in skills}
    queries = collect_unique(((str(queries_path), f"queries[{i}]",
                               lambda r=r, i=i: _query(r, str(queries_path), f"queries[{i}]", pool, policy.report))
                              for i, r in enumerate(_read_list(queries_path, "queries"))), policy, "query")
    queries = check_ground_truth(queries, pool, policy, str(queries_path))
    if not skills or not queries:
        raise DataError(str(queries_path if skills else corpus_path), None, None, "nothing left to evaluate after validation")
    return Dataset(skills=skills, queries=queries, report=policy.report)

"""SkillRet (Hugging Face ``ThakiCloud/SKILLRET``) as its evaluator reads it (``skillret/eval.py`` of GitHub
``skillretbenchmark/SKILLRET``): the subsets ``skills``, ``queries`` and ``qrels``, each with a ``train`` and a
``test`` split, as ``data/<subset>/<split>.jsonl``.

* skills ``{id, name, namespace, description, author, stars, installs, license, repo, source_url, raw_url, major,
  sub, primary_action, primary_object, domain, body, skill_md}``; the text every model reads is
  ``f"{name} | {description} | {skill_md}"``, each part stripped, nothing cut, ``skill_md`` falling back to
  ``description`` when it is empty (``load_corpus`` + ``build_skill_text``);
* queries ``{id, original_id, query, skill_ids, skill_names, k, generator_model}``; the ground truth is a
  ``labels`` list ``[{id, relevance}]`` where a record has one, else ``skill_ids`` at relevance 1
  (``_normalize_query_labels``);
* qrels ``{query_id, skill_id, relevance}``: the evaluator never reads them; we check them against the queries'
  ground truth and count every query on which they disagree.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ..jsonl import read_jsonl
from ..loaders import (ErrorPolicy, check_ground_truth, check_id, collect_unique, id_list, is_number, make_query,
                       make_skill, str_field)
from ..types import DataError, Dataset, LoadReport, Query, Skill

log = logging.getLogger(__name__)

SPLITS = ("train", "test")
REQUIRED_SKILL_FIELDS = ("id", "name", "description", "body", "skill_md")
SKILL_TAGS = ("major", "sub", "domain")  # a query's tags from its ground-truth skills, for eval.breakdown
QUERY_TAGS = ("original_id", "k", "generator_model")


def release_text(rec: dict[str, Any]) -> str:
    """``build_skill_text`` after ``load_corpus``'s fallback: ``name | description | skill_md``, stripped."""
    name, desc = (rec.get("name") or "").strip(), (rec.get("description") or "").strip()
    body = (rec.get("skill_md") or "").strip() or desc
    return f"{name} | {desc} | {body}"


def _skill(rec: dict, path: str, lineno: int, max_field_chars: int, report: LoadReport) -> Skill:
    for key in REQUIRED_SKILL_FIELDS:
        if key not in rec:
            raise DataError(path, lineno, key, "missing (a SkillRet skills record has it, even when empty)")
    fields = {**rec, "text": release_text(rec)}
    for ours, theirs in (("category", "major"), ("source", "namespace")):
        fields[ours] = rec[theirs] if isinstance(rec.get(theirs), str) else None
    return make_skill(fields, path, lineno, max_field_chars, report)


def read_skills(path: str | Path, policy: ErrorPolicy, max_field_chars: int) -> list[Skill]:
    """One split's ``skills`` file."""
    path = str(path)
    if not Path(path).exists():
        raise DataError(path, None, None, "missing: a SkillRet release has data/skills/{train,test}.jsonl")

    def records():
        for lineno, rec in read_jsonl(path):
            yield path, lineno, lambda rec=rec, lineno=lineno: _skill(rec, path, lineno, max_field_chars, policy.report)

    skills = collect_unique(records(), policy)
    if not skills:
        raise DataError(path, None, None, "the pool holds no valid skill")
    return skills


def _labels(rec: dict, path: str, lineno: int) -> dict[str, float]:
    """``labels`` (a list, or a JSON string of one) wins over ``skill_ids``; relevance 0 is not ground truth."""
    if "labels" not in rec:
        return dict.fromkeys(id_list(rec, "skill_ids", path, lineno, required=True), 1.0)
    labels = json.loads(rec["labels"]) if isinstance(rec["labels"], str) else rec["labels"]
    if not isinstance(labels, list) or not all(isinstance(x, dict) and isinstance(x.get("id"), str)
                                               and is_number(x.get("relevance")) for x in labels):
        raise DataError(path, lineno, "labels", "expected a list of {\"id\": skill id, \"relevance\": number}")
    return {check_id(x["id"], path, lineno, "labels"): float(x["relevance"]) for x in labels}


def read_queries(path: str | Path, skills: dict[str, Skill], policy: ErrorPolicy) -> list[Query]:
    """One split's ``queries`` file; tags: ``k``, ``generator_model``, ``original_id`` and the GT skills'
    ``major`` / ``sub`` / ``domain`` (their distinct values joined by ``+`` when a query's skills differ)."""
    path = str(path)
    if not Path(path).exists():
        raise DataError(path, None, None, "missing: a SkillRet release has data/queries/{train,test}.jsonl")

    def records():
        for lineno, rec in read_jsonl(path):
            def build(rec=rec, lineno=lineno):
                qid = str_field(rec, "id", path, lineno, required=True)
                gains = _labels(rec, path, lineno)
                gt = tuple(g for g, rel in gains.items() if rel > 0)
                tags = {k: rec[k] if isinstance(rec[k], str) else json.dumps(rec[k]) for k in QUERY_TAGS if k in rec}
                for key in SKILL_TAGS:
                    values = sorted({str(skills[g].extra.get(key) or "") for g in gt if g in skills} - {""})
                    if values:
                        tags[key] = "+".join(values)
                graded = {g: r for g, r in gains.items() if r > 0} if any(r != 1 for r in gains.values()) else None
                return make_query(path, lineno, qid, str_field(rec, "query", path, lineno, required=True), gt, None,
                                  grades=graded, tags=tags, gt_field="labels" if "labels" in rec else "skill_ids")
            yield path, lineno, build

    return collect_unique(records(), policy, "query")


def check_qrels(path: Path, queries: list[Query], report: LoadReport) -> list[str]:
    """The ids of the queries whose qrels (relevance > 0) are not their ground truth, each counted."""
    if not path.exists():
        return []
    qrels: dict[str, set[str]] = {}
    for lineno, rec in read_jsonl(path):
        for key in ("query_id", "skill_id"):
            str_field(rec, key, str(path), lineno, required=True)
        if not is_number(rec.get("relevance")):
            raise DataError(str(path), lineno, "relevance", "expected a number")
        if rec["relevance"] > 0:
            qrels.setdefault(rec["query_id"], set()).add(rec["skill_id"])
    disagree = [q.id for q in queries if qrels.get(q.id, set()) != set(q.gt)]
    for qid in disagree:
        report.count("qrels: disagree with the query's ground truth (the query's is scored)", f"{path} query {qid}")
    if disagree:
        log.warning("%s: %d queries whose qrels disagree with their skill_ids/labels: %s", path, len(disagree),
                    ", ".join(disagree[:20]) + (" ..." if len(disagree) > 20 else ""))
    return disagree


def split_files(root: str | Path, split: str) -> dict[str, Path]:
    data = Path(root) / "data"
    return {subset: data / subset / f"{split}.jsonl" for subset in ("skills", "queries", "qrels")}


def load_skillret(root: str | Path, policy: ErrorPolicy, max_field_chars: int, split: str = "test") -> Dataset:
    """One split of the release: its pool and its queries, every ground-truth id checked against the pool."""
    if split not in SPLITS:
        raise DataError("config", None, "data.split", f"SkillRet has splits {SPLITS}, not {split!r}")
    files = split_files(root, split)
    skills = read_skills(files["skills"], policy, max_field_chars)
    by_id = {s.id: s for s in skills}
    queries = check_ground_truth(read_queries(files["queries"], by_id, policy), set(by_id), policy, str(files["queries"]))
    if not queries:
        raise DataError(str(files["queries"]), None, None, "no query left to evaluate after validation")
    check_qrels(files["qrels"], queries, policy.report)
    return Dataset(skills=skills, queries=queries, report=policy.report)

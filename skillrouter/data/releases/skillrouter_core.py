"""SkillRouter's eval-core release (``pipizhao/SkillRouter-Eval-Core``), read as its evaluator reads it:
the scored ground truth is the labelled set *restricted to the pool* of the tier being evaluated."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..jsonl import read_json, read_jsonl
from ..loaders import ErrorPolicy, check_id, collect_unique, grades_field, id_list, make_skill, str_field
from ..types import DataError, Dataset, LoadReport, Query, Skill

SKILLROUTER_TIERS = ("easy", "hard")
TASK_TYPES = ("clean", "mixed", "generic_only")


def _shard_skill(rec: dict, path: str, lineno: int, max_field_chars: int, report: LoadReport) -> Skill:
    """``{"skill_id", "name", "description" (or "desc"), "body", ...}``: unknown fields stay as extras."""
    fields = {k: v for k, v in rec.items() if k not in ("skill_id", "id")}
    fields["id"] = str_field(rec, "skill_id", path, lineno, required=True)
    if "description" not in fields and "desc" in fields:
        fields["description"] = fields.pop("desc")
    skill = make_skill(fields, path, lineno, max_field_chars, report)
    return skill if "id" not in rec else dataclasses.replace(skill, extra={**skill.extra, "id": rec["id"]})


def read_skillrouter_pool(root: str | Path, tier: str, policy: ErrorPolicy, max_field_chars: int) -> list[Skill]:
    """One tier's pool: the gzip shards ``manifest.json`` lists under ``<tier>`` (``parts``:
    ``[{"path", "records"}]``). A listed part that is missing, holds a different number of records
    than listed, or a shard in the folder that the manifest does not list is an error naming it."""
    root = Path(root)
    if tier not in SKILLROUTER_TIERS:
        raise DataError("config", None, "tier", f"SkillRouter eval-core has tiers {SKILLROUTER_TIERS}, not {tier!r}")
    manifest_path = root / "manifest.json"
    manifest = read_json(manifest_path)
    entry = manifest.get(tier) if isinstance(manifest, dict) else None
    parts = entry.get("parts") if isinstance(entry, dict) else None
    if not isinstance(parts, list) or not all(isinstance(p, dict) and isinstance(p.get("path"), str)
                                              and isinstance(p.get("records"), int) for p in parts):
        raise DataError(str(manifest_path), tier, "parts", "expected a list of {\"path\", \"records\"}")
    listed = {(root / p["path"]).resolve() for p in parts}
    for shard in sorted((root / tier).glob("*.jsonl*")):
        if shard.resolve() not in listed:
            raise DataError(str(shard), None, None, f"shard not listed in {manifest_path} under '{tier}'")

    def records():
        for part in parts:
            path = root / part["path"]
            if not path.exists():
                raise DataError(str(path), None, None, f"missing: {manifest_path} lists it with {part['records']} records")
            n = 0
            for lineno, rec in read_jsonl(path):
                n += 1
                yield str(path), lineno, lambda rec=rec, p=str(path), ln=lineno: _shard_skill(rec, p, ln, max_field_chars,
                                                                                           policy.report)
            if n != part["records"]:
                raise DataError(str(path), None, None,
                                f"holds {n} records but {manifest_path} lists {part['records']} (short or corrupt part)")

    return collect_unique(records(), policy)


def _core_gt(rel: dict, path: str, task_id: str) -> tuple[str, ...]:
    """``core_gt_ids`` when the entry has the key (even empty), else ``gt_skill_ids``: the release
    evaluator's ``rel.get("core_gt_ids", rel.get("gt_skill_ids", []))``."""
    key = "core_gt_ids" if "core_gt_ids" in rel else "gt_skill_ids"
    return id_list(rel, key, path, task_id, required=False) if key in rel else ()


def read_skillrouter_relevance(root: str | Path) -> dict[str, Any]:
    """``relevance.json``: an object keyed by task id."""
    rel_path = Path(root) / "relevance.json"
    relevance = read_json(rel_path)
    if not isinstance(relevance, dict):
        raise DataError(str(rel_path), None, None, "expected an object keyed by task id")
    return relevance


def read_skillrouter_tasks(root: str | Path, relevance: dict[str, Any], pool_ids: set[str],
                           policy: ErrorPolicy) -> list[Query]:
    """``tasks.jsonl`` ``{"task_id", "domain", "instruction_text"}`` and ``relevance.json``
    ``{task_id: {"gt_skill_ids", "core_gt_ids", "auxiliary_gt_ids", "relevance": {id: grade},
    "task_type": "clean"|"mixed"|"generic_only"}}``, under the release evaluator's protocol:

    * ``generic_only`` tasks are dropped (counted);
    * scored GT = ``core_gt_ids`` (falling back to ``gt_skill_ids``) ∩ pool ids; a task left with
      none is skipped (counted);
    * graded gains = ``relevance`` restricted to pool ids (GT 3, Hard-tier ``degraded/`` variants 1);
    * single / multi by the size of the scored GT set.
    """
    root = Path(root)
    rel_path = root / "relevance.json"
    tasks_path = str(root / "tasks.jsonl")

    def records():
        for lineno, rec in read_jsonl(tasks_path):
            def build(rec=rec, lineno=lineno):
                qid = check_id(str_field(rec, "task_id", tasks_path, lineno, required=True), tasks_path, lineno, "task_id")
                text = str_field(rec, "instruction_text", tasks_path, lineno, required=True)
                rel = relevance.get(qid)
                if not isinstance(rel, dict):
                    raise DataError(str(rel_path), qid, None, "no relevance entry for this task")
                task_type = rel.get("task_type")
                if task_type not in TASK_TYPES:
                    raise DataError(str(rel_path), qid, "task_type", f"expected one of {TASK_TYPES}, got {task_type!r}")
                grades = grades_field(rel, str(rel_path), qid, "relevance")
                core = _core_gt(rel, str(rel_path), qid)
                all_gt = id_list(rel, "gt_skill_ids", str(rel_path), qid, required=False) or core
                tags = {"task_type": task_type, **({"domain": rec["domain"]} if isinstance(rec.get("domain"), str) else {})}
                return Query(id=qid, text=text, gt=tuple(g for g in core if g in pool_ids), all_gt=all_gt,
                             grades={k: v for k, v in grades.items() if k in pool_ids}, tags=tags)
            yield tasks_path, lineno, build

    out = []
    for q in collect_unique(records(), policy, "query"):
        if q.tags["task_type"] == "generic_only":
            policy.report.count("protocol: generic_only task excluded", f"{tasks_path} ({q.id})")
        elif not q.gt:
            policy.report.count("protocol: no scored ground truth in this tier's pool", f"{tasks_path} ({q.id})")
        else:
            out.append(q)
    return out


def load_skillrouter_core(root: str | Path, tier: str, policy: ErrorPolicy, max_field_chars: int) -> Dataset:
    """The SkillRouter eval-core release (``pipizhao/SkillRouter-Eval-Core``) for one tier. The Hard
    pool is a whole pool; its skills that are labelled only as non-GT variants (the ``degraded/``
    rewrites) are its distractors, which training never mines from."""
    skills = read_skillrouter_pool(root, tier, policy, max_field_chars)
    pool_ids = {s.id for s in skills}
    relevance = read_skillrouter_relevance(root)
    queries = read_skillrouter_tasks(root, relevance, pool_ids, policy)
    if not queries:
        raise DataError(str(Path(root) / "tasks.jsonl"), None, None, f"no task left to score on the {tier} tier")
    gt_anywhere = {g for rel in relevance.values() if isinstance(rel, dict) for g in rel.get("gt_skill_ids", []) or []}
    variants = {g for rel in relevance.values() if isinstance(rel, dict) for g in (rel.get("relevance") or {})} - gt_anywhere
    return Dataset(skills=skills, queries=queries, report=policy.report, distractor_ids=frozenset(variants & pool_ids))

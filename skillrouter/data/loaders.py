"""Loaders for every pool and benchmark format the field uses, with one error policy.

Pools: JSONL (plain/.gz, one skill per line), a folder tree of ``SKILL.md`` files, R3-Skill's
``{id, text}`` JSONL. Benchmarks: our JSONL, SkillsBench task folders, SkillRouter's eval-core
(``tasks.jsonl`` + ``relevance.json``), R3-Skill's ``{query, skill_ids}`` JSONL.

Every defect becomes a :class:`DataError` naming file, line/record and field. Under
``on_error="skip"`` the record is dropped and counted in the :class:`LoadReport` instead; protocol
exclusions (SkillsBench ``generic_only`` tasks) are always counted skips.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from .jsonl import read_jsonl
from .types import DataError, LoadReport, Query, Skill

log = logging.getLogger(__name__)

GENERIC_FILE_SKILLS = frozenset({"pdf", "docx", "pptx", "xlsx"})
SKILL_FIELDS = ("id", "name", "description", "body", "category", "source")


class ErrorPolicy:
    """``raise``: stop at the first bad record. ``skip``: drop it, count it, log it once per reason."""

    def __init__(self, on_error: str, report: LoadReport):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"data.on_error must be 'raise' or 'skip', got {on_error!r}")
        self.on_error, self.report = on_error, report

    def bad(self, err: DataError) -> None:
        if self.on_error == "raise":
            raise err
        reason = f"{err.field or 'record'}: {err.reason}"
        if reason not in self.report.skipped:
            log.warning("skipping bad record (first of its kind): %s", err)
        self.report.count(reason, str(err))


def str_field(rec: dict, key: str, path: str, where: int | str, *, required: bool) -> str:
    value = rec.get(key)
    if value is None:
        if required:
            raise DataError(path, where, key, "missing")
        return ""
    if not isinstance(value, str):
        raise DataError(path, where, key, f"expected a string, got {type(value).__name__}")
    if required and not value.strip():
        raise DataError(path, where, key, "empty")
    return value


def id_list(rec: dict, key: str, path: str, where: int | str, *, required: bool) -> tuple[str, ...]:
    value = rec.get(key)
    if value is None:
        if required:
            raise DataError(path, where, key, "missing")
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise DataError(path, where, key, "expected a list of non-empty skill-id strings")
    return tuple(dict.fromkeys(value))


def make_skill(rec: dict, path: str, where: int | str, max_field_chars: int, report: LoadReport) -> Skill:
    """Validate one pool record. Overlong fields are truncated (and counted): no stage reads past
    a few thousand characters, and a 50 MB body must not exhaust memory downstream."""
    values = {k: str_field(rec, k, path, where, required=k in ("id", "name")) for k in SKILL_FIELDS}
    for key in ("description", "body"):
        if len(values[key]) > max_field_chars:
            report.count(f"{key}: truncated to {max_field_chars} chars", f"{path}:{where} ({values['id']})")
            values[key] = values[key][:max_field_chars]
    extra = {k: v for k, v in rec.items() if k not in SKILL_FIELDS}
    return Skill(
        id=values["id"], name=values["name"].strip(), description=values["description"].strip(),
        body=values["body"], category=values["category"] or None, source=values["source"] or None, extra=extra,
    )


def _collect_unique(records: Iterable[tuple[str, int | str, Callable[[], Skill]]], policy: ErrorPolicy) -> list[Skill]:
    """Build skills, rejecting duplicate ids with both locations named."""
    skills: list[Skill] = []
    seen: dict[str, str] = {}
    for path, where, build in records:
        try:
            skill = build()
            if skill.id in seen:
                raise DataError(path, where, "id", f"duplicate skill id {skill.id!r} (first seen at {seen[skill.id]})")
        except DataError as err:
            policy.bad(err)
            continue
        seen[skill.id] = f"{path}:{where}"
        skills.append(skill)
    return skills


def load_pool_jsonl(path: str | Path, policy: ErrorPolicy, max_field_chars: int) -> list[Skill]:
    path = str(path)

    def records():
        for lineno, rec in read_jsonl(path):
            yield path, lineno, lambda rec=rec, lineno=lineno: make_skill(rec, path, lineno, max_field_chars, policy.report)

    return _collect_unique(records(), policy)


def load_pool_r3(path: str | Path, policy: ErrorPolicy, max_field_chars: int) -> list[Skill]:
    """R3-Skill pool: ``{"id", "text"}`` per line. The id doubles as the name (R3 ships no separate
    name); the whole text is the body."""
    path = str(path)

    def records():
        for lineno, rec in read_jsonl(path):
            def build(rec=rec, lineno=lineno):
                sid = str_field(rec, "id", path, lineno, required=True)
                text = str_field(rec, "text", path, lineno, required=True)
                return make_skill({"id": sid, "name": rec.get("name") or sid, "body": text}, path, lineno, max_field_chars, policy.report)
            yield path, lineno, build

    return _collect_unique(records(), policy)


def parse_skill_md(path: Path, root: Path, max_field_chars: int, report: LoadReport) -> Skill:
    """Parse ``SKILL.md``: YAML front matter (``name``, ``description``), body after it; id = folder
    path relative to the pool root."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(str(path), line, None, "contains bytes that are not valid UTF-8") from None
    text = text.lstrip("\ufeff")
    if not text.startswith("---"):
        raise DataError(str(path), 1, "front matter", "missing: SKILL.md must start with a '---' YAML block")
    end = text.find("\n---", 3)
    if end < 0:
        raise DataError(str(path), 1, "front matter", "not closed: no second '---' line")
    try:
        meta = yaml.safe_load(text[3:end]) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 1
        raise DataError(str(path), line, "front matter", f"invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(meta, dict):
        raise DataError(str(path), 2, "front matter", "expected a mapping of keys")
    body = text[end + 4 :].split("\n", 1)[1] if "\n" in text[end + 4 :] else ""
    rel = path.parent.relative_to(root).as_posix()
    desc = meta.get("description")
    record = {
        "id": rel if rel != "." else path.parent.name,
        "name": meta.get("name") if isinstance(meta.get("name"), str) else None,
        "description": desc if isinstance(desc, str) else ("" if desc is None else str(desc)),
        "body": body,
        **{k: v for k, v in meta.items() if k not in ("name", "description")},
    }
    return make_skill(record, str(path), "front matter" if record["name"] is None else 1, max_field_chars, report)


def load_pool_tree(root: str | Path, policy: ErrorPolicy, max_field_chars: int) -> list[Skill]:
    root = Path(root)
    files = sorted(root.rglob("SKILL.md"))
    if not files:
        raise DataError(str(root), None, None, "no SKILL.md files found under this folder")
    return _collect_unique(
        ((str(p), 1, lambda p=p: parse_skill_md(p, root, max_field_chars, policy.report)) for p in files), policy
    )


def load_pool(path: str | Path, fmt: str, policy: ErrorPolicy, max_field_chars: int) -> list[Skill]:
    """Dispatch on ``fmt`` (``auto`` | ``jsonl`` | ``tree`` | ``r3``)."""
    path = Path(path)
    if fmt == "auto":
        fmt = "tree" if path.is_dir() else "jsonl"
        if fmt == "jsonl" and path.exists():
            first = next(read_jsonl(path), (0, {}))[1]
            if "text" in first and "name" not in first:
                fmt = "r3"
    loaders = {"jsonl": load_pool_jsonl, "tree": load_pool_tree, "r3": load_pool_r3}
    if fmt not in loaders:
        raise ValueError(f"unknown pool format {fmt!r}; choose one of auto, {', '.join(loaders)}")
    skills = loaders[fmt](path, policy, max_field_chars)
    if not skills:
        raise DataError(str(path), None, None, "the pool holds no valid skill")
    return skills


# ----------------------------------------------------------------------------- queries

def _grades(rec: dict, path: str, where: int | str) -> dict[str, float]:
    grades = rec.get("grades") or {}
    if not isinstance(grades, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in grades.values()):
        raise DataError(path, where, "grades", "expected an object {skill_id: number}")
    return {str(k): float(v) for k, v in grades.items()}


def make_query(
    path: str, where: int | str, qid: str, text: str, all_gt: tuple[str, ...], core_gt: tuple[str, ...] | None,
    *, grades: dict[str, float] | None = None, skip: tuple[str, ...] = (), tags: dict[str, str] | None = None,
    text_field: str = "query", gt_field: str = "gt",
) -> Query:
    if not text.strip():
        raise DataError(path, where, text_field, "empty query text")
    gt = core_gt if core_gt is not None else all_gt
    if not all_gt:
        raise DataError(path, where, gt_field, "no ground-truth skill ids")
    return Query(id=qid, text=text, gt=gt, all_gt=all_gt, grades=grades or {}, skip=skip, tags=tags or {})


def _protocol_excluded(query: Query, path: str, where: int | str, report: LoadReport) -> bool:
    """SkillRouter protocol: tasks needing only generic file-type skills are excluded (counted)."""
    if query.tags.get("task_type") == "generic_only" or not query.gt:
        report.count("protocol: generic_only task excluded", f"{path}:{where} ({query.id})")
        return True
    return False


def load_benchmark_jsonl(path: str | Path, policy: ErrorPolicy) -> list[Query]:
    """``{"id", "query", "gt", "core_gt"?, "grades"?, "skip"?, "task_type"?, ...}``; other string
    fields (``domain``, ``direction``...) become tags."""
    path = str(path)
    out: list[Query] = []
    for lineno, rec in read_jsonl(path):
        try:
            qid = str(rec.get("id", lineno))
            text = str_field(rec, "query", path, lineno, required=False)
            all_gt = id_list(rec, "gt", path, lineno, required=True)
            core = id_list(rec, "core_gt", path, lineno, required=False) if "core_gt" in rec else None
            tags = {k: v for k, v in rec.items() if isinstance(v, str) and k not in ("id", "query")}
            q = make_query(path, lineno, qid, text, all_gt, core, grades=_grades(rec, path, lineno),
                           skip=id_list(rec, "skip", path, lineno, required=False), tags=tags)
        except DataError as err:
            policy.bad(err)
            continue
        if not _protocol_excluded(q, path, lineno, policy.report):
            out.append(q)
    return out


def load_skillsbench_tasks(
    root: str | Path, policy: ErrorPolicy, max_field_chars: int, id_prefix: str = "skillsbench/"
) -> tuple[list[Query], list[Skill]]:
    """SkillsBench task folders: ``<task>/instruction.md`` plus ``.../skills/<name>/SKILL.md``.

    GT = the shipped skills (id ``id_prefix + name``); core GT drops the generic file-type skills;
    tasks left with no core GT are ``generic_only`` and excluded. The shipped skills are returned so
    they can join the pool.
    """
    root = Path(root)
    queries: list[Query] = []
    skills: dict[str, Skill] = {}
    instructions = sorted(root.rglob("instruction.md"))
    if not instructions:
        raise DataError(str(root), None, None, "no <task>/instruction.md found under this folder")
    for instr in instructions:
        task_dir = instr.parent
        try:
            text = instr.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            policy.bad(DataError(str(instr), None, "instruction", "contains bytes that are not valid UTF-8"))
            continue
        names = sorted({p.parent.name for p in task_dir.rglob("SKILL.md") if p.parent.parent.name == "skills"})
        for p in task_dir.rglob("SKILL.md"):
            if p.parent.parent.name != "skills":
                continue
            try:
                sk = parse_skill_md(p, p.parent.parent, max_field_chars, policy.report)
            except DataError as err:
                policy.bad(err)
                continue
            sid = id_prefix + p.parent.name
            skills.setdefault(sid, Skill(sid, sk.name, sk.description, sk.body, sk.category, "skillsbench", sk.extra))
        all_gt = tuple(id_prefix + n for n in names)
        core = tuple(id_prefix + n for n in names if n.lower() not in GENERIC_FILE_SKILLS)
        task_type = "generic_only" if not core else ("clean" if len(core) == len(all_gt) else "mixed")
        try:
            q = make_query(str(instr), "instruction", task_dir.relative_to(root).as_posix(), text, all_gt, core,
                           tags={"task_type": task_type}, text_field="instruction", gt_field="skills")
        except DataError as err:
            policy.bad(err)
            continue
        if not _protocol_excluded(q, str(instr), "instruction", policy.report):
            queries.append(q)
    return queries, list(skills.values())


def load_skillrouter_core(root: str | Path, policy: ErrorPolicy) -> list[Query]:
    """SkillRouter eval-core release: ``tasks.jsonl`` (``task_id``, ``instruction``) and
    ``relevance.json`` ``{task_id: {"core": [...], "auxiliary": [...], "grades"?: {...}, "task_type"}}``.

    Metrics use ``core``; ``auxiliary`` ids are kept in ``all_gt`` and as grade-1 gains when no
    grades are given (core = 2), matching the release's two-level relevance.
    """
    root = Path(root)
    rel_path = root / "relevance.json"
    try:
        relevance = json.loads(rel_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(str(rel_path), None, None, "file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(str(rel_path), None, None, f"invalid JSON ({exc})") from None
    if not isinstance(relevance, dict):
        raise DataError(str(rel_path), None, None, "expected an object keyed by task id")
    tasks_path = str(root / "tasks.jsonl")
    out: list[Query] = []
    for lineno, rec in read_jsonl(tasks_path):
        try:
            qid = str(rec.get("task_id", rec.get("id", "")))
            if not qid:
                raise DataError(tasks_path, lineno, "task_id", "missing")
            text = str_field(rec, "instruction" if "instruction" in rec else "query", tasks_path, lineno, required=False)
            rel = relevance.get(qid)
            if not isinstance(rel, dict):
                raise DataError(str(rel_path), qid, None, "no relevance entry for this task")
            core = id_list(rel, "core", str(rel_path), qid, required=True)
            aux = id_list(rel, "auxiliary", str(rel_path), qid, required=False)
            grades = _grades(rel, str(rel_path), qid) or {**{a: 1.0 for a in aux}, **{c: 2.0 for c in core}}
            tags = {"task_type": str(rel.get("task_type", "clean"))}
            q = make_query(tasks_path, lineno, qid, text, core + tuple(a for a in aux if a not in core), core,
                           grades=grades, tags=tags, text_field="instruction", gt_field="core")
        except DataError as err:
            policy.bad(err)
            continue
        if not _protocol_excluded(q, tasks_path, lineno, policy.report):
            out.append(q)
    return out


def load_r3_queries(path: str | Path, policy: ErrorPolicy) -> list[Query]:
    """R3-Skill queries: ``{"query", "skill_ids", "id"?, "rejected_skill_ids"?, "direction"?}``.
    Rejected ids are the SKIP partners."""
    path = str(path)
    out: list[Query] = []
    for lineno, rec in read_jsonl(path):
        try:
            gt = id_list(rec, "skill_ids", path, lineno, required=True)
            skip = id_list(rec, "rejected_skill_ids", path, lineno, required=False)
            tags = {k: v for k, v in rec.items() if isinstance(v, str) and k not in ("id", "query")}
            out.append(make_query(path, lineno, str(rec.get("id", lineno)), str_field(rec, "query", path, lineno, required=False),
                                  gt, None, skip=skip, tags=tags, gt_field="skill_ids"))
        except DataError as err:
            policy.bad(err)
    return out


def detect_queries_format(path: Path) -> str:
    if path.is_dir():
        if (path / "tasks.jsonl").exists() and (path / "relevance.json").exists():
            return "skillrouter_core"
        return "skillsbench"
    first: dict[str, Any] = next(read_jsonl(path), (0, {}))[1]
    return "r3" if "skill_ids" in first else "jsonl"


def load_queries(
    path: str | Path, fmt: str, policy: ErrorPolicy, max_field_chars: int
) -> tuple[list[Query], list[Skill]]:
    """Return the queries and any skills the benchmark ships itself (SkillsBench task folders)."""
    path = Path(path)
    if fmt == "auto":
        if not path.exists():
            raise DataError(str(path), None, None, "file not found")
        fmt = detect_queries_format(path)
    if fmt == "skillsbench":
        return load_skillsbench_tasks(path, policy, max_field_chars)
    loaders: dict[str, Callable[[Path, ErrorPolicy], list[Query]]] = {
        "jsonl": load_benchmark_jsonl, "skillrouter_core": load_skillrouter_core, "r3": load_r3_queries,
    }
    if fmt not in loaders:
        raise ValueError(f"unknown queries format {fmt!r}; choose one of auto, skillsbench, {', '.join(loaders)}")
    return loaders[fmt](path, policy), []


def load_descriptions(path: str | Path) -> dict[str, str]:
    """Oracle-ND replacement descriptions: ``{"id", "description"}`` per line."""
    out: dict[str, str] = {}
    for lineno, rec in read_jsonl(path):
        sid = str_field(rec, "id", str(path), lineno, required=True)
        out[sid] = str_field(rec, "description", str(path), lineno, required=True)
    return out

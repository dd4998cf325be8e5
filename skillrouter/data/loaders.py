"""Loaders for every pool and benchmark format the field uses, with one error policy.

Pools: JSONL (plain/.gz, one skill per line), a folder tree of ``SKILL.md`` files, R3-Skill's
``{id, text}`` JSONL. Benchmarks: our JSONL, SkillsBench task folders, R3-Skill's
``{query, skill_ids}`` JSONL. The released benchmarks as a whole (pool + tasks + protocol) are read
by :mod:`skillrouter.data.releases`.

Every defect becomes a :class:`DataError` naming file, line/record and field. Under
``on_error="skip"`` the record is dropped and counted in the :class:`LoadReport` instead; protocol
exclusions (SkillsBench ``generic_only`` tasks) are always counted skips.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
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


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_id(value: str, path: str, where: int | str, key: str) -> str:
    """Ids are arbitrary strings (``../x`` included: they are never used as paths) but never hold
    control characters such as NUL, which break every tool downstream of a run directory."""
    if _CONTROL.search(value):
        raise DataError(path, where, key, f"id {value!r} holds a control character")
    return value


def id_list(rec: dict, key: str, path: str, where: int | str, *, required: bool) -> tuple[str, ...]:
    value = rec.get(key)
    if value is None:
        if required:
            raise DataError(path, where, key, "missing")
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise DataError(path, where, key, "expected a list of non-empty skill-id strings")
    return tuple(dict.fromkeys(check_id(v, path, where, key) for v in value))


def make_skill(rec: dict, path: str, where: int | str, max_field_chars: int, report: LoadReport) -> Skill:
    """Validate one pool record. Strings are kept as written (a release's evaluator renders them
    verbatim). Overlong fields are truncated (and counted): no stage reads past a few thousand
    characters, and a 50 MB body must not exhaust memory downstream."""
    values = {k: str_field(rec, k, path, where, required=k in ("id", "name")) for k in SKILL_FIELDS}
    check_id(values["id"], path, where, "id")
    for key in ("description", "body"):
        if len(values[key]) > max_field_chars:
            report.count(f"{key}: truncated to {max_field_chars} chars", f"{path}:{where} ({values['id']})")
            values[key] = values[key][:max_field_chars]
    extra = {k: v for k, v in rec.items() if k not in SKILL_FIELDS}
    return Skill(
        id=values["id"], name=values["name"], description=values["description"],
        body=values["body"], category=values["category"] or None, source=values["source"] or None, extra=extra,
    )


def collect_unique(records: Iterable[tuple[str, int | str, Callable[[], Any]]], policy: ErrorPolicy,
                   what: str = "skill") -> list[Any]:
    """Build records (skills or queries) in order, rejecting a repeated id with both locations
    named: a repeated id would otherwise silently replace an earlier record."""
    items: list[Any] = []
    seen: dict[str, str] = {}
    for path, where, build in records:
        try:
            item = build()
            if item.id in seen:
                raise DataError(path, where, "id", f"duplicate {what} id {item.id!r} (first seen at {seen[item.id]})")
        except DataError as err:
            policy.bad(err)
            continue
        seen[item.id] = f"{path}:{where}"
        items.append(item)
    return items


def load_pool_jsonl(path: str | Path, policy: ErrorPolicy, max_field_chars: int) -> list[Skill]:
    path = str(path)

    def records():
        for lineno, rec in read_jsonl(path):
            yield path, lineno, lambda rec=rec, lineno=lineno: make_skill(rec, path, lineno, max_field_chars, policy.report)

    return collect_unique(records(), policy)


R3_SEPARATOR = " | "


def load_pool_r3(path: str | Path, policy: ErrorPolicy, max_field_chars: int) -> list[Skill]:
    """R3-Skill pool: ``{"id", "text": "name | description | body"}`` per line. The text is split
    into its three segments (so BM25, ``fields=nd`` and our renderers see real fields) and also kept
    verbatim in ``extra["text"]``: R3's models read exactly that string."""
    path = str(path)

    def records():
        for lineno, rec in read_jsonl(path):
            def build(rec=rec, lineno=lineno):
                sid = str_field(rec, "id", path, lineno, required=True)
                text = str_field(rec, "text", path, lineno, required=True)
                parts = text.split(R3_SEPARATOR, 2) + ["", ""]
                fields = {"id": sid, "name": parts[0] if parts[0].strip() else sid, "description": parts[1],
                          "body": parts[2], **{k: v for k, v in rec.items() if k not in ("id", "name", "description", "body")}}
                return make_skill(fields, path, lineno, max_field_chars, policy.report)
            yield path, lineno, build

    return collect_unique(records(), policy)


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
        "name": meta["name"].strip() if isinstance(meta.get("name"), str) else None,
        "description": (desc if isinstance(desc, str) else ("" if desc is None else str(desc))).strip(),
        "body": body,
        **{str(k): json.loads(json.dumps(v, default=str)) for k, v in meta.items() if k not in ("name", "description")},
    }
    return make_skill(record, str(path), "front matter" if record["name"] is None else 1, max_field_chars, report)


def load_pool_tree(root: str | Path, policy: ErrorPolicy, max_field_chars: int) -> list[Skill]:
    root = Path(root)
    files = sorted(root.rglob("SKILL.md"))
    if not files:
        raise DataError(str(root), None, None, "no SKILL.md files found under this folder")
    return collect_unique(
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

def is_number(value: Any) -> bool:
    """A finite int or float (JSON's NaN and Infinity would poison every mean)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def grades_field(rec: dict, path: str, where: int | str, key: str = "grades") -> dict[str, float]:
    grades = rec.get(key) or {}
    if not isinstance(grades, dict) or not all(is_number(v) for v in grades.values()):
        raise DataError(path, where, key, "expected an object {skill_id: finite number}")
    return {str(k): float(v) for k, v in grades.items()}


def make_query(
    path: str, where: int | str, qid: str, text: str, all_gt: tuple[str, ...], core_gt: tuple[str, ...] | None,
    *, grades: dict[str, float] | None = None, skip: tuple[str, ...] = (), tags: dict[str, str] | None = None,
    text_field: str = "query", gt_field: str = "gt",
) -> Query:
    if not text.strip():
        raise DataError(path, where, text_field, "empty query text")
    check_id(qid, path, where, "id")
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


def _tags(rec: dict, skip: tuple[str, ...]) -> dict[str, str]:
    """Every other field of a query record as a string tag (non-strings as JSON), so any of them can
    be a metric breakdown (``eval.breakdown``)."""
    return {k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, sort_keys=True)
            for k, v in rec.items() if k not in skip}


def _excluding_protocol(queries: list[Query], path: str, report: LoadReport) -> list[Query]:
    return [q for q in queries if not _protocol_excluded(q, path, q.id, report)]


def load_benchmark_jsonl(path: str | Path, policy: ErrorPolicy) -> list[Query]:
    """``{"id", "query", "gt", "core_gt"?, "grades"?, "skip"?, "task_type"?, ...}``; other string
    fields (``domain``, ``direction``...) become tags. A repeated ``id`` is an error."""
    path = str(path)

    def records():
        for lineno, rec in read_jsonl(path):
            def build(rec=rec, lineno=lineno):
                qid = str(rec.get("id", lineno))
                text = str_field(rec, "query", path, lineno, required=False)
                all_gt = id_list(rec, "gt", path, lineno, required=True)
                core = id_list(rec, "core_gt", path, lineno, required=False) if "core_gt" in rec else None
                tags = {k: v for k, v in rec.items() if isinstance(v, str) and k not in ("id", "query")}
                return make_query(path, lineno, qid, text, all_gt, core, grades=grades_field(rec, path, lineno),
                                  skip=id_list(rec, "skip", path, lineno, required=False), tags=tags)
            yield path, lineno, build

    return _excluding_protocol(collect_unique(records(), policy, "query"), path, policy.report)


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


def load_r3_queries(path: str | Path, policy: ErrorPolicy) -> list[Query]:
    """R3-Skill queries (``data/test.jsonl``): ``{"query", "skill_ids": [...], ...}``. A query
    without ``id`` gets its 0-based position in the file (R3's own scripts index queries by
    position); every other field is kept as a tag."""
    path = str(path)

    def records():
        for index, (lineno, rec) in enumerate(read_jsonl(path)):
            def build(rec=rec, lineno=lineno, index=index):
                gt = id_list(rec, "skill_ids", path, lineno, required=True)
                qid = str(rec["id"]) if "id" in rec else str(index)
                return make_query(path, lineno, qid, str_field(rec, "query", path, lineno, required=False), gt, None,
                                  tags=_tags(rec, ("id", "query", "skill_ids")), gt_field="skill_ids")
            yield path, lineno, build

    return collect_unique(records(), policy, "query")


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


def detect_queries_format(path: Path) -> str:
    if path.is_dir():
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
        "jsonl": load_benchmark_jsonl, "r3": load_r3_queries,
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

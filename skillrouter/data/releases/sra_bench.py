"""SRA-Bench (GitHub ``oneal2000/SR-Agents``, ``data/bench/``) as ``sragents retrieve`` reads it
(``src/sragents/corpus.py``, ``cli/retrieve.py``):

* corpus ``data/bench/corpus/corpus.json`` (shipped zipped as ``corpus.json.zip``; either is read): a JSON
  list of ``{skill_id, name, description, content, tools?}``; the retrieval text is the non-empty ones of
  name, description and content joined by newlines (``skill_text``);
* instances ``data/bench/instances/<dataset>.json``: a JSON list of ``{instance_id, dataset, question,
  skill_annotations: [skill_id, ..], eval_data}``; an instance without annotations is not scored (counted);
* the query is what ``_build_query`` retrieves with: the dataset's prompt builder's user prompt, then its
  system prompt, then (ToolQA) the few-shot examples (:mod:`.sra_prompts`).
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

from ..loaders import ErrorPolicy, check_ground_truth, collect_unique, id_list, make_query, make_skill, str_field
from ..types import DataError, Dataset, LoadReport, Query, Skill
from .sra_prompts import retrieval_query

CORPUS = Path("data/bench/corpus/corpus.json")
INSTANCES = Path("data/bench/instances")


def release_text(rec: dict[str, Any]) -> str:
    return "\n".join(rec[k] for k in ("name", "description", "content") if rec.get(k))


def read_corpus_records(root: Path) -> tuple[str, list[Any]]:
    """The corpus list and the file it came from: ``corpus.json`` if unzipped, else the zip's ``corpus.json``."""
    plain, zipped = root / CORPUS, root / CORPUS.with_suffix(".json.zip")
    try:
        if plain.exists():
            source, records = str(plain), json.loads(plain.read_text(encoding="utf-8"))
        elif zipped.exists():
            source = f"{zipped}!corpus.json"
            with zipfile.ZipFile(zipped) as z:
                records = json.loads(z.read("corpus.json").decode("utf-8"))
        else:
            raise DataError(str(zipped), None, None, f"missing (and no unzipped {plain}): the SRA-Bench skill corpus")
    except KeyError:
        raise DataError(str(zipped), None, None, "holds no corpus.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
        raise DataError(str(plain if plain.exists() else zipped), None, None, f"unreadable: {exc}") from None
    if not isinstance(records, list):
        raise DataError(source, None, None, "expected a JSON list of skills")
    return source, records


def _skill(rec: Any, source: str, index: int, max_field_chars: int, report: LoadReport) -> Skill:
    where = f"skill {index}"
    if not isinstance(rec, dict):
        raise DataError(source, where, None, "expected an object")
    for key in ("skill_id", "name", "description", "content"):
        if key not in rec:
            raise DataError(source, where, key, "missing")
    sid = str_field(rec, "skill_id", source, where, required=True)
    name = str_field(rec, "name", source, where, required=False)
    if not name.strip():
        report.count("corpus: skill without a name (its id stands in)", f"{source} ({sid})")
    fields = {k: v for k, v in rec.items() if k not in ("skill_id", "content")}
    fields.update(id=sid, name=name if name.strip() else sid, body=rec["content"], text=release_text(rec))
    return make_skill(fields, source, where, max_field_chars, report)


def read_corpus(root: Path, policy: ErrorPolicy, max_field_chars: int) -> list[Skill]:
    source, records = read_corpus_records(root)
    return collect_unique(((source, i, lambda r=r, i=i: _skill(r, source, i, max_field_chars, policy.report))
                           for i, r in enumerate(records)), policy)


def instance_files(root: Path, datasets: list[str] | None) -> list[Path]:
    folder = root / INSTANCES
    if datasets:
        return [folder / f"{d}.json" for d in datasets]
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DataError(str(folder), None, None, "no <dataset>.json instance file here")
    return files


def read_instances(path: Path, root: Path, policy: ErrorPolicy) -> list[Query]:
    if not path.exists():
        raise DataError(str(path), None, None, "missing: no such SRA-Bench instance file")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(str(path), None, None, f"not valid JSON ({exc})") from None
    if not isinstance(records, list):
        raise DataError(str(path), None, None, "expected a JSON list of instances")
    out = []

    def build(rec: Any, i: int) -> Query | None:
        where = f"instance {i}"
        if not isinstance(rec, dict):
            raise DataError(str(path), where, None, "expected an object")
        iid = str_field(rec, "instance_id", str(path), where, required=True)
        for key in ("dataset", "question"):
            str_field(rec, key, str(path), f"{where} ({iid})", required=True)
        gt = id_list(rec, "skill_annotations", str(path), f"{where} ({iid})", required=True)
        if not gt:
            return None
        text = retrieval_query(rec, root, policy.report)
        return make_query(str(path), f"{where} ({iid})", iid, text, gt, None, tags={"dataset": rec["dataset"]},
                          text_field="question", gt_field="skill_annotations")

    for i, rec in enumerate(records):
        try:
            q = build(rec, i)
        except DataError as err:
            policy.bad(err)
            continue
        if q is None:
            policy.report.count("protocol: instance without skill_annotations (not scored)", f"{path} instance {i}")
        else:
            out.append(q)
    return out


def load_sra_bench(root: str | Path, policy: ErrorPolicy, max_field_chars: int,
                   datasets: list[str] | None = None) -> Dataset:
    """The corpus and the instances of ``datasets`` (all instance files when None), one query set."""
    root = Path(root)
    skills = read_corpus(root, policy, max_field_chars)
    files = instance_files(root, datasets)
    queries = collect_unique(((str(f), q.id, lambda q=q: q) for f in files for q in read_instances(f, root, policy)),
                             policy, "query")
    queries = check_ground_truth(queries, {s.id for s in skills}, policy, str(root / INSTANCES))
    if not queries:
        raise DataError(str(root / INSTANCES), None, None, "no instance left to evaluate after validation")
    return Dataset(skills=skills, queries=queries, report=policy.report)

"""A validated :class:`Dataset` stored columnar, so grid cells read a parsed pool instead of parsing it.

``skills.arrow`` (Arrow IPC, LZ4) holds one row per skill (``extra`` as JSON text, null when empty);
``dataset.json`` holds the queries, the load report and the distractor ids. Reading a 70K-skill pool
back is a column scan plus object construction, with no JSON parsing or validation of the pool (Arrow
IPC rather than Parquet: it reads back several times faster, and a cache entry is never shipped).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .jsonl import atomic_write_json
from .types import Dataset, LoadReport, Query, Skill

SKILL_COLUMNS = ("id", "name", "description", "body", "category", "source")
SKILLS_FILE = "skills.arrow"


def write_dataset(dataset: Dataset, out_dir: Path) -> None:
    import pyarrow as pa
    import pyarrow.feather as feather

    columns = {c: [getattr(s, c) for s in dataset.skills] for c in SKILL_COLUMNS}
    columns["extra"] = [json.dumps(s.extra, ensure_ascii=False, sort_keys=True) if s.extra else None for s in dataset.skills]
    feather.write_feather(pa.table({k: pa.array(v, type=pa.string()) for k, v in columns.items()}), out_dir / SKILLS_FILE,
                          compression="lz4")
    atomic_write_json(out_dir / "dataset.json", {
        "queries": [dataclasses.asdict(q) for q in dataset.queries],
        "report": {"skipped": dataset.report.skipped, "examples": dataset.report.examples},
        "distractor_ids": sorted(dataset.distractor_ids),
    })


def read_dataset(entry: Path) -> Dataset:
    import pyarrow.feather as feather

    table = feather.read_table(entry / SKILLS_FILE, memory_map=True)
    cols = {c: table.column(c).to_pylist() for c in (*SKILL_COLUMNS, "extra")}
    skills = [Skill(i, n, d, b, c, s, json.loads(e) if e else {})
              for i, n, d, b, c, s, e in zip(*(cols[c] for c in (*SKILL_COLUMNS, "extra")))]
    meta = json.loads((entry / "dataset.json").read_text(encoding="utf-8"))
    queries = [Query(**{**q, "gt": tuple(q["gt"]), "all_gt": tuple(q["all_gt"]), "skip": tuple(q["skip"])})
               for q in meta["queries"]]
    report = LoadReport(skipped=meta["report"]["skipped"], examples=meta["report"]["examples"])
    return Dataset(skills=skills, queries=queries, report=report, distractor_ids=frozenset(meta["distractor_ids"]))

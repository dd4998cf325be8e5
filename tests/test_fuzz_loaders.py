"""Loader fuzzer: valid files of every supported format, mutated (truncation, wrong types, huge fields,
invalid UTF-8, NUL bytes, duplicate keys, deep nesting); every load either succeeds (and its columnar
copy round-trips) or raises our one-line DataError naming the file. Seeded and bounded."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skillrouter.data import DataError
from skillrouter.data.columnar import read_dataset, write_dataset
from skillrouter.data.dataset import load_source

from . import release_fixtures
from .conftest import write_jsonl

POOL = [{"id": "a", "name": "csv-cleaner", "description": "Clean CSV", "body": "Drop duplicate rows.", "category": "data"},
        {"id": "b", "name": "pdf-reader", "description": "Read PDFs", "body": "Extract the text."}]
QUERIES = [{"id": "q1", "query": "dedupe my csv", "gt": ["a"], "grades": {"a": 3}},
           {"id": "q2", "query": "csv and pdf", "gt": ["a", "b"], "core_gt": ["a", "b"], "task_type": "clean"}]


def _skill_md(name: str, desc: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: {desc}\n---\n{body}\n"


def build(fmt: str, root: Path) -> tuple[dict, Path]:
    """A valid dataset of format ``fmt`` under ``root``: its data slice and the file the fuzzer mutates."""
    if fmt in ("jsonl", "jsonl.gz", "queries"):
        pool = write_jsonl(root / "pool.jsonl", POOL)
        if fmt == "jsonl.gz":
            gz = root / "pool.jsonl.gz"
            gz.write_bytes(gzip.compress(pool.read_bytes()))
            pool = gz
        queries = write_jsonl(root / "q.jsonl", QUERIES)
        return {"source": "files", "pool": str(pool), "queries": str(queries)}, queries if fmt == "queries" else pool
    if fmt == "tree":
        for s in POOL:
            (root / "pool" / s["id"]).mkdir(parents=True)
            (root / "pool" / s["id"] / "SKILL.md").write_text(_skill_md(s["name"], s["description"], s["body"]))
        queries = write_jsonl(root / "q.jsonl", QUERIES)
        return {"source": "files", "pool": str(root / "pool"), "queries": str(queries)}, root / "pool" / "a" / "SKILL.md"
    if fmt == "skillsbench":
        pool = write_jsonl(root / "pool.jsonl", POOL)
        task = root / "tasks" / "t1"
        (task / "environment" / "skills" / "fuzzy").mkdir(parents=True)
        (task / "instruction.md").write_text("Match the vendor names.")
        (task / "environment" / "skills" / "fuzzy" / "SKILL.md").write_text(_skill_md("fuzzy", "Fuzzy match", "Use ratios."))
        return {"source": "files", "pool": str(pool), "queries": str(root / "tasks")}, task / "environment" / "skills" / "fuzzy" / "SKILL.md"
    if fmt.startswith("skillrouter_core"):
        core = release_fixtures.skillrouter_core(root / "core")
        target = {"skillrouter_core/tasks": core / "tasks.jsonl", "skillrouter_core/relevance": core / "relevance.json",
                  "skillrouter_core/shard": core / "easy" / "part-00000.jsonl.gz"}[fmt]
        return {"source": "skillrouter_core", "root": str(core)}, target
    if fmt.startswith("r3"):
        r3 = release_fixtures.r3_skill(root / "r3")
        target = r3 / "data" / ("test.jsonl" if fmt == "r3/queries" else "skills_test.jsonl")
        return {"source": "r3_skill", "root": str(r3)}, target
    raise ValueError(fmt)


FORMATS = ["jsonl", "jsonl.gz", "queries", "tree", "skillsbench", "skillrouter_core/tasks", "skillrouter_core/relevance",
           "skillrouter_core/shard", "r3/pool", "r3/queries"]
ODD_VALUES = st.sampled_from([None, 0, -1, 1e308, True, [], {}, ["a"], {"x": 1}, "", "\u0000", "x" * 3_000_000,
                              "NaN", float("nan"), "\udc80"])


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@st.composite
def mutation(draw):
    kind = draw(st.sampled_from(["truncate", "bytes", "nul", "value", "dup_key", "deep", "huge"]))
    return kind, draw(st.integers(0, 10_000)), draw(ODD_VALUES), draw(st.binary(min_size=1, max_size=4))


def mutate(data: bytes, kind: str, pos: int, value, blob: bytes) -> bytes:
    if not data:
        return data
    at = pos % len(data)
    if kind == "truncate":
        return data[:at]
    if kind == "bytes":
        return data[:at] + b"\xff\xfe" + blob + data[at:]
    if kind == "nul":
        return data[:at] + b"\x00" + data[at:]
    if kind in ("value", "dup_key", "deep", "huge"):
        lines = data.split(b"\n")
        i = at % len(lines)
        try:
            rec = json.loads(lines[i])
        except ValueError:
            return data[:at] + blob + data[at:]
        if not isinstance(rec, dict) or not rec:
            return data
        key = sorted(rec)[pos % len(rec)]
        if kind == "value":
            text = json.dumps({**rec, key: value}, allow_nan=True)
        elif kind == "dup_key":
            text = "{" + json.dumps(key) + ": " + json.dumps(value, allow_nan=True) + ", " + json.dumps(rec)[1:]
        elif kind == "deep":
            text = json.dumps({**rec, key: "DEEP"}).replace('"DEEP"', _deep(100_000))
        else:
            text = json.dumps({**rec, key: "y" * 5_000_000})
        lines[i] = text.encode("utf-8", "surrogatepass")
        return b"\n".join(lines)
    raise ValueError(kind)


def _rewrite(target: Path, fn) -> None:
    raw = target.read_bytes()
    gz = target.suffix == ".gz"
    data = fn(gzip.decompress(raw) if gz else raw)
    target.write_bytes(gzip.compress(data) if gz else data)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(change=mutation())
def test_mutated_files_load_or_fail_with_a_located_data_error(tmp_path_factory, fmt, change):
    root = tmp_path_factory.mktemp("fuzz")
    data, target = build(fmt, root)
    _rewrite(target, lambda b: mutate(b, *change))
    try:
        dataset = load_source(data, "easy", False)
    except DataError as err:
        message = str(err)
        assert "\n" not in message and "Traceback" not in message
        assert Path(err.path).is_relative_to(root), (err.path, target)  # names a file of this dataset (or its folder)
        return
    write_dataset(dataset, root)
    back = read_dataset(root)
    assert back.skills == dataset.skills and back.queries == dataset.queries
    shutil.rmtree(root, ignore_errors=True)

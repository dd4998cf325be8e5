"""Shared fixtures: tiny pools and benchmarks written on the spot (no ../shared, no hub)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
ROOT = Path(__file__).resolve().parents[1]


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def pool_records():
    return [
        {"id": "a", "name": "csv-cleaner", "description": "Clean CSV files.", "body": "Remove duplicate rows from csv."},
        {"id": "b", "name": "pdf-reader", "description": "Read PDF files.", "body": "Extract text from pdf pages."},
        {"id": "c", "name": "image-resizer", "description": "Resize images.", "body": "Make thumbnails of photos."},
    ]


@pytest.fixture
def small_files(tmp_path, pool_records):
    pool = write_jsonl(tmp_path / "pool.jsonl", pool_records)
    queries = write_jsonl(tmp_path / "queries.jsonl", [
        {"id": "q1", "query": "dedupe my csv rows", "gt": ["a"]},
        {"id": "q2", "query": "thumbnails and pdf text", "gt": ["b", "c"], "grades": {"b": 3, "c": 1}},
    ])
    return pool, queries

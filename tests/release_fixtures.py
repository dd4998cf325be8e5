"""Tiny copies of the two released benchmarks, in their exact layouts and field names, written in
our own words (no released text)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from .conftest import write_jsonl

TOPICS = [("csv-cleaner", "Clean CSV files", "Drop duplicate rows, trim cells and fix the header of a csv table."),
          ("pdf-reader", "Read PDF files", "Extract the text of every pdf page and keep the reading order."),
          ("image-resizer", "Resize images", "Make thumbnails of photos with a fixed width and a sharpening pass."),
          ("audio-cutter", "Cut audio", "Trim silence from podcast recordings and split them into chapters."),
          ("sql-tuner", "Tune SQL", "Read query plans, add the missing index and compare timings."),
          ("log-parser", "Parse logs", "Group server log lines by request id and count error codes.")]


def _write_gz(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))


def skillrouter_core(root: Path) -> Path:
    """Eval-core layout: tasks.jsonl, relevance.json, manifest.json, easy/ and hard/ gzip shards.

    Tasks: t-csv (single, clean), t-media (multi: image + audio), t-pdf (mixed: its core GT is absent
    from both pools, so it is skipped), t-generic (generic_only). Hard adds degraded variants (grade 1).
    """
    easy = [{"skill_id": f"gt/{n}", "name": n, "description": d, "body": b, "source_repo": "fixture"} for n, d, b in TOPICS]
    easy[1] = {"skill_id": "gt/pdf-reader", "name": "pdf-reader", "desc": TOPICS[1][1], "body": TOPICS[1][2]}  # "desc" variant
    easy += [{"skill_id": f"other/filler-{i}", "name": f"filler-{i}", "description": "Unrelated helper",
              "body": f"Helps with chores number {i}."} for i in range(6)]
    hard = easy + [{"skill_id": "degraded/csv-cleaner_steps-removed_1", "name": "csv-cleaner", "description": TOPICS[0][1],
                    "body": "Clean the csv table."},
                   {"skill_id": "degraded/image-resizer_constraints-corrupted_2", "name": "image-resizer",
                    "description": TOPICS[2][1], "body": "Sometimes make thumbnails of photos."}]
    manifest = {"dataset_name": "fixture", "tasks": {"path": "tasks.jsonl"}, "relevance": {"path": "relevance.json"}}
    for tier, records in (("easy", easy), ("hard", hard)):
        half = len(records) // 2
        parts = [records[:half], records[half:]]
        for i, part in enumerate(parts):
            _write_gz(root / tier / f"part-{i:05d}.jsonl.gz", part)
        manifest[tier] = {"format": "jsonl", "compression": "gzip", "records": len(records),
                          "parts": [{"path": f"{tier}/part-{i:05d}.jsonl.gz", "records": len(p)} for i, p in enumerate(parts)]}
    (root / "manifest.json").write_text(json.dumps(manifest))
    write_jsonl(root / "tasks.jsonl", [
        {"task_id": "t-csv", "domain": "data", "instruction_text": "Our export has repeated rows and a broken header; tidy the table."},
        {"task_id": "t-media", "domain": "media", "instruction_text": "Make preview thumbnails and trim the silence in the recordings."},
        {"task_id": "t-pdf", "domain": "docs", "instruction_text": "Pull the text out of the scanned report."},
        {"task_id": "t-generic", "domain": "office", "instruction_text": "Fill in the spreadsheet."},
    ])
    (root / "relevance.json").write_text(json.dumps({
        "t-csv": {"gt_skill_ids": ["gt/csv-cleaner"], "core_gt_ids": ["gt/csv-cleaner"], "auxiliary_gt_ids": [],
                  "relevance": {"gt/csv-cleaner": 3, "degraded/csv-cleaner_steps-removed_1": 1}, "task_type": "clean"},
        "t-media": {"gt_skill_ids": ["gt/image-resizer", "gt/audio-cutter", "gt/xlsx"],
                    "core_gt_ids": ["gt/image-resizer", "gt/audio-cutter"], "auxiliary_gt_ids": ["gt/xlsx"],
                    "relevance": {"gt/image-resizer": 3, "gt/audio-cutter": 3, "gt/xlsx": 3,
                                  "degraded/image-resizer_constraints-corrupted_2": 1}, "task_type": "mixed"},
        "t-pdf": {"gt_skill_ids": ["gt/ocr-tool"], "core_gt_ids": ["gt/ocr-tool"], "auxiliary_gt_ids": [],
                  "relevance": {"gt/ocr-tool": 3}, "task_type": "clean"},
        "t-generic": {"gt_skill_ids": ["gt/xlsx"], "core_gt_ids": [], "auxiliary_gt_ids": ["gt/xlsx"],
                      "relevance": {"gt/xlsx": 3}, "task_type": "generic_only"},
    }))
    return root


def r3_skill(root: Path) -> Path:
    """R3 repository layout: data/skills_test.jsonl {id, text} and data/test.jsonl {query, skill_ids, ...}."""
    write_jsonl(root / "data" / "skills_test.jsonl",
                [{"id": f"skill-{i:05d}", "text": f"{n} | {d} | {b}"} for i, (n, d, b) in enumerate(TOPICS)]
                + [{"id": "skill-00099", "text": "notes | Keep notes"}])
    write_jsonl(root / "data" / "test.jsonl", [
        {"query": "remove the duplicate rows from my table", "skill_ids": ["skill-00000"], "lang": "en-en", "k": 1},
        {"query": "resize the photos and cut the podcast", "skill_ids": ["skill-00002", "skill-00003"], "lang": "en-en", "k": 2},
        {"query": "把日志按请求分组", "skill_ids": ["skill-00005"], "lang": "zh-en", "k": 1},
        {"query": "tune the slow sql and parse the logs", "skill_ids": ["skill-00004", "skill-00005"], "lang": "zh-en", "k": 2},
    ])
    return root

"""Tiny copies of the released benchmarks, in their exact layouts and field names, written in
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


SKILLRET_EMPTY = {"namespace": "fixture", "author": "", "stars": 0, "installs": 0, "license": "MIT", "repo": "",
                  "source_url": "", "raw_url": "", "sub": "", "primary_action": "", "primary_object": ""}
TRAIN_TOPICS = [("tsv-joiner", "Join TSV files", "Merge two tab separated tables on a shared key column."),
                ("json-linter", "Lint JSON", "Check json documents against a schema and report the bad paths."),
                ("video-trimmer", "Trim video", "Cut the first seconds of a clip and re-encode it for the web."),
                ("index-advisor", "Advise on indexes", "Suggest database indexes from a slow query log."),
                ("trace-reader", "Read traces", "Follow a distributed trace and find the slowest span.")]


def _skillret_skill(prefix: str, i: int, name: str, desc: str, body: str, major: str) -> dict:
    return {"id": f"{prefix}/{name}", "name": name, **SKILLRET_EMPTY, "description": desc, "major": major,
            "domain": major, "body": body, "skill_md": f"---\nname: {name}\ndescription: {desc}\n---\n{body}"}


def skillret(root: Path) -> Path:
    """SkillRet layout: data/{skills,queries,qrels}/{train,test}.jsonl + data/skills.jsonl + data/taxonomy.json.

    Test: the six topics (one with an empty skill_md, which falls back to its description) and 3 queries — one
    with ``labels`` (they win over skill_ids), one whose qrels disagree with its skill_ids. Train: five other
    skills and six pairs, one of them multi-positive."""
    data = root / "data"
    test = [_skillret_skill("test", i, n, d, b, "data" if i % 2 == 0 else "media") for i, (n, d, b) in enumerate(TOPICS)]
    test[4]["skill_md"] = ""  # sql-tuner
    train = [_skillret_skill("train", i, n, d, b, "tools") for i, (n, d, b) in enumerate(TRAIN_TOPICS)]
    write_jsonl(data / "skills" / "test.jsonl", test)
    write_jsonl(data / "skills" / "train.jsonl", train)
    write_jsonl(data / "skills.jsonl", test + train)
    (data / "taxonomy.json").write_text(json.dumps({"major": ["data", "media", "tools"]}))
    queries = [
        {"id": "q-csv", "original_id": "q-csv", "query": "remove the duplicate rows from my table",
         "skill_ids": ["test/csv-cleaner"], "skill_names": ["csv-cleaner"], "k": 1, "generator_model": "fixture"},
        {"id": "q-media", "original_id": "q-media", "query": "resize the photos and cut the podcast",
         "skill_ids": ["test/image-resizer", "test/audio-cutter"], "skill_names": ["image-resizer", "audio-cutter"], "k": 2,
         "generator_model": "fixture"},
        {"id": "q-sql", "original_id": "q-sql", "query": "tune the slow sql and parse the logs",
         "skill_ids": ["test/sql-tuner"], "skill_names": ["sql-tuner"], "k": 2, "generator_model": "fixture",
         "labels": [{"id": "test/sql-tuner", "relevance": 1}, {"id": "test/log-parser", "relevance": 1}]},
    ]
    write_jsonl(data / "queries" / "test.jsonl", queries)
    write_jsonl(data / "qrels" / "test.jsonl", [
        {"query_id": "q-csv", "skill_id": "test/csv-cleaner", "relevance": 1},
        {"query_id": "q-media", "skill_id": "test/image-resizer", "relevance": 1},  # audio-cutter left out: disagrees
        {"query_id": "q-sql", "skill_id": "test/sql-tuner", "relevance": 1},
        {"query_id": "q-sql", "skill_id": "test/log-parser", "relevance": 1}])
    train_queries = [("join the two tab separated exports on the id column", ["train/tsv-joiner"]),
                     ("validate these json payloads against our schema", ["train/json-linter"]),
                     ("shorten the intro of this clip for the website", ["train/video-trimmer"]),
                     ("which index would speed up these slow queries", ["train/index-advisor"]),
                     ("find the slow span in this request trace", ["train/trace-reader"]),
                     ("lint the json and merge the tsv tables", ["train/json-linter", "train/tsv-joiner"])]
    write_jsonl(data / "queries" / "train.jsonl", [
        {"id": f"train-{i:05d}", "original_id": f"train-{i:05d}", "query": q, "skill_ids": ids,
         "skill_names": [s.split("/")[1] for s in ids], "k": len(ids), "generator_model": "fixture"}
        for i, (q, ids) in enumerate(train_queries)])
    write_jsonl(data / "qrels" / "train.jsonl", [{"query_id": f"train-{i:05d}", "skill_id": s, "relevance": 1}
                                                 for i, (_, ids) in enumerate(train_queries) for s in ids])
    return root


def sra_bench(root: Path) -> Path:
    """SRA-Bench layout: data/bench/corpus/corpus.json.zip (holding corpus.json) and data/bench/instances/<dataset>.json.
    Instances of two release datasets (theoremqa, logicbench) and one without annotations."""
    import zipfile

    corpus = [{"skill_id": f"sk_{i:03d}", "name": n, "description": d, "content": b} for i, (n, d, b) in enumerate(TOPICS)]
    corpus[5]["tools"] = [{"name": "count_errors"}]
    folder = root / "data" / "bench"
    (folder / "corpus").mkdir(parents=True)
    with zipfile.ZipFile(folder / "corpus" / "corpus.json.zip", "w") as z:
        z.writestr("corpus.json", json.dumps(corpus))
    (folder / "instances").mkdir()
    (folder / "instances" / "theoremqa.json").write_text(json.dumps([
        {"instance_id": "theoremqa_000", "dataset": "theoremqa", "question": "remove the duplicate rows from my table",
         "skill_annotations": ["sk_000"], "eval_data": {"answer": "1"}},
        {"instance_id": "theoremqa_001", "dataset": "theoremqa", "question": "nothing to retrieve here",
         "skill_annotations": [], "eval_data": {"answer": "2"}}]))
    (folder / "instances" / "logicbench.json").write_text(json.dumps([
        {"instance_id": "logicbench_000", "dataset": "logicbench", "question": "resize the photos and cut the podcast",
         "skill_annotations": ["sk_002", "sk_003"], "eval_data": {"answer": "yes"}},
        {"instance_id": "logicbench_001", "dataset": "logicbench", "question": "tune the slow sql and parse the logs",
         "skill_annotations": ["sk_004", "sk_005"], "eval_data": {"answer": "no"}}]))
    return root


def skillretbench(root: Path) -> Path:
    """SkillRetBench layout: skill_corpus.json {meta, statistics, skills} and skillretbench_queries.json {meta, queries};
    one query's outdated_skill_id is not in the corpus."""
    root.mkdir(parents=True, exist_ok=True)
    skills = [{"skill_id": f"srb-{i}", "skill_name": n, "description": d, "trigger_phrases": [n.replace("-", " ")],
               "anti_triggers": [], "korean_triggers": [], "composable_skills": [], "category": "data", "full_text": b}
              for i, (n, d, b) in enumerate(TOPICS)]
    (root / "skill_corpus.json").write_text(json.dumps({"meta": {"version": "fixture"}, "statistics": {"n": len(skills)},
                                                        "skills": skills}))
    queries = [{"query_id": "srbq-0", "query": "remove the duplicate rows from my table", "setting": "single",
                "gold_skills": ["srb-0"], "distractor_skills": ["srb-1"], "outdated_skill_id": None},
               {"query_id": "srbq-1", "query": "resize the photos and cut the podcast", "setting": "composition",
                "gold_skills": ["srb-2", "srb-3"], "distractor_skills": [], "outdated_skill_id": "srb-old-7"},
               {"query_id": "srbq-2", "query": "tune the slow sql", "setting": "versioned",
                "gold_skills": ["srb-4"], "distractor_skills": [], "outdated_skill_id": "srb-5"}]
    (root / "skillretbench_queries.json").write_text(json.dumps({"meta": {"version": "fixture"}, "queries": queries}))
    return root

"""The released benchmarks read as published, their protocols, downloads, prediction files in and out."""
from __future__ import annotations

import gzip
import json
import math
import shutil
import subprocess
import sys

import pytest

from skillrouter.data import DataError
from skillrouter.data import download as download_module
from skillrouter.data.dataset import load_source
from skillrouter.data.download import ensure_release
from skillrouter.data.loaders import ErrorPolicy
from skillrouter.data.releases.skillrouter_core import load_skillrouter_core
from skillrouter.data.types import LoadReport
from skillrouter.rankings import read_external

from . import release_fixtures
from .conftest import ROOT
from .test_launch import launch


@pytest.fixture
def core(tmp_path):
    return release_fixtures.skillrouter_core(tmp_path / "eval_core")


def _load(root, tier):
    return load_skillrouter_core(root, tier, ErrorPolicy("raise", LoadReport()), 200_000)


def test_skillrouter_core_protocol_per_tier(core):
    easy, hard = _load(core, "easy"), _load(core, "hard")
    assert [q.id for q in easy.queries] == [q.id for q in hard.queries] == ["t-csv", "t-media"]
    assert easy.report.skipped == {"protocol: generic_only task excluded": 1,
                                   "protocol: no scored ground truth in this tier's pool": 1}
    media = {q.id: q for q in easy.queries}["t-media"]
    assert media.gt == ("gt/image-resizer", "gt/audio-cutter")  # core ∩ pool
    assert media.all_gt == ("gt/image-resizer", "gt/audio-cutter", "gt/xlsx")
    assert media.grades == {"gt/image-resizer": 3.0, "gt/audio-cutter": 3.0}  # relevance ∩ Easy pool
    hard_media = {q.id: q for q in hard.queries}["t-media"]
    assert hard_media.grades["degraded/image-resizer_constraints-corrupted_2"] == 1.0
    assert hard.distractor_ids == {"degraded/csv-cleaner_steps-removed_1", "degraded/image-resizer_constraints-corrupted_2"}
    assert not easy.distractor_ids and len(hard.skills) == len(easy.skills) + 2
    pdf = {s.id: s for s in easy.skills}["gt/pdf-reader"]
    assert pdf.description == "Read PDF files" and "desc" not in pdf.extra  # "desc" read as the description
    assert {s.id: s for s in easy.skills}["gt/csv-cleaner"].extra == {"source_repo": "fixture"}


def test_manifest_counts_are_checked(core):
    part = core / "easy" / "part-00001.jsonl.gz"
    lines = gzip.decompress(part.read_bytes()).splitlines(keepends=True)
    part.write_bytes(gzip.compress(b"".join(lines[:-1])))
    with pytest.raises(DataError, match=r"part-00001.jsonl.gz: holds \d+ records but .*manifest.json lists \d+"):
        _load(core, "easy")
    part.unlink()
    with pytest.raises(DataError, match=r"part-00001.jsonl.gz: missing: .*manifest.json lists it"):
        _load(core, "easy")


def test_unlisted_shard_and_bad_records_are_named(core):
    extra = core / "hard" / "part-00009.jsonl.gz"
    extra.write_bytes(gzip.compress(b'{"skill_id": "x", "name": "x"}\n'))
    with pytest.raises(DataError, match=r"part-00009.jsonl.gz: shard not listed in .*manifest.json under 'hard'"):
        _load(core, "hard")
    part = core / "easy" / "part-00000.jsonl.gz"
    lines = gzip.decompress(part.read_bytes()).splitlines(keepends=True)
    part.write_bytes(gzip.compress(b"".join(lines[:1]) + b'{"name": "no id"}\n' + b"".join(lines[2:])))
    with pytest.raises(DataError, match=r"part-00000.jsonl.gz:2: field 'skill_id': missing"):
        _load(core, "easy")


def test_repeated_task_id_and_missing_relevance(core):
    tasks = (core / "tasks.jsonl").read_text().splitlines()
    (core / "tasks.jsonl").write_text("\n".join(tasks + [tasks[0]]) + "\n")
    with pytest.raises(DataError, match=r"tasks.jsonl:5: field 'id': duplicate query id 't-csv'"):
        _load(core, "easy")
    (core / "tasks.jsonl").write_text("\n".join(tasks + ['{"task_id": "t-new", "instruction_text": "x"}']) + "\n")
    with pytest.raises(DataError, match=r"relevance.json:t-new: no relevance entry for this task"):
        _load(core, "easy")


def test_r3_release_and_hard_tier_refused(tmp_path):
    root = release_fixtures.r3_skill(tmp_path / "r3")
    ds = load_source({"source": "r3_skill", "root": str(root)}, "easy", False)
    assert [q.id for q in ds.queries] == ["0", "1", "2", "3"] and ds.queries[2].tags == {"lang": "zh-en", "k": "1"}
    assert ds.skills[0].extra["text"] == "csv-cleaner | Clean CSV files | " + release_fixtures.TOPICS[0][2]
    with pytest.raises(DataError, match="single test pool"):
        load_source({"source": "r3_skill", "root": str(root)}, "hard", True)


def test_download_lands_once_and_offline_says_what_to_do(tmp_path, core, monkeypatch):
    calls = []

    def fake_snapshot(dest, revision):  # the test's stand-in for huggingface_hub.snapshot_download
        calls.append(dest)
        shutil.copytree(core, dest, dirs_exist_ok=True)

    monkeypatch.setitem(download_module.RELEASES, "skillrouter_core",
                        download_module.RELEASES["skillrouter_core"].__class__(
                            "skillrouter_core", "skillrouter-eval-core", fake_snapshot,
                            download_module.RELEASES["skillrouter_core"].manual))
    first = ensure_release("skillrouter_core", tmp_path / "data")
    again = ensure_release("skillrouter_core", tmp_path / "data")
    assert first == again and len(calls) == 1 and not list((tmp_path / "data").glob(".tmp-*"))
    assert len(_load(first, "easy").queries) == 2

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(download_module.RELEASES, "skillrouter_core", download_module.Release(
        "skillrouter_core", "skillrouter-eval-core", download_module.fetch_skillrouter_core,
        download_module.RELEASES["skillrouter_core"].manual))
    with pytest.raises(DataError, match=r"field 'data.root': not set, and skillrouter_core could not be downloaded .*"
                                        r"python -m skillrouter.data.download skillrouter_core --dest DIR"):
        ensure_release("skillrouter_core", tmp_path / "offline")
    assert not (tmp_path / "offline" / "skillrouter-eval-core").exists()


def test_r3_predictions_match_by_query_text(tmp_path):
    root = release_fixtures.r3_skill(tmp_path / "r3")
    ds = load_source({"source": "r3_skill", "root": str(root)}, "easy", False)
    path = tmp_path / "r3_out.jsonl"
    path.write_text("".join(json.dumps({"query": q.text, "top_k": [{"id": "skill-00000", "score": 0.5}]}) + "\n"
                            for q in reversed(ds.queries)) + json.dumps({"query": "unknown", "top_k": []}) + "\n")
    predicted, unmatched = read_external(path, ds.queries)
    assert set(predicted) == {"0", "1", "2", "3"} and unmatched == 1


def _score(tmp_path, predictions, *overrides):
    return subprocess.run([sys.executable, "-m", "skillrouter.score", f"predictions={predictions}", *overrides,
                           f"cache_dir={tmp_path / 'cache'}"], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.slow
def test_done_when_grid_on_the_release_layout_and_scoring_predictions(tmp_path, core):
    """`launch.py -m data=skillrouter_core tier=easy,hard encoder=bm25 eval=skillrouter`: both tiers
    score their tasks, Hard's graded nDCG counts the degraded variant, and each cell's release-format
    predictions.json scores to the same numbers through skillrouter.score."""
    proc = launch(tmp_path, "data=skillrouter_core", f"data.root={core}", "tier=easy,hard", "encoder=bm25",
                  "eval=skillrouter")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {json.loads(f.read_text())["choices"]["tier"]: f.parent for f in (tmp_path / "grid").glob("*/metrics.json")}
    for tier, run in runs.items():
        m = json.loads((run / "metrics.json").read_text())
        assert m["n_queries"] == 2 and m["counts"]["graded"] == 2 and set(m["metrics"]) >= {"ndcg@1", "p@3", "fc@5"}
        assert set(json.loads((run / "predictions.json").read_text())) == {"t-csv", "t-media"}
        scored = _score(tmp_path, run / "predictions.json", "data=skillrouter_core", f"data.root={core}", f"tier={tier}",
                        "eval=skillrouter", f"hydra.run.dir={tmp_path / ('scored-' + tier)}")
        assert scored.returncode == 0, scored.stderr[-2000:]
        assert json.loads((tmp_path / f"scored-{tier}" / "metrics.json").read_text())["metrics"] == m["metrics"]
    ranked = json.loads((runs["hard"] / "predictions.json").read_text())["t-csv"]
    gains = {"gt/csv-cleaner": 3.0, "degraded/csv-cleaner_steps-removed_1": 1.0}
    assert "degraded/csv-cleaner_steps-removed_1" in ranked[:10]
    dcg = sum(gains.get(s, 0) / math.log2(r + 2) for r, s in enumerate(ranked[:10]))
    expected = dcg / (3 + 1 / math.log2(3))
    assert json.loads((runs["hard"] / "per_query.json").read_text())["t-csv"]["ndcg@10"] == pytest.approx(expected)


@pytest.mark.slow
def test_r3_format_grid_with_a_breakdown_and_r3_predictions(tmp_path):
    root = release_fixtures.r3_skill(tmp_path / "r3")
    proc = launch(tmp_path, "data=r3_skill", f"data.root={root}", "encoder=bm25", "eval=r3", "eval.breakdown=[lang]",
                  multirun=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["counts"] == {"all": 4, "single": 2, "multi": 2, "lang=en-en": 2, "lang=zh-en": 2, "graded": 0}
    assert {"lang=zh-en/ndcg@15", "multi/set_compat", "comp@5"} <= set(m["metrics"])
    rankings = [json.loads(line) for line in (tmp_path / "run" / "rankings.jsonl").read_text().splitlines()]
    queries = {str(i): json.loads(line)["query"] for i, line in enumerate((root / "data" / "test.jsonl").read_text().splitlines())}
    r3_out = tmp_path / "r3_predictions.jsonl"
    r3_out.write_text("".join(json.dumps({"query": queries[r["qid"]], "top_k": [{"id": i, "score": s} for i, s in r["ranked"]]}) + "\n"
                              for r in rankings))
    scored = _score(tmp_path, r3_out, "data=r3_skill", f"data.root={root}", "eval=r3", "eval.breakdown=[lang]",
                    f"hydra.run.dir={tmp_path / 'scored'}")
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert json.loads((tmp_path / "scored" / "metrics.json").read_text())["metrics"] == m["metrics"]

"""Subprocess runs of launch.py on the built-in data: the grid contract, failures, cache reuse."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skillrouter.eval.rescore import mismatches, rescore
from skillrouter.rankings import read_rankings

from .conftest import ROOT, write_jsonl


def launch(tmp_path: Path, *overrides: str, multirun: bool = True) -> subprocess.CompletedProcess:
    args = [sys.executable, str(ROOT / "launch.py")] + (["-m"] if multirun else []) + [
        f"hydra.sweep.dir={tmp_path / 'grid'}", f"hydra.run.dir={tmp_path / 'run'}",
        f"cache_dir={tmp_path / 'cache'}", "progress=false", *overrides]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900)


def cells(sweep: Path) -> dict[tuple, dict]:
    out = {}
    for f in sorted(sweep.glob("*/metrics.json")):
        m = json.loads(f.read_text())
        out[(m["choices"]["encoder"], m["choices"]["fields"])] = {**m, "dir": f.parent}
    return out


@pytest.mark.slow
def test_four_cell_grid_body_beats_nd_and_rescore_matches(tmp_path):
    proc = launch(tmp_path, "encoder=bm25,minilm", "fields=nd,all", "hydra.launcher.workers=2")  # stages side by side
    assert proc.returncode == 0, proc.stderr[-3000:]
    grid = cells(tmp_path / "grid")
    assert set(grid) == {(e, f) for e in ("bm25", "minilm") for f in ("nd", "all")}
    for (enc, _), m in grid.items():
        assert m["status"] == "completed" and m["n_queries"] == m["counts"]["all"] > 0
        assert {"hit@1", "mrr@10", "r@10", "r@20", "r@50", "fc@10", "ndcg@10", "comp@10", "set_compat",
                "single/hit@1", "multi/fc@10"} <= set(m["metrics"])
        lines = (m["dir"] / "rankings.jsonl").read_text().splitlines()
        assert len(lines) == m["n_queries"] and len(json.loads(lines[0])["ranked"]) == 50
        assert mismatches(*rescore(m["dir"])) == []
        examples = json.loads((m["dir"] / "rendered_examples.json").read_text())
        assert examples["skill"]["encoder"] and examples["query"]["encoder"]
    for enc in ("bm25", "minilm"):
        assert grid[(enc, "all")]["metrics"]["hit@1"] > grid[(enc, "nd")]["metrics"]["hit@1"]
    assert "4 cells: 4 completed" in proc.stdout


@pytest.mark.slow
def test_rerun_reuses_every_stage(tmp_path):
    args = ("encoder=bm25", "data=tiny")
    assert launch(tmp_path, *args).returncode == 0
    proc = launch(tmp_path, *args, "hydra.sweep.dir=" + str(tmp_path / "again"))
    m = json.loads(next((tmp_path / "again").glob("*/metrics.json")).read_text())
    cached = {name: s["cached"] for name, s in m["stages"].items() if s["key"] != "-"}
    assert cached == {"builtin_data": True, "load_data": True, "retrieve": True}
    assert "stages reused from cache: 3" in proc.stdout


def test_data_error_in_a_single_run_is_one_clear_line(tmp_path):
    bad = write_jsonl(tmp_path / "pool.jsonl", [{"id": "a", "name": "x"}, {"id": "a", "name": "y"}])
    queries = write_jsonl(tmp_path / "q.jsonl", [{"id": "q", "query": "x", "gt": ["a"]}])
    proc = launch(tmp_path, "data=jsonl", f"data.pool={bad}", f"data.queries={queries}", "encoder=bm25", multirun=False)
    assert proc.returncode == 2
    assert f"data error: {bad}:2: field 'id': duplicate skill id 'a'" in proc.stderr
    assert "Traceback" not in proc.stderr
    status = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert status["status"] == "failed" and "duplicate skill id" in status["error"]


def test_a_failed_cell_does_not_stop_the_grid(tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", [{"id": "a", "name": "csv", "body": "rows"}, {"id": "b", "name": "pdf"}])
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "a"}])
    queries = write_jsonl(tmp_path / "q.jsonl", [{"id": "q", "query": "csv rows", "gt": ["a"]}])
    proc = launch(tmp_path, "data=jsonl", f"data.pool={bad},{good}", f"data.queries={queries}", "encoder=bm25")
    assert proc.returncode == 1
    statuses = sorted(json.loads(f.read_text())["status"] for f in (tmp_path / "grid").glob("*/metrics.json"))
    assert statuses == ["completed", "failed"]
    assert "2 cells: 1 completed, 1 failed" in proc.stdout and "field 'name': missing" in proc.stdout
    failed_line = next(line for line in proc.stdout.splitlines() if "[   failed]" in line)
    shared_line = next(line for line in proc.stdout.splitlines() if line.startswith("every cell: "))
    assert f"data.pool={bad}" in failed_line and "data=jsonl" in shared_line and "data=jsonl" not in failed_line


def test_provenance_records_git_packages_seed(tmp_path):
    assert launch(tmp_path, "encoder=bm25", "data=tiny", "seed=3", multirun=False).returncode == 0
    prov = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert prov["seed"] == 3 and prov["packages"]["torch"] and prov["config"]["encoder"]["name"] == "bm25"
    assert "git_commit" in prov and "git_dirty" in prov


@pytest.mark.slow
def test_easy_and_hard_cells_share_one_trained_reranker(tmp_path):
    proc = launch(tmp_path, "data=tiny", "encoder=bm25", "reranker=trained", "tier=easy,hard",
                  "reranker.list_size=4", "reranker.train.batch_size=8", "reranker.train.epochs=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [json.loads(f.read_text()) for f in (tmp_path / "grid").glob("*/metrics.json")]
    assert sorted(r["choices"]["tier"] for r in runs) == ["easy", "hard"]
    assert len({r["stages"]["train_reranker"]["key"] for r in runs}) == 1
    assert sorted(r["stages"]["train_reranker"]["cached"] for r in runs) == [False, True]


def _plan(sweep: Path) -> dict:
    return json.loads((sweep / "plan.json").read_text())


def _cache_entries(cache: Path) -> set[str]:
    return {f"{m.parent.parent.name}/{m.parent.name}" for m in cache.glob("*/*/manifest.json")}


def test_plan_lists_exactly_what_a_cold_grid_builds_and_nothing_when_warm(tmp_path):
    grid = ("encoder=bm25,minilm", "data=tiny")
    planned = launch(tmp_path, *grid, "plan=true", "hydra.sweep.dir=" + str(tmp_path / "planned"))
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert "nothing was built or submitted" in planned.stdout and "embed_pool" in planned.stdout
    assert not (tmp_path / "cache").exists() and not list((tmp_path / "planned").glob("*/metrics.json"))
    plan = _plan(tmp_path / "planned")
    to_build = {f"{s['stage']}/{s['key']}" for s in plan["stages"] if s["state"] == "build"}
    assert plan["totals"]["gpu_to_build"] == 2 and plan["totals"]["reused"] == 0
    assert {s["resource"] for s in plan["stages"] if s["stage"] == "retrieve"} == {"cpu", "gpu"}  # BM25 never on a GPU
    assert launch(tmp_path, *grid).returncode == 0
    assert _cache_entries(tmp_path / "cache") == to_build
    warm = launch(tmp_path, *grid, "plan=true", "hydra.sweep.dir=" + str(tmp_path / "warm"))
    assert _plan(tmp_path / "warm")["totals"] | {"reused": 0} == {"gpu_to_build": 0, "cpu_to_build": 0, "llm_to_build": 0,
                                                                 "agent_to_build": 0, "reused": 0, "gpu_estimate_s": None,
                                                                 "cpu_estimate_s": None, "llm_estimate_s": None,
                                                                 "agent_estimate_s": None}
    assert "to build 0 gpu" in warm.stdout


def test_the_design_cards_command_as_typed_stops_in_one_line(tmp_path):
    proc = launch(tmp_path, "loss=listwise,pointwise", "topk=10,20,50")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("skillrouter: loss=listwise,pointwise and topk=10,20,50 change nothing in this grid")
    assert "its 6 cells are 1 computation" in line and "reranker=trained" in line
    assert not (tmp_path / "cache").exists()


def test_a_grid_run_anyway_names_what_changed_nothing_in_its_summary(tmp_path):
    proc = launch(tmp_path, "data=tiny", "encoder=bm25", "loss=listwise,pointwise", "allow_noop_overrides=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no effect: loss=listwise,pointwise: loss is read only by train_reranker (reranker=trained)" in proc.stdout
    assert "one computation: cells #0, #1" in proc.stdout and "2 cells: 2 completed" in proc.stdout
    assert len(list((tmp_path / "cache" / "retrieve").glob("*/manifest.json"))) == 1  # computed once


@pytest.mark.slow
def test_pair_scores_shared_across_topk_rank_as_scoring_each_k_alone(tmp_path):
    # fp32 (not auto's bf16 where the CPU has it): a deeper batch pads pairs otherwise, and bf16 rounds that apart
    common = ("data=tiny", "encoder=minilm", "reranker=minilm_ce", "reranker.backend=torch")
    assert launch(tmp_path, *common, "topk=2,4").returncode == 0
    grid = {json.loads(f.read_text())["choices"]["topk"]: f.parent for f in (tmp_path / "grid").glob("*/metrics.json")}
    built = [m for m in (tmp_path / "cache" / "score_pairs").glob("*/manifest.json")]
    assert len(built) == 1 and json.loads(built[0].read_text())["params"]["depth"] == 4
    for k in ("2", "4"):
        alone = tmp_path / f"alone{k}"
        proc = launch(tmp_path, *common, f"topk={k}", f"hydra.run.dir={alone}", f"cache_dir={tmp_path / ('c' + k)}",
                      multirun=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        shared, own = read_rankings(grid[k] / "rankings.jsonl"), read_rankings(alone / "rankings.jsonl")
        assert {q: r.ids for q, r in shared.items()} == {q: r.ids for q, r in own.items()}  # the same order...
        for q, r in shared.items():  # ...and the same scores, but for float noise of other padding in a deeper batch
            assert r.scores == pytest.approx(own[q].scores, abs=1e-5)


def test_a_failed_stage_fails_its_cells_naming_it_and_the_others_complete(tmp_path):
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"query": "x", "skill_id": "no-such-skill"}])
    proc = launch(tmp_path, "data=tiny", "encoder=bm25", "reranker=none,trained", f"data.train_pairs={pairs}")
    assert proc.returncode == 1
    runs = {json.loads(f.read_text())["choices"]["reranker"]: json.loads(f.read_text())
            for f in (tmp_path / "grid").glob("*/metrics.json")}
    assert runs["none"]["status"] == "completed" and runs["trained"]["status"] == "failed"
    assert runs["trained"]["failed_stage"]["stage"] == "train_pairs"
    assert runs["trained"]["error"].startswith("stage train_pairs ") and "training positives missing" in runs["trained"]["error"]
    status = subprocess.run([sys.executable, "-m", "skillrouter.pipeline.status", str(tmp_path / "grid")],
                            capture_output=True, text=True, cwd=ROOT)
    states = {m.group(2): m.group(1) for m in re.finditer(r"^\s+\[\s*(\w+)\] (\w+) ", status.stdout, re.MULTILINE)}
    assert states["train_pairs"] == "failed" and states["train_reranker"] == "cancelled"
    assert "1 completed, 1 failed" in status.stdout


def test_progress_off_a_terminal_is_one_line_per_interval(tmp_path, monkeypatch, caplog):
    import logging

    from skillrouter import progress as progress_module

    monkeypatch.setattr(progress_module, "on_terminal", lambda: False)
    monkeypatch.setenv(progress_module.INTERVAL_ENV, "0.05")
    now = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    with caplog.at_level(logging.INFO, logger="skillrouter.progress"), progress_module.stage_label("embed_pool 1a2b3c4d"):
        with progress_module.progress(40, "encode", "texts") as bar:
            for step in (0.01, 1, 1, 1):  # the first update comes before the interval: no line for it
                now[0] += step
                bar.update(10)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["embed_pool 1a2b3c4d: encode: 20/40 texts (19.8/s, ETA 1s)",
                     "embed_pool 1a2b3c4d: encode: 30/40 texts (14.9/s, ETA 1s)",
                     "embed_pool 1a2b3c4d: encode: done, 40/40 texts in 3s (13.3/s)"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="skillrouter.progress"), progress_module.progress(2, "train", "steps") as bar:
        now[0] += 258.8  # a step slower than 10 s reads as time per step, not as 0.0/s
        bar.update()
    assert [r.getMessage() for r in caplog.records] == ["train: 1/2 steps (4m19s each, ETA 4m19s)",
                                                       "train: done, 1/2 steps in 4m19s (4m19s each)"]
    assert isinstance(progress_module.progress(5, "x", enabled=False), progress_module._Silent)

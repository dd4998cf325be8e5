"""Rerank cascades and query condensation as grid cells: the steps' form, a cascade's stages shared with the cascade it
extends, a one-step cascade that is the one-stage cell, the condensed queries' stage, and the demo sweep end to end."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

from skillrouter.data import DataError
from skillrouter.pipeline import cascade
from skillrouter.pipeline.compose import compose_cell
from skillrouter.stages.graph import walk
from skillrouter.synth.condense import condense, keywords

from .conftest import ROOT


def _cell(tmp_path, *overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["data=tiny", f"cache_dir={tmp_path / 'cache'}", *overrides],
                      return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        return compose_cell(cfg)


def test_steps_are_preset_at_depth_each_no_deeper_than_the_one_before():
    assert cascade.steps(["minilm_ce@100", " trained @ 20", "llm_judge@1"]) == [
        cascade.Step("minilm_ce", 100), cascade.Step("trained", 20), cascade.Step("llm_judge", 1)]
    assert cascade.steps("minilm_ce@10") == [cascade.Step("minilm_ce", 10)]
    for bad, why in ((["minilm_ce"], "PRESET@DEPTH"), (["a@10", "b@20"], "at most"), ([], "at least one")):
        with pytest.raises(DataError, match=why):
            cascade.steps(bad)


def test_a_cascade_extending_another_shares_its_stages_and_a_one_step_one_is_the_one_stage_cell(tmp_path):
    two = _cell(tmp_path, "cascade=[minilm_ce@20,minilm_ce@10]")
    three = _cell(tmp_path, "cascade=[minilm_ce@20,minilm_ce@10,llm_judge@3]", "llm=stub")
    for name in ("score_pairs@1", "rerank@1", "score_pairs@2", "rerank@2"):
        assert three.named[name].key == two.named[name].key, name
    judge = three.named["rerank@3"]
    assert judge.inputs["retrieval"].key == two.named["rerank@2"].key and judge.params["k"] == 3
    assert judge.params["reranker"]["model"] == "stub" and judge.options["llm_server"]  # the llm group's own server
    assert [(p, d) for p, d, _, _ in three.cascade] == [("minilm_ce", 20), ("minilm_ce", 10), ("llm_judge", 3)]
    assert [(a, b) for _, _, a, b in three.cascade] == [("retrieve", "rerank@1"), ("rerank@1", "rerank@2"),
                                                        ("rerank@2", "rerank@3")]
    one_step = _cell(tmp_path, "cascade=[minilm_ce@20]")
    one_stage = _cell(tmp_path, "reranker=minilm_ce", "topk=20")
    assert one_step.named["rerank@1"].key == one_stage.named["rerank"].key  # the same computation, the same entries
    assert one_step.sink.inputs["rankings"].key == one_stage.sink.inputs["rankings"].key


def test_fusion_applies_to_the_last_scoring_step_and_its_dev_weight_to_the_steps_before_on_dev(tmp_path):
    cell = _cell(tmp_path, "cascade=[minilm_ce@20,minilm_ce@10]", "fusion=interpolate", "fusion.alpha=dev")
    assert "fusion" not in cell.named["rerank@1"].params and cell.named["rerank@2"].params["fusion"]["alpha"] == "dev"
    weight = cell.named["fusion_weight@2"]
    dev_input = weight.inputs["retrieval"]  # the dev queries as step 1 left them
    assert dev_input.kind == "rerank" and dev_input.inputs["retrieval"].key == cell.named["retrieve_dev"].key
    assert cell.named["retrieve"].key not in {s.key for s in walk([weight])}  # no test query is ranked for it
    assert weight.inputs["data"].kind == "dev_split"


def test_condensation_falls_back_to_the_raw_instruction_and_counts_it():
    long = ("Hello! Our team keeps a large excel workbook of invoices. Every Monday I need to deduplicate the "
            "worksheets so the pivot tables report correct totals, then mail the summary to finance.")
    head, = condense([long], "head", {"words": 5})
    assert head.text == "Hello! Our team keeps a" and head.fallback is None
    (kw,) = keywords([long], 6, 2)
    assert {"excel", "invoices", "pivot"} <= set(kw.split()) and "Hello!" not in kw  # key phrases kept, chatter dropped
    assert len(kw.split()) == len(set(w.lower() for w in kw.split())) and len(kw) < len(long)
    empty, = condense(["  "], "keywords", {"top": 6, "max_ngram": 2})
    assert empty.text == "  " and empty.fallback == "empty"

    class Failing:  # an LLM whose every request failed (LLMClient.ask gives None)
        def ask(self, request):
            return None

        def map(self, fn, items):
            return [fn(i) for i in items]

    failed, = condense([long], "llm", {"max_words": 20}, Failing(), "$task $max_words")
    assert failed.text == long and failed.fallback == "failed"
    with pytest.raises(ValueError, match="query.method"):
        condense([long], "summary", {})


def test_condensed_queries_are_a_stage_the_rerank_steps_read(tmp_path):
    raw = _cell(tmp_path, "reranker=minilm_ce")
    kw = _cell(tmp_path, "reranker=minilm_ce", "query=keywords")
    both = _cell(tmp_path, "reranker=minilm_ce", "query=keywords", "query.apply=both")
    assert "condense" not in raw.named
    assert kw.named["score_pairs"].inputs["data"].kind == "condense"  # query.apply=rerank, the default
    assert kw.named["retrieve"].key == raw.named["retrieve"].key  # retrieval read the raw query
    assert both.named["retrieve"].inputs["data"].kind == "condense"
    assert kw.sink.inputs["data"].kind == "load_data"  # metrics and strata read the benchmark's own queries
    with pytest.raises(DataError, match="query.apply"):  # a misspelt role is an error, not raw queries everywhere
        _cell(tmp_path, "reranker=minilm_ce", "query=keywords", "query.apply=reranker")


@pytest.mark.slow
def test_the_skillflow_demo_reuses_the_shorter_cascade_and_reports_both_tables(tmp_path):
    """The demo sweep on the tiny data: the three-step cells build only their LLM step, the condensed queries lie beside
    the rankings, and the report writes the cascade and condensation tables."""
    sweep, cache = tmp_path / "grid", tmp_path / "cache"
    args = [sys.executable, str(ROOT / "launch.py"), "-m", "-cd", "sweeps", "-cn", "skillflow_demo", "data=tiny",
            f"hydra.sweep.dir={sweep}", f"cache_dir={cache}", "progress=false", "reranker.train.epochs=1"]
    planned = subprocess.run([*args, "plan=true"], cwd=ROOT, capture_output=True, text=True)
    assert planned.returncode == 0, planned.stderr[-3000:]
    plan = json.loads((sweep / "plan.json").read_text())
    llm_steps = [s for s in plan["stages"] if s["stage"] == "rerank" and s["resource"] == "llm"]
    assert sorted(s["cells"] for s in llm_steps) == [[1], [3]]  # each 3-step cell adds its LLM pick, nothing else
    assert all(len(s["cells"]) == 2 for s in plan["stages"] if s["stage"] == "score_pairs")  # shared with the 2-step cell
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = [json.loads((sweep / str(i) / "metrics.json").read_text()) for i in range(4)]
    assert [len(c["cascade"]) for c in cells] == [2, 3, 2, 3]
    for two, three in ((cells[0], cells[1]), (cells[2], cells[3])):
        for name in ("score_pairs@1", "rerank@1", "score_pairs@2", "rerank@2"):
            assert three["stages"][name]["key"] == two["stages"][name]["key"]
        assert three["cascade"][:2] == two["cascade"] and 0 <= three["cascade"][2]["gt_recall"] <= 1
    assert cells[2]["query"]["method"] == "keywords" and "query" not in cells[0]
    condensed = [json.loads(line) for line in (sweep / "2" / "condensed_queries.jsonl").read_text().splitlines()]
    assert condensed and all(set(r) == {"qid", "raw", "query", "fallback"} for r in condensed)
    assert any(r["query"] != r["raw"] for r in condensed)
    report = subprocess.run([sys.executable, "-m", "skillrouter.report", "--runs", str(sweep), "--data", "tiny", "--out",
                             str(tmp_path / "reports")], cwd=ROOT, capture_output=True, text=True)
    assert report.returncode == 0, report.stderr[-2000:]
    table = (tmp_path / "reports" / "cascade.md").read_text()
    assert "llm_judge" in table and "GT recall at depth" in table
    condensation = (tmp_path / "reports" / "condensation.md").read_text()
    assert "+ query=keywords" in condensation and "Q4 hit@1" in condensation

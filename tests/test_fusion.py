"""Fusion of the first stage's and the reranker's scores (``fusion`` group): the two ends of the interpolation, RRF
and z-normalisation by hand, the dev-chosen weight's independence from the test split, and an alpha sweep that
scores its pairs once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

from skillrouter.pipeline.compose import compose_cell
from skillrouter.rankings import Ranking
from skillrouter.rerank.fusion import Fusion, fuse, ranks, znorm
from skillrouter.stages.graph import walk
from skillrouter.stages.reranking import fused_rankings
from tests.conftest import write_jsonl

ROOT = Path(__file__).resolve().parents[1]


def _random_case(seed: int) -> tuple[list[Ranking], dict[str, dict[str, float]]]:
    rng = np.random.default_rng(seed)
    rankings, scored = [], {}
    for q in range(5):
        ids = [f"s{j}" for j in rng.permutation(12)]
        first = sorted(rng.normal(size=12).tolist(), reverse=True)
        rankings.append(Ranking(f"q{q}", ids, first))
        scored[f"q{q}"] = {i: float(v) for i, v in zip(ids, rng.normal(size=12))}
    return rankings, scored


@pytest.mark.parametrize("seed", [0, 1])
def test_alpha_zero_is_the_first_stage_and_alpha_one_the_reranker(seed):
    rankings, scored = _random_case(seed)
    first = fused_rankings(rankings, scored, 8, Fusion("interpolate", 0.0))
    assert [r.ids for r in first] == [r.ids for r in rankings]
    alone = fused_rankings(rankings, scored, 8, Fusion("none"))
    assert [r.ids for r in fused_rankings(rankings, scored, 8, Fusion("interpolate", 1.0))] == [r.ids for r in alone]
    assert all(r.ids[8:] == r0.ids[8:] for r, r0 in zip(alone, rankings))  # the tail keeps the first stage's order


def test_interpolation_and_rrf_by_hand():
    first, reranker = [3.0, 2.0, 1.0], [0.0, 3.0, 0.0]
    # z(first) = (1.2247, 0, -1.2247); z(reranker) = (-0.7071, 1.4142, -0.7071) (population s.d.)
    assert znorm(first) == pytest.approx([1.224745, 0.0, -1.224745], abs=1e-6)
    assert fuse(first, reranker, Fusion("interpolate", 0.5)) == pytest.approx([0.258819, 0.707107, -0.965926], abs=1e-6)
    assert znorm([2.0, 2.0]).tolist() == [0.0, 0.0]  # a constant head scores 0: the first stage's order decides
    # RRF, k = 60: ranks in the first stage (1, 2, 3), in the reranker's (2, 1, 3: the tie at 0 keeps position order)
    assert ranks(reranker).tolist() == [2.0, 1.0, 3.0]
    assert fuse(first, reranker, Fusion("rrf", k=60)) == pytest.approx(
        [1 / 61 + 1 / 62, 1 / 62 + 1 / 61, 1 / 63 + 1 / 63])
    ranking = Ranking("q", ["a", "b", "c", "d"], [3.0, 2.0, 1.0, 0.5])
    (fused,) = fused_rankings([ranking], {"q": {"a": 0.0, "b": 3.0, "c": 0.0}}, 3, Fusion("rrf", k=60))
    assert fused.ids == ["a", "b", "c", "d"]  # a and b tie at 1/61 + 1/62: the first stage's order breaks it
    (fused,) = fused_rankings([ranking], {"q": {"a": 0.0, "b": 3.0, "c": 0.0}}, 3, Fusion("rrf", k=0))
    assert fused.ids == ["a", "b", "c", "d"] and fused.scores[:3] == pytest.approx([1.5, 1.5, 2 / 3])


def _graph(tmp_path: Path, queries: list[dict], overrides: list[str]):
    pool = write_jsonl(tmp_path / "pool.jsonl", [
        {"id": f"s{i}", "name": f"skill-{i}", "description": f"does thing {i}", "body": f"step {i}"} for i in range(8)])
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"query": f"train {i}", "skill_id": f"s{i % 8}"} for i in range(20)])
    bench = write_jsonl(tmp_path / f"queries-{len(queries)}.jsonl", queries)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra.runtime.cwd={tmp_path}", "data=jsonl", f"data.pool={pool}",
                                           f"data.queries={bench}", f"data.train_pairs={pairs}", f"cache_dir={tmp_path}/c",
                                           "reranker=trained", "fusion=interpolate", *overrides], return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        return compose_cell(cfg)


def test_a_dev_chosen_weight_never_reads_the_test_split(tmp_path):
    """The weight is chosen on the dev split's queries, retrieved and scored by stages of their own: no stage that
    retrieves, scores or reranks the test queries is upstream of it (the test split's labels reach training only as
    the filter that keeps benchmark-labelled skills out of the training positives)."""
    one = _graph(tmp_path, [{"id": "t1", "query": "thing 1", "gt": ["s1"]}], ["fusion.alpha=dev"])
    weight = one.named["fusion_weight"]
    upstream = {s.key for s in walk([weight])}
    test_side = [one.named[n] for n in ("retrieve", "score_pairs", "rerank")]  # the pool embedding is the skills', shared
    assert not {s.key for s in test_side} & upstream
    assert weight.inputs["data"].key == one.named["dev_split"].key  # the queries it is chosen on: the dev split's
    assert weight.inputs["retrieval"].key == one.named["retrieve_dev"].key != one.named["retrieve"].key
    assert weight.inputs["scores"].key == one.named["score_pairs_dev"].key != one.named["score_pairs"].key
    fixed = _graph(tmp_path, [{"id": "t1", "query": "thing 1", "gt": ["s1"]}], ["fusion.alpha=0.3"])
    assert "fusion_weight" not in fixed.named  # a given weight is chosen on nothing
    plain = _graph(tmp_path, [{"id": "t1", "query": "thing 1", "gt": ["s1"]}],
                   ["fusion.alpha=0.3", "reranker.train.early_stopping=null"])
    assert "dev_split" not in plain.named  # nor needs a dev split, once no training stops early on one
    # the dev split is held out of every training of an alpha=dev cell (its weight is chosen on unseen queries)
    assert one.named["dev_split"].key in {s.key for s in walk([one.named["train_reranker"]])}


def test_an_alpha_sweep_scores_its_pairs_once(tmp_path):
    sweep = tmp_path / "grid"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", "data=tiny", "reranker=minilm_ce",
                           "fusion=interpolate", "fusion.alpha=0,0.5,1", f"hydra.sweep.dir={sweep}",
                           f"cache_dir={tmp_path / 'c'}", "progress=false"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = [json.loads((sweep / str(i) / "metrics.json").read_text()) for i in range(3)]
    assert len(list((tmp_path / "c" / "score_pairs").iterdir())) == 1  # one scoring of the pairs...
    assert len({c["stages"]["rerank"]["key"] for c in cells}) == 3  # ...three cheap fusions of it
    assert [c["fusion"] for c in cells] == [{"method": "interpolate", "alpha": a, "chosen_on": "config"} for a in (0.0, 0.5, 1.0)]
    plan = json.loads((sweep / "plan.json").read_text())
    assert sum(s["stage"] == "score_pairs" for s in plan["stages"]) == 1
    assert all(s["cheap"] for s in plan["stages"] if s["stage"] == "rerank")


def test_the_dev_weight_is_the_smallest_within_one_standard_error_of_the_best():
    from skillrouter.rerank.fusion import one_standard_error

    # four dev queries; 0.5 is best (mean 0.75), its scores' standard error is 0.25: 0.0 (mean 0.5) is within it
    per_alpha = {0.0: [1, 0, 1, 0], 0.5: [1, 1, 1, 0], 1.0: [0, 0, 1, 0]}
    assert one_standard_error(per_alpha) == (0.0, 0.5, pytest.approx(0.25))
    # a clear win moves it: 0.5 scores every query, its standard error is 0, and nothing below it is as good
    assert one_standard_error({0.0: [0, 0, 1, 0], 0.5: [1, 1, 1, 1], 1.0: [1, 1, 1, 1]}) == (0.5, 0.5, 0.0)

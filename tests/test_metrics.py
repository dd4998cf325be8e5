"""Every metric against a hand computation, the edge cases, and agreement with ir-measures."""
from __future__ import annotations

import math

import ir_measures
import pytest
from ir_measures import Qrel, ScoredDoc

from skillrouter.data.types import Query, Skill
from skillrouter.eval.metrics import (aggregate, completeness_at, full_coverage_at, hit_at_1, mrr_at, ndcg_at,
                                      parse_metrics, per_query, per_query_rows, recall_at, recall_curve, set_compat)

from .conftest import ROOT

RANKED = ["x", "a", "y", "b", "z"]


def test_hit_at_1():
    assert hit_at_1(RANKED, {"a"}) == 0.0
    assert hit_at_1(["a", "x"], {"a", "b"}) == 1.0
    assert hit_at_1([], {"a"}) == 0.0


def test_mrr_at_10_uses_first_gt_and_cutoff():
    assert mrr_at(RANKED, {"a", "b"}) == 0.5
    assert mrr_at(["n"] * 10 + ["a"], {"a"}) == 0.0  # rank 11 is beyond the cut


def test_recall_at_k():
    assert recall_at(RANKED, {"a", "b", "q"}, 2) == pytest.approx(1 / 3)
    assert recall_at(RANKED, {"a", "b", "q"}, 10) == pytest.approx(2 / 3)


def test_full_coverage_at_10():
    assert full_coverage_at(RANKED, {"a", "b"}) == 1.0
    assert full_coverage_at(RANKED, {"a", "q"}) == 0.0


def test_completeness_divides_by_min_gt_k():
    assert completeness_at(RANKED, {"a", "b", "q"}, 10) == pytest.approx(2 / 3)
    assert completeness_at(["a", "b"], {"a", "b", "c"}, 2) == 1.0  # min(|GT|=3, K=2) = 2


def test_set_compat_needs_all_gt_in_top_gt_size():
    assert set_compat(["a", "b", "x"], {"a", "b"}) == 1.0
    assert set_compat(["a", "x", "b"], {"a", "b"}) == 0.0


def test_ndcg_binary_and_graded_by_hand():
    # binary: GT {a, b} at ranks 2 and 4
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at(RANKED, {"a": 1, "b": 1}) == pytest.approx(dcg / idcg)
    # graded: a=3 at rank 2, b=1 at rank 4; ideal puts 3 first then 1
    dcg = 3 / math.log2(3) + 1 / math.log2(5)
    idcg = 3 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at(RANKED, {"a": 3, "b": 1}) == pytest.approx(dcg / idcg)
    assert ndcg_at(RANKED, {}) == 0.0


def test_per_query_uses_grades_when_present():
    q = Query("q", "t", gt=("a",), grades={"a": 3.0, "y": 1.0})
    row = per_query(RANKED, q)
    expected = (3 / math.log2(3) + 1 / math.log2(4)) / (3 / math.log2(2) + 1 / math.log2(3))
    assert row["ndcg@10"] == pytest.approx(expected)
    assert "set_compat" not in row  # single-GT queries have no Set-Compat


def test_duplicates_in_a_ranking_count_once():
    q = Query("q", "t", gt=("a", "b"))
    assert per_query(["a", "a", "b"], q)["set_compat"] == 1.0


def test_aggregate_subsets_counts_and_missing_rankings():
    qs = [Query("s1", "t", gt=("a",)), Query("s2", "t", gt=("b",)), Query("m1", "t", gt=("a", "b"))]
    metrics, counts = aggregate({"s1": ["a"], "m1": ["b", "a"]}, qs)  # s2 has no ranking: a miss
    assert counts == {"all": 3, "single": 2, "multi": 1, "graded": 0}
    assert metrics["hit@1"] == pytest.approx(2 / 3)
    assert metrics["single/hit@1"] == pytest.approx(0.5)
    assert metrics["multi/fc@10"] == 1.0
    assert metrics["set_compat"] == 1.0 and metrics["multi/set_compat"] == 1.0
    assert "single/set_compat" not in metrics


def test_empty_subset_reports_none_not_crash():
    metrics, counts = aggregate({"s1": ["a"]}, [Query("s1", "t", gt=("a",))])
    assert counts["multi"] == 0
    assert metrics["multi/hit@1"] is None and metrics["set_compat"] is None


def test_recall_curve_is_monotone_and_ends_at_r50():
    qs = [Query("q", "t", gt=("a", "b"))]
    curve = recall_curve({"q": RANKED}, qs, max_k=5)
    assert curve == [0.0, 0.5, 0.5, 1.0, 1.0]


def test_agreement_with_ir_measures():
    """Our Hit@1, MRR@10, R@K and nDCG@10 equal ir-measures' Success@1, RR@10, R@K and nDCG@10."""
    queries = [
        Query("q1", "t", gt=("a",)),
        Query("q2", "t", gt=("b", "c"), grades={"b": 3.0, "c": 1.0}),
        Query("q3", "t", gt=("d",)),
        Query("q4", "t", gt=("e", "f", "g")),
    ]
    rankings = {"q1": ["x", "a", "y"], "q2": ["c", "z", "b"], "q3": ["d"], "q4": [f"n{i}" for i in range(12)] + ["e", "f"]}
    qrels = [Qrel(q.id, d, int(g)) for q in queries for d, g in (q.grades or {x: 1 for x in q.gt}).items()]
    run = [ScoredDoc(qid, d, float(100 - r)) for qid, ranked in rankings.items() for r, d in enumerate(ranked)]
    ours, _ = aggregate(rankings, queries)
    theirs = ir_measures.calc_aggregate([ir_measures.Success @ 1, ir_measures.RR @ 10, ir_measures.R @ 10,
                                         ir_measures.R @ 20, ir_measures.nDCG @ 10], qrels, run)
    assert ours["hit@1"] == pytest.approx(theirs[ir_measures.Success @ 1])
    assert ours["mrr@10"] == pytest.approx(theirs[ir_measures.RR @ 10])
    assert ours["r@10"] == pytest.approx(theirs[ir_measures.R @ 10])
    assert ours["r@20"] == pytest.approx(theirs[ir_measures.R @ 20])
    assert ours["ndcg@10"] == pytest.approx(theirs[ir_measures.nDCG @ 10])


def test_every_metric_family_at_any_cutoff_by_hand():
    from skillrouter.eval.metrics import parse_metrics
    q = Query("q", "t", gt=("a", "b", "c"))
    ranked = ["x", "a", "y", "b", "z", "w", "c"]
    names = ["hit@1", "hit@2", "mrr@1", "mrr@3", "r@4", "p@3", "p@5", "fc@4", "fc@7", "ndcg@3", "comp@2", "comp@5", "set_compat"]
    row = per_query(ranked, q, parse_metrics(names))
    assert row["hit@1"] == 0.0 and row["hit@2"] == 1.0
    assert row["mrr@1"] == 0.0 and row["mrr@3"] == 0.5
    assert row["r@4"] == pytest.approx(2 / 3)
    assert row["p@3"] == pytest.approx(1 / 3) and row["p@5"] == pytest.approx(2 / 5)
    assert row["fc@4"] == 0.0 and row["fc@7"] == 1.0
    # binary nDCG@3: one GT at rank 2; ideal fills min(3, |GT|) = 3 ranks
    assert row["ndcg@3"] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3) + 1 / math.log2(4)))
    assert row["comp@2"] == pytest.approx(1 / 2) and row["comp@5"] == pytest.approx(2 / 3)
    assert row["set_compat"] == 0.0


def test_map_at_k_by_hand_and_against_ir_measures():
    """map@K: precision at each GT hit within K, summed, over |GT| (trec_eval's map_cut, ir-measures' AP@K)."""
    from skillrouter.eval.metrics import parse_metrics
    q = Query("q", "t", gt=("a", "b", "c"))
    row = per_query(["x", "a", "y", "b", "z", "w", "c"], q, parse_metrics(["map@1", "map@5", "map@7"]))
    assert row["map@1"] == 0.0
    assert row["map@5"] == pytest.approx((1 / 2 + 2 / 4) / 3)  # denominator |GT| = 3, not min(|GT|, K)
    assert row["map@7"] == pytest.approx((1 / 2 + 2 / 4 + 3 / 7) / 3)
    queries = [q, Query("q2", "t", gt=("d",)), Query("q3", "t", gt=("e", "f"))]
    rankings = {"q": ["x", "a", "y", "b", "z", "w", "c"], "q2": ["d", "x"], "q3": [f"n{i}" for i in range(6)] + ["f"]}
    qrels = [Qrel(qq.id, d, 1) for qq in queries for d in qq.gt]
    run = [ScoredDoc(qid, d, float(100 - r)) for qid, ranked in rankings.items() for r, d in enumerate(ranked)]
    metrics = parse_metrics(["map@5", "map@10"])
    ours, _ = aggregate(rankings, queries, metrics)
    theirs = ir_measures.calc_aggregate([ir_measures.AP @ 5, ir_measures.AP @ 10], qrels, run)
    assert ours["map@5"] == pytest.approx(theirs[ir_measures.AP @ 5])
    assert ours["map@10"] == pytest.approx(theirs[ir_measures.AP @ 10])


def test_unknown_metric_names_are_refused():
    from skillrouter.eval.metrics import parse_metric
    for bad in ("hit@0", "recall@5", "ndcg", "fc@x"):
        with pytest.raises(ValueError, match="unknown metric"):
            parse_metric(bad)


def test_r3_ndcg_ideal_over_min_k_and_gt():
    """R3's reproduce.py: binary gains, IDCG over min(K, |GT|) ranks (here |GT| = 2 < K = 5)."""
    from skillrouter.eval.metrics import parse_metrics
    q = Query("q", "t", gt=("a", "b"))
    row = per_query(["a", "x", "y", "b", "z"], q, parse_metrics(["ndcg@5", "ndcg@1"]))
    assert row["ndcg@5"] == pytest.approx((1 + 1 / math.log2(5)) / (1 + 1 / math.log2(3)))
    assert row["ndcg@1"] == 1.0


def test_skillrouter_graded_ndcg_on_a_constructed_ranking():
    """SkillRouter's evaluator: gains = `relevance` restricted to the pool (GT 3, degraded variant 1);
    IDCG sorts all of them."""
    from skillrouter.eval.metrics import parse_metrics
    q = Query("t", "x", gt=("gt/a", "gt/b"), grades={"gt/a": 3.0, "gt/b": 3.0, "degraded/a_steps-removed_1": 1.0})
    ranked = ["degraded/a_steps-removed_1", "gt/a", "other", "gt/b"]
    row = per_query(ranked, q, parse_metrics(["ndcg@1", "ndcg@3", "ndcg@10", "hit@1", "p@3"]))
    idcg = lambda k: sum(g / math.log2(r + 2) for r, g in enumerate([3, 3, 1][:k]))  # noqa: E731
    assert row["ndcg@1"] == pytest.approx(1 / 3)
    assert row["ndcg@3"] == pytest.approx((1 + 3 / math.log2(3)) / idcg(3))
    assert row["ndcg@10"] == pytest.approx((1 + 3 / math.log2(3) + 3 / math.log2(5)) / idcg(10))
    assert row["hit@1"] == 0.0 and row["p@3"] == pytest.approx(1 / 3)


def test_breakdown_by_a_query_tag():
    from skillrouter.eval.metrics import parse_metrics
    qs = [Query("1", "t", gt=("a",), tags={"lang": "en"}), Query("2", "t", gt=("b",), tags={"lang": "zh"}),
          Query("3", "t", gt=("a", "b"), tags={"lang": "zh"}), Query("4", "t", gt=("a",))]
    metrics, counts = aggregate({"1": ["a"], "2": ["x"], "3": ["a", "b"], "4": ["a"]}, qs, parse_metrics(["hit@1", "set_compat"]),
                                breakdown=["lang"])
    assert counts["lang=en"] == 1 and counts["lang=zh"] == 2
    assert metrics["lang=en/hit@1"] == 1.0 and metrics["lang=zh/hit@1"] == 0.5
    assert metrics["lang=zh/set_compat"] == 1.0 and metrics["lang=en/set_compat"] is None


def _protocol(name: str):
    import yaml

    from skillrouter.eval.metrics import parse_metrics
    return parse_metrics(yaml.safe_load((ROOT / "conf" / "eval" / f"{name}.yaml").read_text())["metrics"])


def test_skillret_protocol_by_hand_and_as_its_trec_eval_computes_it():
    """eval=skillret: pytrec_eval's ndcg_cut / map_cut / recall / P at 5, 10, 15 (binary gains) and the release's
    Completeness@K (recall_K == 1), computed the way skillret/eval.py's trec_eval does, on the same run."""
    import pytrec_eval

    queries = [Query("q1", "t", gt=("a", "b")), Query("q2", "t", gt=("c",)), Query("q3", "t", gt=("d", "e", "f"))]
    rankings = {"q1": ["a", "x", "y", "b"] + [f"n{i}" for i in range(16)], "q2": [f"n{i}" for i in range(11)] + ["c"],
                "q3": ["d", "e"] + [f"n{i}" for i in range(13)] + ["f"]}
    ours, _ = aggregate(rankings, queries, _protocol("skillret"))
    by_hand = {"q1": {"ndcg@5": (1 + 1 / math.log2(5)) / (1 + 1 / math.log2(3)), "map@5": (1 + 2 / 4) / 2, "r@5": 1.0,
                      "p@5": 2 / 5, "fc@5": 1.0},
               "q2": {"ndcg@5": 0.0, "map@5": 0.0, "r@5": 0.0, "p@5": 0.0, "fc@5": 0.0, "ndcg@15": 1 / math.log2(13),
                      "map@15": 1 / 12, "fc@15": 1.0},
               "q3": {"r@15": 2 / 3, "fc@15": 0.0, "p@15": 2 / 15}}
    rows = per_query_rows(rankings, queries, _protocol("skillret"))
    for qid, expected in by_hand.items():
        assert rows[qid] == pytest.approx({**rows[qid], **expected})
    qrels = {q.id: dict.fromkeys(q.gt, 1) for q in queries}
    run = {qid: {d: float(len(r) - i) for i, d in enumerate(r)} for qid, r in rankings.items()}
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"map_cut.5,10,15", "ndcg_cut.5,10,15", "recall.5,10,15", "P.5,10,15"}
                                            ).evaluate(run)
    for k in (5, 10, 15):
        for family, measure in (("ndcg", "ndcg_cut"), ("map", "map_cut"), ("r", "recall"), ("p", "P")):
            assert ours[f"{family}@{k}"] == pytest.approx(sum(s[f"{measure}_{k}"] for s in scores.values()) / 3)
        assert ours[f"fc@{k}"] == pytest.approx(sum(s[f"recall_{k}"] == 1.0 for s in scores.values()) / 3)


def test_sra_bench_protocol_by_hand():
    """eval=sra_bench (sragents/retrieve/metrics.py): Recall@K = hits / |gold|, nDCG@K with binary gains and the
    ideal over min(|gold|, K), K = 1, 5, 10, 50."""
    q = Query("i1", "t", gt=("a", "b", "c"))
    ranked = ["x", "a"] + [f"n{i}" for i in range(7)] + ["b"] + [f"m{i}" for i in range(30)] + ["c"]
    row = per_query(ranked, q, _protocol("sra_bench"))
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert row == pytest.approx({"r@1": 0.0, "r@5": 1 / 3, "r@10": 2 / 3, "r@50": 1.0, "ndcg@1": 0.0,
                                 "ndcg@5": (1 / math.log2(3)) / idcg, "ndcg@10": (1 / math.log2(3) + 1 / math.log2(11)) / idcg,
                                 "ndcg@50": (1 / math.log2(3) + 1 / math.log2(11) + 1 / math.log2(42)) / idcg})


def test_derived_strata_edges_counts_and_means_by_hand():
    """Description words per skill: a 1, b 2, c 4, d 8. Per-query mean over GT in the pool: q1 1, q2 2,
    q3 (a, c) 2.5, q4 8, q5 (c, d) 6, q6 (a..d) 3.75; q7's GT is not in the pool (no quartile). Sorted
    1, 2, 2.5, 3.75, 6, 8: numpy's linear quartiles at positions 1.25, 2.5, 3.75 are 2 + .25 * .5 = 2.125,
    2.5 + .5 * 1.25 = 3.125 and 3.75 + .75 * 2.25 = 5.4375."""
    from skillrouter.eval.strata import derive

    skills = [Skill("a", "a", "one"), Skill("b", "b", "one two"), Skill("c", "c", "w x y z"),
              Skill("d", "d", "1 2 3 4 5 6 7 8")]
    gts = {"q1": ("a",), "q2": ("b",), "q3": ("a", "c"), "q4": ("d",), "q5": ("c", "d"), "q6": ("a", "b", "c", "d"),
           "q7": ("zz",)}
    queries = [Query(qid, qid, gt) for qid, gt in gts.items()]
    tagged, report = derive(queries, skills, ["gt_desc_words_quartile", "gt_count", "domain"])
    assert report["gt_desc_words_quartile"]["edges"] == pytest.approx([2.125, 3.125, 5.4375])
    quartile = {q.id: q.tags.get("gt_desc_words_quartile") for q in tagged}
    assert quartile == {"q1": "Q1", "q2": "Q1", "q3": "Q2", "q4": "Q4", "q5": "Q4", "q6": "Q3", "q7": None}
    assert report["gt_desc_words_quartile"]["counts"] == {"Q1": 2, "Q2": 1, "Q3": 1, "Q4": 2}
    assert {q.id: q.tags["gt_count"] for q in tagged} == {"q1": "1", "q2": "1", "q3": "2", "q4": "1", "q5": "2",
                                                          "q6": "4+", "q7": "1"}
    rankings = {"q1": ["a"], "q2": ["x"], "q3": ["c"], "q4": ["d"], "q5": ["x"], "q6": ["b"]}  # hits: q1 q3 q4 q6
    metrics, counts = aggregate(rankings, tagged, parse_metrics(["hit@1"]), ["gt_desc_words_quartile", "gt_count"])
    assert metrics["gt_desc_words_quartile=Q1/hit@1"] == 0.5 and metrics["gt_desc_words_quartile=Q4/hit@1"] == 0.5
    assert metrics["gt_desc_words_quartile=Q2/hit@1"] == metrics["gt_desc_words_quartile=Q3/hit@1"] == 1.0
    assert counts["gt_desc_words_quartile=Q4"] == 2
    assert metrics["gt_count=2/hit@1"] == 0.5 and metrics["gt_count=4+/hit@1"] == 1.0 and counts["gt_count=1"] == 4

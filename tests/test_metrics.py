"""Every metric against a hand computation, the edge cases, and agreement with ir-measures."""
from __future__ import annotations

import math

import ir_measures
import pytest
from ir_measures import Qrel, ScoredDoc

from skillrouter.data.types import Query
from skillrouter.eval.metrics import (aggregate, completeness_at, full_coverage_at, hit_at_1, mrr_at, ndcg_at,
                                      per_query, recall_at, recall_curve, set_compat)

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

"""Each loss against a hand computation on a three-candidate example."""
import math

import pytest
import torch

from skillrouter.train.losses import (GradedListNetLoss, InfoNCELoss, ListwiseLoss, MarginMSELoss,
                                      MultiPositiveInfoNCELoss, PointwiseLoss)

Q = torch.tensor([[1.0, 0.0]])
C = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])  # cosines with Q: 1, 0.6, 0


def test_infonce_by_hand():
    got = InfoNCELoss(temperature=0.5)(Q, C, torch.tensor([0]))
    expected = -math.log(math.exp(2) / (math.exp(2) + math.exp(1.2) + math.exp(0)))
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_infonce_exclude_drops_a_candidate_but_never_the_positive():
    exclude = torch.tensor([[True, True, False]])
    got = InfoNCELoss(temperature=1.0)(Q, C, torch.tensor([0]), exclude)
    assert got.item() == pytest.approx(math.log(1 + math.exp(-1)), rel=1e-6)


def test_multi_positive_sibling_masking_and_term_by_hand():
    sib = torch.tensor([[False, True, False]])  # c1 is the other GT of this query
    got = MultiPositiveInfoNCELoss(temperature=1.0, sibling_weight=0.25)(Q, C, torch.tensor([0]), sib)
    main = math.log(1 + math.exp(0 - 1))          # c1 masked: e^1 / (e^1 + e^0)
    sibling = math.log(1 + math.exp(0 - 0.6))     # c1 against the negatives only (c2)
    assert got.item() == pytest.approx(main + 0.25 * sibling, rel=1e-6)


def test_multi_positive_sibling_term_over_bf16_logits_with_a_float32_log_sum_exp(monkeypatch):
    """CUDA autocast runs ``logsumexp`` in float32 over bf16 logits (the CPU's keeps bf16): the sibling term then
    mixes the two dtypes, which a training step on a GPU met as an ``index_add`` dtype error."""
    logsumexp = torch.logsumexp
    monkeypatch.setattr(torch, "logsumexp", lambda x, dim: logsumexp(x.float(), dim))
    sib = torch.tensor([[False, True, False]])
    got = MultiPositiveInfoNCELoss(temperature=1.0, sibling_weight=0.25)(Q.bfloat16(), C.bfloat16(), torch.tensor([0]),
                                                                         sib)
    expected = math.log(1 + math.exp(-1)) + 0.25 * math.log(1 + math.exp(-0.6))
    assert got.item() == pytest.approx(expected, rel=2e-2)  # bf16 cosines


def test_two_gt_query_sibling_is_never_pushed_away():
    """With lambda = 0 the loss must not depend on how close the sibling GT is."""
    loss = MultiPositiveInfoNCELoss(temperature=0.1, sibling_weight=0.0)
    sib = torch.tensor([[False, True, False]])
    near = loss(Q, torch.tensor([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0]]), torch.tensor([0]), sib)
    far = loss(Q, torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]]), torch.tensor([0]), sib)
    assert near.item() == pytest.approx(far.item(), rel=1e-6)
    plain = InfoNCELoss(temperature=0.1)
    assert plain(Q, torch.tensor([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0]]), torch.tensor([0])).item() > near.item()


def test_two_rows_of_one_query_mask_each_other():
    q = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    sib = torch.tensor([[False, True, False], [True, False, False]])
    got = MultiPositiveInfoNCELoss(temperature=1.0, sibling_weight=0.0)(q, C, torch.tensor([0, 1]), sib)
    row0 = math.log(1 + math.exp(0 - 1))
    row1 = -math.log(math.exp(0.6) / (math.exp(0.6) + math.exp(0)))
    assert got.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)


def test_listwise_by_hand():
    scores = torch.tensor([[2.0, 1.0, 0.0]])
    assert ListwiseLoss(1.0)(scores, torch.tensor([0])).item() == pytest.approx(
        -math.log(math.exp(2) / (math.exp(2) + math.exp(1) + 1)), rel=1e-6)
    assert ListwiseLoss(2.0)(scores, torch.tensor([1])).item() == pytest.approx(
        -math.log(math.exp(0.5) / (math.exp(1) + math.exp(0.5) + 1)), rel=1e-6)


def test_pointwise_by_hand():
    got = PointwiseLoss()(torch.tensor([[2.0, -1.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0]]))
    expected = (math.log(1 + math.exp(-2)) + math.log(1 + math.exp(-1)) + math.log(2)) / 3
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_graded_listnet_by_hand():
    scores, grades = [2.0, 1.0, 0.0], [3.0, 1.0, 0.0]
    zt, zs = sum(math.exp(g) for g in grades), sum(math.exp(s) for s in scores)
    expected = -sum(math.exp(g) / zt * math.log(math.exp(s) / zs) for g, s in zip(grades, scores))
    got = GradedListNetLoss()(torch.tensor([scores]), torch.tensor([grades]))
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_pointwise_with_positives_weighted_by_hand():
    """pos_weight w scales the positives' term: -(w y log s(x) + (1 - y) log(1 - s(x))), averaged."""
    got = PointwiseLoss(pos_weight=7.0)(torch.tensor([[2.0, -1.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0]]))
    expected = (7 * math.log(1 + math.exp(-2)) + math.log(1 + math.exp(-1)) + math.log(2)) / 3
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_a_balanced_pos_weight_is_the_lists_negatives_per_positive():
    from skillrouter.train.reranker import CandidateList, pos_weight

    lists = [CandidateList("q", ("a", "b", "c", "d"), (1.0, 0.0, 0.0, 0.0)), CandidateList("r", ("a", "b"), (1.0, 0.0))]
    assert pos_weight({"name": "pointwise", "pos_weight": "balanced"}, lists) == pytest.approx(4 / 2)
    assert pos_weight({"name": "pointwise", "pos_weight": 1}, lists) == 1.0


def test_margin_mse_by_hand():
    """Student margins (2 - 1, 2 - 0.5) against the teacher's (cos 0.9 - 0.7, 0.9 - NaN) / tau 0.1: one pair counts."""
    scores = torch.tensor([[2.0, 1.0, 0.5]])
    teacher = torch.tensor([[0.9, 0.7, float("nan")]])
    got = MarginMSELoss(temperature=0.1)(scores, teacher, torch.tensor([0]))
    assert got.item() == pytest.approx((1.0 - 2.0) ** 2, rel=1e-6)
    both = MarginMSELoss(temperature=0.1)(scores.repeat(2, 1), torch.tensor([[0.9, 0.7, 0.8], [0.5, 0.6, 0.5]]),
                                          torch.tensor([0, 1]))
    pairs = [(1.0 - 2.0) ** 2, (1.5 - 1.0) ** 2, ((1.0 - 2.0) - (0.6 - 0.5) * 10) ** 2, ((1.0 - 0.5) - (0.6 - 0.5) * 10) ** 2]
    assert both.item() == pytest.approx(sum(pairs) / 4, rel=1e-5)


def test_margin_mse_without_a_scored_pair_is_zero_and_keeps_the_graph():
    scores = torch.tensor([[2.0, 1.0]], requires_grad=True)
    got = MarginMSELoss()(scores, torch.tensor([[float("nan"), 0.3]]), torch.tensor([0]))
    got.backward()
    assert got.item() == 0.0 and scores.grad is not None

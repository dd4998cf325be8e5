"""Training objectives of SkillRouter and R3, one ``nn.Module`` per loss.

Encoder losses take embeddings; reranker losses take scores. Each docstring follows one template:
what it is, Inputs (with shapes), the formula, and its Reference.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _cosine_logits(query: Tensor, candidates: Tensor, temperature: float) -> Tensor:
    return F.normalize(query, dim=-1) @ F.normalize(candidates, dim=-1).T / temperature


class InfoNCELoss(nn.Module):
    """In-batch InfoNCE with hard negatives over cosine similarity.

    Inputs:
        query: ``[B, d]`` query embeddings.
        candidates: ``[C, d]`` candidate embeddings: every row's positive and hard negatives.
        positive: ``[B]`` long, column of each row's positive in ``candidates``.
        exclude: optional ``[B, C]`` bool, True where a candidate must leave row i's denominator
            (another copy of its positive, a false negative).
    Loss:
        mean_i  -log( exp(cos(q_i, c_pos(i)) / tau) / sum_{c not excluded} exp(cos(q_i, c) / tau) )
    Reference:
        SkillRouter, encoder training (tau = 0.05, 10 hard negatives per query).
    """

    def __init__(self, temperature: float = 0.05):
        super().__init__()
        self.temperature = temperature

    def forward(self, query: Tensor, candidates: Tensor, positive: Tensor, exclude: Tensor | None = None) -> Tensor:
        logits = _cosine_logits(query, candidates, self.temperature)
        if exclude is not None:
            keep_pos = F.one_hot(positive, logits.shape[1]).bool()
            logits = logits.masked_fill(exclude & ~keep_pos, float("-inf"))
        return F.cross_entropy(logits, positive)


class MultiPositiveInfoNCELoss(nn.Module):
    """Multi-positive InfoNCE: sibling GT masked from the denominator, plus a weighted sibling term.

    Inputs:
        query: ``[B, d]``; one row per (query, positive) pair, so a two-GT query gives two rows.
        candidates: ``[C, d]``; positive: ``[B]`` as in :class:`InfoNCELoss`.
        siblings: ``[B, C]`` bool, True where a candidate is *another* GT of row i's query.
        exclude: optional ``[B, C]`` bool, further candidates to drop from row i's denominators.
    Loss (S_i = siblings of row i, D_i = candidates not excluded):
        main_i    = -log( e^{s(i,p_i)} / sum_{c in D_i \\ S_i} e^{s(i,c)} )
        sibling_i = mean_{s in S_i} -log( e^{s(i,s)} / sum_{c in D_i \\ (S_i ∪ {p_i}) ∪ {s}} e^{s(i,c)} )
        loss      = mean_i main_i + lambda * mean_{i: S_i non-empty} sibling_i
        with s(i,c) = cos(q_i, c) / tau. Siblings are never pushed away as negatives, and each is
        pulled up on its own against the shared negatives.
    Reference:
        R3 ("Skill Is Not Document"), R3-Embedding (tau = 1/30, lambda = 0.25).
    """

    def __init__(self, temperature: float = 1 / 30, sibling_weight: float = 0.25):
        super().__init__()
        self.temperature, self.sibling_weight = temperature, sibling_weight
        self.terms: dict[str, Tensor | float] = {}  # the last call's two terms (detached: read when the curve is logged)

    def forward(self, query: Tensor, candidates: Tensor, positive: Tensor, siblings: Tensor,
                exclude: Tensor | None = None) -> Tensor:
        logits = _cosine_logits(query, candidates, self.temperature)
        pos = F.one_hot(positive, logits.shape[1]).bool()
        siblings = siblings & ~pos
        dropped = (exclude & ~pos & ~siblings) if exclude is not None else torch.zeros_like(pos)
        base = logits.masked_fill(dropped, float("-inf"))
        main = F.cross_entropy(base.masked_fill(siblings, float("-inf")), positive)
        self.terms = {"loss_main": main.detach(), "loss_sibling": 0.0}
        if not siblings.any() or self.sibling_weight == 0:
            return main
        negatives_only = base.masked_fill(siblings | pos, float("-inf"))  # [B, C]
        rows, cols = siblings.nonzero(as_tuple=True)
        neg_lse = torch.logsumexp(negatives_only[rows], dim=1)
        sib_logit = logits[rows, cols]
        per_pair = -(sib_logit - torch.logaddexp(sib_logit, neg_lse))
        # per_pair's dtype, not the logits': CUDA autocast runs log-sum-exp in float32 over bf16 logits
        per_row = torch.zeros(logits.shape[0], dtype=per_pair.dtype, device=logits.device).index_add(0, rows, per_pair)
        counts = siblings.sum(dim=1)
        has = counts > 0
        sibling_term = (per_row[has] / counts[has]).mean()
        self.terms["loss_sibling"] = sibling_term.detach()
        return main + self.sibling_weight * sibling_term


class ListwiseLoss(nn.Module):
    """Listwise cross-entropy over a candidate list: the positive should win the softmax.

    Inputs:
        scores: ``[B, L]`` reranker scores of L candidates per list.
        target: ``[B]`` long, position of the positive in each list.
    Loss:
        mean_b  -log softmax(scores_b / tau)[target_b]
    Reference:
        SkillRouter, reranker training (tau = 1; +30.7pp Hit@1 over pointwise).
    """

    def __init__(self, temperature: float = 1.0):
        super().__init__()
        self.temperature = temperature

    def forward(self, scores: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(scores / self.temperature, target)


class PointwiseLoss(nn.Module):
    """Binary cross-entropy per (query, candidate) pair, the positives weighted by ``pos_weight``.

    Inputs:
        scores: ``[B, L]`` logits; labels: ``[B, L]`` in {0, 1} (1 = ground truth).
    Loss (w = pos_weight):
        mean_{b,l}  -( w * y_bl * log sigma(s_bl) + (1 - y_bl) * log(1 - sigma(s_bl)) )
    Reference:
        SkillRouter's pointwise baseline for the reranker. A list holds one positive and L - 1 negatives: unweighted,
        the loss is lowest at the base rate (logit -log(L - 1) for every pair), where a fresh head sits for an epoch
        (measured on the built-in data: GT -1.980 vs others -1.976); w = L - 1 (negatives per positive) balances the
        classes, as the class-balanced pointwise baselines do.
    """

    def __init__(self, pos_weight: float = 1.0):
        super().__init__()
        self.pos_weight = float(pos_weight)

    def forward(self, scores: Tensor, labels: Tensor) -> Tensor:
        weight = torch.tensor(self.pos_weight, dtype=scores.dtype, device=scores.device)
        return F.binary_cross_entropy_with_logits(scores, labels.to(scores.dtype), pos_weight=weight)


class GradedListNetLoss(nn.Module):
    """ListNet on graded labels: the label softmax is the target distribution over the list.

    Inputs:
        scores: ``[B, L]`` reranker scores; grades: ``[B, L]`` graded labels (R3: GT 3, SKIP partner
            1, other 0).
    Loss:
        mean_b  -sum_l softmax(grades_b)_l * log softmax(scores_b / tau)_l
    Reference:
        R3 ("Skill Is Not Document"), R3-Reranker: LLM SKIP rejections as graded supervision.
    """

    def __init__(self, temperature: float = 1.0):
        super().__init__()
        self.temperature = temperature

    def forward(self, scores: Tensor, grades: Tensor) -> Tensor:
        target = torch.softmax(grades.to(scores.dtype), dim=-1)
        return -(target * torch.log_softmax(scores / self.temperature, dim=-1)).sum(-1).mean()


class MarginMSELoss(nn.Module):
    """Margin-MSE distillation: the student's score margin between a list's positive and each other candidate
    regresses on the teacher's margin.

    Inputs:
        scores: ``[B, L]`` student (reranker) scores; teacher: ``[B, L]`` teacher scores, NaN where the teacher has
            none (a candidate its ranking did not reach); positive: ``[B]`` long, the position of each list's positive.
    Loss (over the pairs (b, l), l != positive_b, where both teacher scores exist; tau the teacher's temperature):
        mean_{b,l}  ( (s_b,pos - s_b,l) - (t_b,pos - t_b,l) / tau )^2
    Reference:
        Hofstätter et al. 2020, "Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge
        Distillation" (Margin-MSE). Here the direction is reversed, as a warm start: the first stage's bi-encoder
        (cosine scores, tau 0.05 as its InfoNCE) teaches a cross-encoder whose head starts from random weights.
    """

    def __init__(self, temperature: float = 0.05):
        super().__init__()
        self.temperature = temperature

    def forward(self, scores: Tensor, teacher: Tensor, positive: Tensor) -> Tensor:
        rows = torch.arange(scores.shape[0], device=scores.device)
        student = scores[rows, positive].unsqueeze(1) - scores
        target = (teacher[rows, positive].unsqueeze(1) - teacher) / self.temperature
        valid = torch.isfinite(target) & torch.isfinite(student)
        valid[rows, positive] = False
        if not valid.any():
            return scores.sum() * 0.0  # no pair the teacher scored: no term, the graph kept
        return F.mse_loss(student[valid], target[valid].to(student.dtype))

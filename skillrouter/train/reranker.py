"""Fine-tune a cross-encoder on candidate lists from the encoder's top 20 of each training query.

``listwise``: one list per (query, positive): the positive plus non-GT candidates, cross-entropy at
tau. ``pointwise``: the same pairs, binary cross-entropy. ``graded``: one list per query with every
GT (label 3), its SKIP partners (1) and other candidates (0), ListNet on the label softmax.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..rerank.scorers import PairScorer, RerankerSpec
from .loop import TrainConfig, set_seed, train
from .losses import GradedListNetLoss, ListwiseLoss, PointwiseLoss
from .pairs import TrainExample


@dataclass(frozen=True)
class CandidateList:
    query: str
    ids: tuple[str, ...]
    grades: tuple[float, ...]  # 1/0 for listwise and pointwise, graded labels for graded


def build_lists(examples: list[TrainExample], retrieved: list[list[str]], loss: dict, list_size: int) -> list[CandidateList]:
    lists = []
    for ex, cands in zip(examples, retrieved):
        others = [c for c in cands if c not in ex.positives]
        if loss["name"] == "graded":
            labels = loss["labels"]
            skip = [s for s in ex.skip if s not in ex.positives]
            ids = list(ex.positives) + skip + [c for c in others if c not in skip]
            ids = ids[:max(list_size, len(ex.positives))]
            grade = {**{c: labels["other"] for c in ids}, **{s: labels["skip"] for s in skip}, **{p: labels["gt"] for p in ex.positives}}
            lists.append(CandidateList(ex.query, tuple(ids), tuple(float(grade[c]) for c in ids)))
        else:
            for pos in ex.positives:
                ids = [pos] + others[: list_size - 1]
                lists.append(CandidateList(ex.query, tuple(ids), tuple(1.0 if c == pos else 0.0 for c in ids)))
    return lists


def make_loss(loss: dict) -> torch.nn.Module:
    name = loss["name"]
    if name == "listwise":
        return ListwiseLoss(loss.get("temperature", 1.0))
    if name == "pointwise":
        return PointwiseLoss()
    if name == "graded":
        return GradedListNetLoss(loss.get("temperature", 1.0))
    raise ValueError(f"reranker loss must be listwise, pointwise or graded, got {name!r}")


def train_reranker(spec: RerankerSpec, lists: list[CandidateList], skill_texts: dict[str, str], loss: dict,
                   cfg: TrainConfig, work_dir: Path, out_dir: Path) -> tuple[PairScorer, list[float]]:
    """Train and save the scorer (or its LoRA adapter) to ``out_dir``; return ``(scorer, loss_curve)``."""
    set_seed(cfg.seed)
    lora = {"r": cfg.lora_r, "lora_alpha": cfg.lora_alpha, "lora_dropout": cfg.lora_dropout} if cfg.lora else None
    scorer = PairScorer(spec, lora=lora)
    scorer.model.float()
    loss_fn = make_loss(loss)

    def compute_loss(indices) -> Tensor:
        batch = [lists[i] for i in indices]
        width = max(len(b.ids) for b in batch)
        queries = [b.query for b in batch for _ in b.ids]
        docs = [skill_texts[c] for b in batch for c in b.ids]
        flat = scorer(queries, docs)
        scores = torch.full((len(batch), width), float("-inf"), device=flat.device)
        labels = torch.zeros(len(batch), width, device=flat.device)
        offset = 0
        for i, b in enumerate(batch):
            scores[i, : len(b.ids)] = flat[offset: offset + len(b.ids)]
            labels[i, : len(b.ids)] = torch.tensor(b.grades, device=flat.device)
            offset += len(b.ids)
        if loss["name"] == "listwise":
            return loss_fn(scores, labels.argmax(dim=1))
        if loss["name"] == "pointwise":
            valid = torch.isfinite(scores)
            return loss_fn(scores[valid], labels[valid])
        return loss_fn(scores.masked_fill(~torch.isfinite(scores), -1e4), labels.masked_fill(~torch.isfinite(scores), -1e4))

    losses = train(scorer, len(lists), compute_loss, cfg, work_dir, desc=f"train reranker ({loss['name']})")
    scorer.save(out_dir)
    return scorer, losses

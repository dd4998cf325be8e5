"""Fine-tune a cross-encoder on candidate lists from the encoder's top 20 of each training query.

``listwise``: one list per (query, positive): the positive plus non-GT candidates, cross-entropy at
tau. ``pointwise``: the same pairs, binary cross-entropy. ``graded``: one list per query with every
GT (label 3), its SKIP partners (1) and other candidates (0), ListNet on the label softmax.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from ..rerank.scorers import PairScorer
from ..rerank.spec import RerankerSpec
from .data_parallel import is_main
from .grad_cache import cached, cached_backward
from .config import TrainConfig
from .loop import set_seed, train
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


def list_batch(batch: list[CandidateList], skill_texts: dict[str, str], loss_name: str, loss_fn: torch.nn.Module
               ) -> tuple[list[tuple[str, str]], Callable[[Tensor], Tensor]]:
    """A batch's (query, skill text) pairs, list by list, and its loss as a function of their ``[pairs]`` scores:
    the split that lets the scores come from chunks of pairs (cached gradients)."""
    width = max(len(b.ids) for b in batch)
    pairs = [(b.query, skill_texts[c]) for b in batch for c in b.ids]

    def loss_of(flat: Tensor) -> Tensor:
        scores = torch.full((len(batch), width), float("-inf"), device=flat.device)
        labels = torch.zeros(len(batch), width, device=flat.device)
        offset = 0
        for i, b in enumerate(batch):
            scores[i, : len(b.ids)] = flat[offset: offset + len(b.ids)]
            labels[i, : len(b.ids)] = torch.tensor(b.grades, device=flat.device)
            offset += len(b.ids)
        if loss_name == "listwise":
            return loss_fn(scores, labels.argmax(dim=1))
        if loss_name == "pointwise":
            valid = torch.isfinite(scores)
            return loss_fn(scores[valid], labels[valid])
        return loss_fn(scores.masked_fill(~torch.isfinite(scores), -1e4), labels.masked_fill(~torch.isfinite(scores), -1e4))

    return pairs, loss_of


def train_reranker(spec: RerankerSpec, lists: list[CandidateList], skill_texts: dict[str, str], loss: dict,
                   cfg: TrainConfig, work_dir: Path, out_dir: Path) -> tuple[PairScorer, list[float]]:
    """Train and save the scorer (or its LoRA adapter) to ``out_dir``; return ``(scorer, loss_curve)``.
    ``cfg.mini_batch``: pairs per forward pass, the loss still over whole lists (cached gradients)."""
    set_seed(cfg.seed)
    lora = {"r": cfg.lora_r, "lora_alpha": cfg.lora_alpha, "lora_dropout": cfg.lora_dropout} if cfg.lora else None
    scorer = PairScorer(spec, lora=lora)
    scorer.model.float()
    loss_fn = make_loss(loss)

    def score(pairs) -> Tensor:
        return scorer([q for q, _ in pairs], [d for _, d in pairs])

    caching = cached(cfg.mini_batch)

    def compute_loss(indices) -> Tensor:
        pairs, loss_of = list_batch([lists[i] for i in indices], skill_texts, loss["name"], loss_fn)
        if caching:  # chunks of pairs with cached gradients: the lists may outgrow one forward pass
            return cached_backward(score, pairs, cfg.mini_batch, loss_of, scorer.model.device)
        return loss_of(score(pairs))

    losses = train(scorer, len(lists), compute_loss, cfg, work_dir, desc=f"train reranker ({loss['name']})",
                   backpropagates=caching)
    if is_main():
        scorer.save(out_dir)
    return scorer, losses


def train_reranker_losses(*args) -> list[float]:
    """:func:`train_reranker`'s loss curve (what a data-parallel process hands back)."""
    return train_reranker(*args)[1]

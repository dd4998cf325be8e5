"""Fine-tune a cross-encoder on candidate lists from the encoder's top candidates of each training query.

``listwise``: one list per (query, positive): the positive plus non-GT candidates, cross-entropy at
tau. ``pointwise``: the same pairs, binary cross-entropy (positives weighted by the lists' negatives per
positive unless told otherwise). ``graded``: one list per query with every GT (label 3), its SKIP partners (1)
and other candidates (0), ListNet on the label softmax.

Which candidates serve as negatives (``negatives``):

* ``positives`` (the default): only skills that are the positive of some other training query, hardest (the
  encoder's order) first, then other such skills in a seeded order. Every skill a list shows is a positive for one
  query and a negative for the next, so a skill's identity carries no signal: with negatives drawn from the whole
  candidate list, the skills that are ever positives are the only ones ever labelled 1, and a reranker learns to
  put *those skills* first whatever the query (measured on the built-in data: every top-1 of 60 evaluation queries
  was a training positive, against 23 % of the candidates).
* ``candidates``: the encoder's top candidates that are not the query's GT (the papers' lists).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from ..rerank.scorers import PairScorer
from ..rerank.spec import RerankerSpec
from ..throughput import Throughput, model_flops
from .data_parallel import is_main
from .grad_cache import cached, cached_backward
from .config import TrainConfig
from .loop import Trained, set_attention_dropout, set_seed, train
from .losses import GradedListNetLoss, ListwiseLoss, PointwiseLoss
from ..data.pairs import TrainExample


@dataclass(frozen=True)
class CandidateList:
    query: str
    ids: tuple[str, ...]
    grades: tuple[float, ...]  # 1/0 for listwise and pointwise, graded labels for graded


NEGATIVES = ("positives", "candidates")


def negatives_for(ex: TrainExample, candidates: list[str], positives: list[str], mode: str, n: int,
                  rng: random.Random) -> list[str]:
    """Up to ``n`` negatives of a training query, hardest first (see the module docstring for ``mode``). Where the
    other queries' positives run out, the rest of the candidates fill the list."""
    others = [c for c in candidates if c not in ex.positives]
    if mode == "candidates":
        return others[:n]
    if mode != "positives":
        raise ValueError(f"reranker negatives must be one of {', '.join(NEGATIVES)}, got {mode!r}")
    pool = set(positives)
    hard = [c for c in others if c in pool]
    rest = [p for p in positives if p not in ex.positives and p not in hard]
    rng.shuffle(rest)
    picked = (hard + rest)[:n]
    return picked + [c for c in others if c not in pool][:n - len(picked)]


def build_lists(examples: list[TrainExample], retrieved: list[list[str]], loss: dict, list_size: int,
                negatives: str = "positives", seed: int = 0) -> list[CandidateList]:
    rng = random.Random(seed)
    positives = sorted({p for ex in examples for p in ex.positives})
    lists = []
    for ex, cands in zip(examples, retrieved):
        others = negatives_for(ex, cands, positives, negatives, list_size + len(ex.skip), rng)
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


def pos_weight(loss: dict, lists: list[CandidateList]) -> float:
    """``loss.pos_weight`` of a pointwise loss: a number, or ``balanced``: the lists' negatives per positive."""
    weight = loss.get("pos_weight", 1.0)
    if weight != "balanced":
        return float(weight)
    positives = sum(1 for b in lists for g in b.grades if g > 0)
    return (sum(len(b.grades) for b in lists) - positives) / max(positives, 1)


def make_loss(loss: dict, lists: list[CandidateList] = ()) -> torch.nn.Module:
    name = loss["name"]
    if name == "listwise":
        return ListwiseLoss(loss.get("temperature", 1.0))
    if name == "pointwise":
        return PointwiseLoss(pos_weight(loss, list(lists)))
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
                   cfg: TrainConfig, work_dir: Path, out_dir: Path) -> tuple[PairScorer, Trained]:
    """Train and save the scorer (or its LoRA adapter) to ``out_dir``; return ``(scorer, what the training did)``.
    ``cfg.mini_batch``: pairs per forward pass, the loss still over whole lists (cached gradients). Every query and
    skill text is tokenised once, before the first step (:meth:`PairScorer.warm`)."""
    set_seed(cfg.seed)
    lora = {"r": cfg.lora_r, "lora_alpha": cfg.lora_alpha, "lora_dropout": cfg.lora_dropout} if cfg.lora else None
    scorer = PairScorer(spec, lora=lora)
    scorer.model.float()
    set_attention_dropout(scorer, cfg.attention_dropout)
    loss_fn = make_loss(loss, lists)
    scorer.warm(list(dict.fromkeys([b.query for b in lists] + [skill_texts[c] for b in lists for c in b.ids])))
    meter = Throughput(flops=model_flops(scorer), passes=3)
    scorer.meter = meter

    def score(pairs) -> Tensor:
        return scorer([q for q, _ in pairs], [d for _, d in pairs])

    caching = cached(cfg.mini_batch)

    def compute_loss(indices) -> Tensor:
        pairs, loss_of = list_batch([lists[i] for i in indices], skill_texts, loss["name"], loss_fn)
        if caching:  # chunks of pairs with cached gradients: the lists may outgrow one forward pass
            return cached_backward(score, pairs, cfg.mini_batch, loss_of, scorer.model.device)
        return loss_of(score(pairs))

    losses = train(scorer, len(lists), compute_loss, cfg, work_dir, desc=f"train reranker ({loss['name']})",
                   backpropagates=caching, meter=meter)
    scorer.meter = None
    if is_main():
        scorer.save(out_dir)
    return scorer, Trained(losses, throughput=meter.record())


def train_reranker_run(*args) -> Trained:
    """What :func:`train_reranker` did (what a data-parallel process hands back)."""
    return train_reranker(*args)[1]

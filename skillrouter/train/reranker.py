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
* ``candidates``: the encoder's top candidates that are not the query's GT (the papers' lists). Safe where training
  reads a pool of its own (``data.train_pool``, disjoint from what is evaluated): no evaluated skill is ever labelled.
  ``auto`` (the preset's) resolves to this there, to ``positives`` on the benchmark's pool
  (:func:`skillrouter.pipeline.compose.reranker_negatives`).

In either mode a skill the dev split labels (``held``) is never a negative, as it is never a positive: the dev split
stays as unseen as the test.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

import torch
from torch import Tensor

from ..rerank.scorers import PairScorer
from ..rerank.spec import RerankerSpec
from ..throughput import Throughput, model_flops
from .data_parallel import is_main
from .grad_cache import cached, cached_backward
from .config import EarlyStopping, TrainConfig
from .dev import RerankerDev, metered, training_figures
from .loop import Trained, prepare_for_training, set_seed, train, watching
from .losses import GradedListNetLoss, ListwiseLoss, MarginMSELoss, PointwiseLoss
from ..data.pairs import TrainExample


@dataclass(frozen=True)
class CandidateList:
    query: str
    ids: tuple[str, ...]
    grades: tuple[float, ...]  # 1/0 for listwise and pointwise, graded labels for graded
    teacher: tuple[float, ...] | None = None  # the first stage's score of each candidate (NaN: not in its ranking)


NEGATIVES = ("positives", "candidates")


def negatives_for(ex: TrainExample, candidates: list[str], positives: list[str], mode: str, n: int,
                  rng: random.Random, pool: frozenset[str] | None = None, held: frozenset[str] = frozenset()
                  ) -> list[str]:
    """Up to ``n`` negatives of a training query, hardest first (see the module docstring for ``mode``). Where the
    other queries' positives run out, the rest of the candidates fill the list. ``pool``: ``positives`` as a set,
    built once by a caller that asks for many queries. The random fill draws just enough of the positives, so a list
    costs O(n), not O(len(positives)): shuffling them all per query made 37K pairs quadratic. ``held``: the dev
    split's skills, never a negative."""
    others = [c for c in candidates if c not in ex.positives and c not in held]
    if mode == "candidates":
        return others[:n]
    if mode != "positives":
        raise ValueError(f"reranker negatives must be one of {', '.join(NEGATIVES)}, got {mode!r}")
    pool = frozenset(positives) if pool is None else pool
    hard = [c for c in others if c in pool][:n]
    taken = set(hard) | set(ex.positives)
    draw = rng.sample(positives, min(len(positives), n - len(hard) + len(taken)))
    picked = hard + [p for p in draw if p not in taken][:n - len(hard)]
    return picked + [c for c in others if c not in pool][:n - len(picked)]


def build_lists(examples: list[TrainExample], retrieved: list[list[str]], loss: dict, list_size: int,
                negatives: str = "positives", seed: int = 0, teacher: list[Mapping[str, float]] | None = None,
                held: frozenset[str] = frozenset()) -> list[CandidateList]:
    """Each example's list(s) from its retrieved candidates; ``teacher``: per example, the first stage's score of each
    candidate it retrieved (what distillation reads); ``held``: the dev split's skills, which no list shows."""
    lists = _lists(examples, retrieved, loss, list_size, negatives, seed, held)
    if teacher is None:
        return lists
    by_query = {ex.query: scores for ex, scores in zip(examples, teacher)}
    return [replace(b, teacher=tuple(float(by_query[b.query].get(c, math.nan)) for c in b.ids)) for b in lists]


def _lists(examples: list[TrainExample], retrieved: list[list[str]], loss: dict, list_size: int, negatives: str,
           seed: int, held: frozenset[str]) -> list[CandidateList]:
    rng = random.Random(seed)
    positives = sorted({p for ex in examples for p in ex.positives})
    pool = frozenset(positives)
    lists = []
    for ex, cands in zip(examples, retrieved):
        others = negatives_for(ex, cands, positives, negatives, list_size + len(ex.skip), rng, pool, held)
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


def list_batch(batch: list[CandidateList], skill_texts: dict[str, str], loss_name: str, loss_fn: torch.nn.Module,
               distill: Distillation | None = None) -> tuple[list[tuple[str, str]], Callable[[Tensor], Tensor]]:
    """A batch's (query, skill text) pairs, list by list, and its loss as a function of their ``[pairs]`` scores:
    the split that lets the scores come from chunks of pairs (cached gradients); plus ``distill``'s term where the
    lists carry the first stage's scores."""
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
            task = loss_fn(scores, labels.argmax(dim=1))
        elif loss_name == "pointwise":
            valid = torch.isfinite(scores)
            task = loss_fn(scores[valid], labels[valid])
        else:
            task = loss_fn(scores.masked_fill(~torch.isfinite(scores), -1e4), labels.masked_fill(~torch.isfinite(scores), -1e4))
        if distill is None or distill.weight == 0 or any(b.teacher is None for b in batch):
            return task
        teacher = torch.full((len(batch), width), math.nan, device=flat.device)
        for i, b in enumerate(batch):
            teacher[i, : len(b.ids)] = torch.tensor(b.teacher, device=flat.device)
        return task + distill.weight * distill.loss(scores, teacher, labels.argmax(dim=1))

    return pairs, loss_of


@dataclass(frozen=True)
class Distillation:
    """``reranker.distill``: the first stage's score margins as an extra target (:class:`~.losses.MarginMSELoss`,
    ``weight`` times it; 0 = off)."""

    weight: float = 0.0
    temperature: float = 0.05

    @property
    def loss(self) -> MarginMSELoss:
        return MarginMSELoss(self.temperature)


@dataclass(frozen=True)
class Pretraining:
    """``reranker.pretrain``: lists of pseudo-queries from the pool (:mod:`skillrouter.data.pseudo_queries`), trained on
    for ``epochs`` before the labelled lists (an optimiser and schedule of their own)."""

    lists: tuple[CandidateList, ...]
    epochs: int


def train_reranker(spec: RerankerSpec, lists: list[CandidateList], skill_texts: dict[str, str], loss: dict,
                   cfg: TrainConfig, work_dir: Path, out_dir: Path, dev: RerankerDev | None = None,
                   early: EarlyStopping | None = None, pretrain: Pretraining | None = None,
                   distill: Distillation | None = None) -> tuple[PairScorer, Trained]:
    """Train and save the scorer (or its LoRA adapter) to ``out_dir``; return ``(scorer, what the training did)``.
    ``cfg.mini_batch``: pairs per forward pass, the loss still over whole lists (cached gradients). Every query and
    skill text is tokenised once, before the first step (:meth:`PairScorer.warm`). ``dev`` and ``early``: stop when
    the dev split stops improving, keeping the best epoch (:class:`~.loop.DevWatch`). ``pretrain``: pseudo-query lists
    first; ``distill``: the first stage's margins as an extra target wherever the lists carry its scores."""
    set_seed(cfg.seed)
    lora = {"r": cfg.lora_r, "lora_alpha": cfg.lora_alpha, "lora_dropout": cfg.lora_dropout} if cfg.lora else None
    scorer = PairScorer(spec, lora=lora)
    scorer.model.float()
    prepare_for_training(scorer, cfg)
    every = [*(pretrain.lists if pretrain else ()), *lists]
    scorer.warm(list(dict.fromkeys([b.query for b in every] + [skill_texts[c] for b in every for c in b.ids])))
    meter = Throughput(flops=model_flops(scorer), passes=3)
    scorer.meter = meter
    caching = cached(cfg.mini_batch)

    def score(pairs) -> Tensor:
        return scorer([q for q, _ in pairs], [d for _, d in pairs])

    def phase(phase_lists: list[CandidateList], phase_cfg: TrainConfig, work: Path, desc: str, watch=None) -> list[float]:
        loss_fn = make_loss(loss, phase_lists)

        def compute_loss(indices) -> Tensor:
            pairs, loss_of = list_batch([phase_lists[i] for i in indices], skill_texts, loss["name"], loss_fn, distill)
            if caching:  # chunks of pairs with cached gradients: the lists may outgrow one forward pass
                return cached_backward(score, pairs, phase_cfg.mini_batch, loss_of, scorer.model.device)
            return loss_of(score(pairs))

        return train(scorer, len(phase_lists), compute_loss, phase_cfg, work, desc=desc, backpropagates=caching,
                     meter=meter, watch=watch)

    before = phase(list(pretrain.lists), replace(cfg, epochs=pretrain.epochs), work_dir / "pretrain",
                   "pre-train reranker (pseudo-queries)") if pretrain and pretrain.epochs and pretrain.lists else []
    watched, dev_meter = metered(dev, meter.flops)
    watch = watching(watched, early, work_dir)
    losses = phase(lists, cfg, work_dir, f"train reranker ({loss['name']})", watch)
    scorer.meter = None
    if is_main():
        scorer.save(out_dir)
    return scorer, Trained(before + losses, watch.record(cfg.epochs) if watch else None,
                           training_figures(meter, dev_meter),
                           pretrain_steps=len(before))


def train_reranker_run(*args) -> Trained:
    """What :func:`train_reranker` did (what a data-parallel process hands back)."""
    return train_reranker(*args)[1]

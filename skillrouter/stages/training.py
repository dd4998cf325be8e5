"""Training stages: hard-negative mining (the false-negative filter admits each pick), encoder
fine-tuning and reranker fine-tuning. The two trainings resume from their last checkpoint, kept in the
entry's work folder until the artifact is published. Training reads the Easy dataset only, so one
trained model serves both tiers."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..data.types import Query
from ..eval.metrics import parse_metrics, per_query_rows
from ..fields import TextSpec
from ..rankings import Ranking, read_rankings
from ..rerank.spec import RerankerSpec
from .. import events
from ..retrieval.dense import EncoderSpec
from ..train import fn_filter as fn_filter_module, negatives as negatives_module
from ..train.config import EXECUTION_ONLY, EarlyStopping, EncoderLoss, TrainConfig
from ..train.dev import EncoderDev, RerankerDev
from ..train.fn_filter import FalseNegativeFilter
from ..train.negatives import NegativeCounts, mine_negatives
from ..data.pairs import TrainExample
from .data import read_descriptions, read_examples
from .graph import BuildContext, FileRef, Items, Stage, file_inputs, spec_dict
from .reranking import SCORERS
from .retrieval import skill_renderer, skill_text

# The trainers' code keys the trainings; it is named, not imported: torch loads in the job that trains, not in
# every job (or launcher) that plans. grad_cache / data_parallel: how a step runs, not what it computes.
TRAIN_CODE = ("skillrouter.train.loop", "skillrouter.train.losses", "skillrouter.train.dev")
FN_FILTER = "fn_filter.json"


def _ranked_lists(ctx: BuildContext, role: str, n: int) -> list[list[str]]:
    """Each training query's ranked ids from a retrieve stage over the training queries."""
    return [r.ids for r in _rankings(ctx, role, n)]


def _rankings(ctx: BuildContext, role: str, n: int) -> list[Ranking]:
    """Each training query's ranking (ids and the first stage's scores) from a retrieve stage over the training
    queries."""
    rankings = read_rankings(ctx.input(role) / "rankings.jsonl")  # once per artifact, not once per query
    return [rankings[f"train-{i:06d}"] for i in range(n)]


def _held_skills(ctx: BuildContext) -> frozenset[str]:
    """The skills the dev split labels, where the training pairs are a dev split's (none otherwise)."""
    if ctx.stage.inputs["pairs"].kind != "dev_split":
        return frozenset()
    return frozenset(g for q in ctx.dataset("pairs").queries for g in q.all_gt)


def _lists_of(ctx: BuildContext, pairs: str, candidates: str, seed: int) -> tuple[list, int]:
    """A reranker's training lists from a pairs stage and the first stage's candidates for its queries, with the
    first stage's scores where distillation reads them; and how many training queries they came from. No list
    shows a skill of the dev split."""
    from ..train.reranker import build_lists

    p = ctx.params
    examples = read_examples(ctx.input(pairs))
    rankings = _rankings(ctx, candidates, len(examples))
    teacher = [dict(zip(r.ids, r.scores)) for r in rankings] if p.get("distill", {}).get("weight") else None
    lists = build_lists(examples, [r.ids for r in rankings], p["loss"], p["list_size"], p["negatives"], seed, teacher,
                        _held_skills(ctx))
    return lists, len(examples)


def _build_mining(ctx: BuildContext) -> dict[str, Any]:
    p = ctx.params
    examples = read_examples(ctx.input("pairs"))
    pool = ctx.dataset().training_pool()
    ids = json.loads((ctx.input("pool") / "ids.json").read_text())
    emb = np.load(ctx.input("pool") / "embeddings.npy").astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True).clip(min=1e-12)
    f = p["fn_filter"]
    fn = FalseNegativeFilter({s.id: s for s in pool}, dict(zip(ids, emb)), same_name=bool(f["same_name"]),
                             body_trigram_jaccard=f["body_trigram_jaccard"],
                             embedding_cosine=f["embedding_cosine"]) if f["enabled"] else None
    negatives, contributed = mine_negatives(examples, pool, _ranked_lists(ctx, "semantic", len(examples)),
                                            _ranked_lists(ctx, "lexical", len(examples)), NegativeCounts(**p["negatives"]),
                                            fn, p["seed"])
    report = fn.report() if fn else {"enabled": False}
    events.log_summary(_mining_figures(contributed, report))
    (ctx.out / "negatives.json").write_text(json.dumps(negatives))
    (ctx.out / FN_FILTER).write_text(json.dumps(report, indent=2))
    return {"fn_filter": report, "negatives": contributed, "n_examples": len(examples), "items": len(examples)}


def _mining_figures(contributed: Mapping[str, int], fn_report: Mapping[str, Any]) -> dict[str, Any]:
    """The negatives each source contributed and what each false-negative filter layer removed, as run summary keys."""
    return {**{f"negatives/{k}": v for k, v in contributed.items()},
            **{f"fn_filter/{k}": v for k, v in fn_report.items()}}


def mine(counts: NegativeCounts, fn_filter: Mapping[str, Any], seed: int, data: Stage, pairs: Stage, semantic: Stage,
         lexical: Stage, base_pool: Stage) -> Stage:
    """Hard negatives per training query from four sources (semantic and lexical neighbours, same and
    other category), each pick admitted by the three-layer false-negative filter (same name, body
    trigram Jaccard, base-embedding cosine), removals counted per layer."""
    params = {"negatives": spec_dict(counts), "fn_filter": dict(fn_filter), "seed": seed}
    return Stage("mine_negatives", _build_mining, params,
                 inputs={"data": data, "pairs": pairs, "semantic": semantic, "lexical": lexical, "pool": base_pool}, resource="cpu", items=Items("pairs", "n_examples"),
                 code=(negatives_module.__name__, fn_filter_module.__name__))


def _skill_texts(ctx: BuildContext) -> dict[str, str]:
    text = skill_renderer(ctx.params)
    oracle = read_descriptions(ctx)
    return {s.id: text.skill(s, oracle) for s in ctx.dataset().training_pool()}


def _curve(ctx: BuildContext, trained: Any, n: int) -> dict[str, Any]:
    """A training's manifest figures: its loss curve (also ``loss_curve.json``), dev curve and throughput."""
    losses = trained.losses
    (ctx.out / "loss_curve.json").write_text(json.dumps(losses))
    return {"n_examples": n, "items": n, "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None, "throughput": trained.throughput,
            **({"dev": trained.dev} if trained.dev else {})}


def _build_encoder(ctx: BuildContext) -> dict[str, Any]:
    from ..train import data_parallel
    from ..train.encoder import train_encoder_run

    p = ctx.params
    mined = ctx.manifest("negatives")
    events.log_summary(_mining_figures(mined.get("negatives", {}), mined.get("fn_filter", {})))
    examples = read_examples(ctx.input("pairs"))
    negatives = json.loads((ctx.input("negatives") / "negatives.json").read_text())
    query = TextSpec.from_dict(p["query_text"])
    renamed = [TrainExample(query.query(ex.query), ex.positives, ex.skip) for ex in examples]
    train = TrainConfig(**p["train"], **ctx.stage.options["execution"], show_progress=ctx.progress)
    spec = EncoderSpec(**p["base"])
    trained = data_parallel.run(train_encoder_run, (spec, renamed, negatives, _skill_texts(ctx), EncoderLoss(**p["loss"]),
                                                    train, ctx.work, ctx.out / "model", _encoder_dev(ctx, spec),
                                                    _early(ctx)), data_parallel.processes())
    return _curve(ctx, trained, len(examples))


def dev_objective(metric: str, queries: tuple[Query, ...], ranked: Mapping[str, Sequence[str]]) -> list[float]:
    """The objective of each dev query (that has it) under ``ranked``: what early stopping reads after an epoch."""
    rows = per_query_rows({qid: list(ids) for qid, ids in ranked.items()}, list(queries), parse_metrics([metric]))
    return [rows[q.id][metric] for q in queries if metric in rows.get(q.id, {})]


def _early(ctx: BuildContext) -> EarlyStopping | None:
    return EarlyStopping(**ctx.params["early_stopping"]) if ctx.has("dev") else None


def _encoder_dev(ctx: BuildContext, spec: EncoderSpec) -> EncoderDev | None:
    """The dev split as the encoder's early stopping reads it: its queries ranked among the training pool."""
    if not ctx.has("dev"):
        return None
    dev, objective = ctx.dataset("dev"), ctx.params["objective"]
    text, oracle, query = skill_renderer(ctx.params), read_descriptions(ctx), TextSpec.from_dict(ctx.params["query_text"])
    return EncoderDev(tuple(q.id for q in dev.queries), tuple(query.query(q.text) for q in dev.queries),
                      tuple(s.id for s in dev.skills), tuple(spec.document_prefix + text.skill(s, oracle) for s in dev.skills),
                      ctx.params["early_stopping"]["depth"], spec.batch_size,
                      functools.partial(dev_objective, objective, tuple(dev.queries)), objective, spec.bf16)


def _reranker_dev(ctx: BuildContext) -> RerankerDev | None:
    """The dev split as the reranker's early stopping reads it: each dev query's head of the cell's first stage."""
    if not ctx.has("dev"):
        return None
    dev, objective, depth = ctx.dataset("dev"), ctx.params["objective"], ctx.params["early_stopping"]["depth"]
    rankings = read_rankings(ctx.input("dev_candidates") / "rankings.jsonl")
    queries = [q for q in dev.queries if q.id in rankings]
    heads = {i for q in queries for i in rankings[q.id].ids[:depth]}
    text, oracle, query = skill_renderer(ctx.params), read_descriptions(ctx), TextSpec.from_dict(ctx.params["query_text"])
    return RerankerDev(tuple(q.id for q in queries), tuple(query.query(q.text) for q in queries),
                       tuple(tuple(rankings[q.id].ids) for q in queries), depth,
                       {s.id: text.skill(s, oracle) for s in dev.skills if s.id in heads},
                       functools.partial(dev_objective, objective, tuple(queries)), objective)


def _watched(params: dict[str, Any], early: EarlyStopping | None, objective: str, query_text: TextSpec | None = None
             ) -> dict[str, Any]:
    """A training's params with its early stopping (none: the params it always had)."""
    if early is None:
        return params
    return {**params, "early_stopping": spec_dict(early), "objective": objective,
            **({"query_text": spec_dict(query_text)} if query_text is not None else {})}


def encoder_training(spec: EncoderSpec, loss: EncoderLoss, train: TrainConfig, text: TextSpec, query_text: TextSpec,
                     data: Stage, pairs: Stage, negatives: Stage, oracle: FileRef | None = None, dev: Stage | None = None,
                     early: EarlyStopping | None = None, objective: str = "mrr@10") -> Stage:
    """InfoNCE (or R3's multi-positive InfoNCE) fine-tuning of the base encoder on the mined lists; with ``dev`` (the
    dev split held out of ``pairs``) and ``early``, until the dev split's ``objective`` stops improving.
    ``train.mini_batch`` is an option, not a param: cached gradients are the same gradients (to float
    tolerance), so it does not change the key, as ``embed.shards`` does not."""
    refs, files, names, paths = file_inputs({"oracle": oracle})
    params = {"base": spec_dict(spec), "loss": spec_dict(loss), "train": _keyed(train), "text": skill_text(text),
              "query_text": spec_dict(query_text), "files": names}
    watched = {"dev": dev} if dev is not None and early is not None else {}
    return Stage("train_encoder", _build_encoder, _watched(params, early if watched else None, objective),
                 inputs={"data": data, "pairs": pairs, "negatives": negatives, **watched, **refs}, files=files, resource="gpu", resumable=True,
                 options={"paths": paths, "execution": _execution(train)},
                 items=Items("pairs", "n_examples", "train.epochs"),
                 code=(*TRAIN_CODE, "skillrouter.train.encoder"))


def _execution(train: TrainConfig) -> dict[str, Any]:
    """How a training's steps run (options: never part of its key)."""
    return {"mini_batch": train.mini_batch, "gradient_checkpointing": train.gradient_checkpointing}


def _keyed(train: TrainConfig) -> dict[str, Any]:
    """What a training's key reads of its config: everything but how a step is split into forward passes
    and how its progress is shown."""
    return {k: v for k, v in spec_dict(train).items() if k not in EXECUTION_ONLY}


def _build_reranker(ctx: BuildContext) -> dict[str, Any]:
    from ..train import data_parallel
    from ..train.reranker import Distillation, Pretraining, train_reranker_run

    p = ctx.params
    seed = p["train"]["seed"]
    lists, n_examples = _lists_of(ctx, "pairs", "candidates", seed)
    pretrain = (Pretraining(tuple(_lists_of(ctx, "pretrain_pairs", "pretrain_candidates", seed)[0]), p["pretrain"]["epochs"])
                if ctx.has("pretrain_pairs") else None)
    train = TrainConfig(**p["train"], **ctx.stage.options["execution"], show_progress=ctx.progress)
    trained = data_parallel.run(train_reranker_run, (RerankerSpec(**p["base"]), lists, _skill_texts(ctx), p["loss"],
                                                     train, ctx.work, ctx.out / "model", _reranker_dev(ctx), _early(ctx),
                                                     pretrain, Distillation(**p["distill"]) if "distill" in p else None),
                                data_parallel.processes())
    return {**_curve(ctx, trained, n_examples), "n_lists": len(lists),
            **({"pretrain": {"lists": len(pretrain.lists), "steps": trained.pretrain_steps}} if pretrain else {})}


@dataclass(frozen=True)
class RerankerSignal:
    """What a reranker trains on beyond its labelled lists: pseudo-query lists first (``pretrain_pairs``, their first
    stage candidates ``pretrain_candidates``, ``pretrain`` params), the first stage's margins as a target (``distill``
    params), the dev split it stops early on (``dev``, its first-stage rankings ``dev_candidates``, ``early``)."""

    dev: Stage | None = None
    dev_candidates: Stage | None = None
    early: EarlyStopping | None = None
    objective: str = "mrr@10"
    query_text: TextSpec | None = None
    pretrain_pairs: Stage | None = None
    pretrain_candidates: Stage | None = None
    pretrain: Mapping[str, Any] | None = None
    distill: Mapping[str, Any] | None = None

    def inputs(self) -> dict[str, Stage]:
        roles = {"dev": self.dev, "dev_candidates": self.dev_candidates} if self.watched else {}
        if self.pretrain_pairs is not None and self.pretrain_candidates is not None:
            roles.update(pretrain_pairs=self.pretrain_pairs, pretrain_candidates=self.pretrain_candidates)
        return roles

    @property
    def watched(self) -> bool:
        return self.dev is not None and self.dev_candidates is not None and self.early is not None

    def params(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with what this signal adds (none: the params a reranker always had)."""
        params = _watched(params, self.early if self.watched else None, self.objective, self.query_text)
        if self.pretrain_pairs is not None:
            params["pretrain"] = dict(self.pretrain or {})
        if self.distill and self.distill.get("weight"):
            params["distill"] = dict(self.distill)
        return params


def reranker_training(spec: RerankerSpec, loss: Mapping[str, Any], train: TrainConfig, list_size: int, negatives: str,
                      text: TextSpec, data: Stage, pairs: Stage, candidates: Stage, oracle: FileRef | None = None,
                      signal: RerankerSignal = RerankerSignal()) -> Stage:
    """Fine-tune the base reranker with the ``loss`` group on lists from the encoder's top candidates, their
    negatives drawn as ``negatives`` says (:mod:`skillrouter.train.reranker`; ``train.mini_batch``: pairs per
    forward pass, an option like the encoder's), with what ``signal`` adds: pseudo-queries first, distillation from
    the first stage, early stopping on the dev split."""
    refs, files, names, paths = file_inputs({"oracle": oracle})
    params = {"base": spec_dict(spec), "loss": dict(loss), "train": _keyed(train), "list_size": list_size,
              "negatives": negatives, "text": skill_text(text), "files": names}
    return Stage("train_reranker", _build_reranker, signal.params(params),
                 inputs={"data": data, "pairs": pairs, "candidates": candidates, **signal.inputs(), **refs}, files=files, resource="gpu", resumable=True,
                 options={"paths": paths, "execution": _execution(train)}, items=Items("pairs", "n_examples", "train.epochs"),
                 code=(*TRAIN_CODE, "skillrouter.train.reranker", SCORERS))


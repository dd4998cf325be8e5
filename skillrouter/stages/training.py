"""Training stages: hard-negative mining (the false-negative filter admits each pick), encoder
fine-tuning and reranker fine-tuning. The two trainings resume from their last checkpoint, kept in the
entry's work folder until the artifact is published. Training reads the Easy dataset only, so one
trained model serves both tiers."""
from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np

from ..fields import TextSpec
from ..rankings import read_rankings
from ..rerank.spec import RerankerSpec
from .. import events
from ..retrieval.dense import EncoderSpec
from ..train import fn_filter as fn_filter_module, negatives as negatives_module
from ..train.config import EXECUTION_ONLY, EncoderLoss, TrainConfig
from ..train.fn_filter import FalseNegativeFilter
from ..train.negatives import NegativeCounts, mine_negatives
from ..data.pairs import TrainExample
from .data import read_descriptions, read_examples
from .graph import BuildContext, FileRef, Items, Stage, file_inputs, spec_dict
from .reranking import SCORERS
from .retrieval import skill_renderer, skill_text

# The trainers' code keys the trainings; it is named, not imported: torch loads in the job that trains, not in
# every job (or launcher) that plans. grad_cache / data_parallel: how a step runs, not what it computes.
TRAIN_CODE = ("skillrouter.train.loop", "skillrouter.train.losses")
FN_FILTER = "fn_filter.json"


def _ranked_lists(ctx: BuildContext, role: str, n: int) -> list[list[str]]:
    """Each training query's ranked ids from a retrieve stage over the training queries."""
    rankings = read_rankings(ctx.input(role) / "rankings.jsonl")  # once per artifact, not once per query
    return [rankings[f"train-{i:06d}"].ids for i in range(n)]


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
    trained = data_parallel.run(train_encoder_run, (EncoderSpec(**p["base"]), renamed, negatives, _skill_texts(ctx),
                                                    EncoderLoss(**p["loss"]), train, ctx.work, ctx.out / "model"),
                                data_parallel.processes())
    return _curve(ctx, trained, len(examples))


def encoder_training(spec: EncoderSpec, loss: EncoderLoss, train: TrainConfig, text: TextSpec, query_text: TextSpec,
                     data: Stage, pairs: Stage, negatives: Stage, oracle: FileRef | None = None) -> Stage:
    """InfoNCE (or R3's multi-positive InfoNCE) fine-tuning of the base encoder on the mined lists.
    ``train.mini_batch`` is an option, not a param: cached gradients are the same gradients (to float
    tolerance), so it does not change the key, as ``embed.shards`` does not."""
    refs, files, names, paths = file_inputs({"oracle": oracle})
    params = {"base": spec_dict(spec), "loss": spec_dict(loss), "train": _keyed(train), "text": skill_text(text),
              "query_text": spec_dict(query_text), "files": names}
    return Stage("train_encoder", _build_encoder, params,
                 inputs={"data": data, "pairs": pairs, "negatives": negatives, **refs}, files=files, resource="gpu", resumable=True,
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
    from ..train.reranker import build_lists, train_reranker_run

    p = ctx.params
    examples = read_examples(ctx.input("pairs"))
    lists = build_lists(examples, _ranked_lists(ctx, "candidates", len(examples)), p["loss"], p["list_size"],
                        p["negatives"], p["train"]["seed"])
    train = TrainConfig(**p["train"], **ctx.stage.options["execution"], show_progress=ctx.progress)
    trained = data_parallel.run(train_reranker_run, (RerankerSpec(**p["base"]), lists, _skill_texts(ctx), p["loss"],
                                                     train, ctx.work, ctx.out / "model"), data_parallel.processes())
    return {**_curve(ctx, trained, len(examples)), "n_lists": len(lists)}


def reranker_training(spec: RerankerSpec, loss: Mapping[str, Any], train: TrainConfig, list_size: int, negatives: str,
                      text: TextSpec, data: Stage, pairs: Stage, candidates: Stage, oracle: FileRef | None = None) -> Stage:
    """Fine-tune the base reranker with the ``loss`` group on lists from the encoder's top candidates, their
    negatives drawn as ``negatives`` says (:mod:`skillrouter.train.reranker`; ``train.mini_batch``: pairs per
    forward pass, an option like the encoder's)."""
    refs, files, names, paths = file_inputs({"oracle": oracle})
    params = {"base": spec_dict(spec), "loss": dict(loss), "train": _keyed(train), "list_size": list_size,
              "negatives": negatives, "text": skill_text(text), "files": names}
    return Stage("train_reranker", _build_reranker, params,
                 inputs={"data": data, "pairs": pairs, "candidates": candidates, **refs}, files=files, resource="gpu", resumable=True,
                 options={"paths": paths, "execution": _execution(train)}, items=Items("pairs", "n_examples", "train.epochs"),
                 code=(*TRAIN_CODE, "skillrouter.train.reranker", SCORERS))


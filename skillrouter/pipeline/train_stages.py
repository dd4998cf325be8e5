"""Training stages: encoder fine-tuning (with mined, filtered hard negatives) and reranker
fine-tuning. Both are cached like every stage, and both resume from their last checkpoint, kept
under ``<cache>/<stage>/<key>.work/`` until the artifact is published (``get_or_build_resumable``)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.types import Query
from ..rerank import scorers as scorers_module
from ..rerank.scorers import RerankerSpec
from ..retrieval.dense import EncoderSpec
from ..train import encoder as encoder_module, fn_filter as fn_filter_module, loop as loop_module
from ..train import losses as losses_module, negatives as negatives_module, reranker as reranker_module
from ..train.encoder import EncoderLoss, train_encoder
from ..train.fn_filter import FalseNegativeFilter
from ..train.loop import TrainConfig
from ..train.negatives import NegativeCounts, mine_negatives
from ..train.pairs import TrainExample
from ..train.reranker import build_lists, train_reranker
from .cache import StageCache, StageRecord, texts_fingerprint

TRAIN_CODE = [loop_module, losses_module]


def train_queries(examples: list[TrainExample]) -> list[Query]:
    """Training examples as queries, so the evaluation's retrieve stages serve negative mining and
    reranker candidate lists too."""
    return [Query(id=f"train-{i:06d}", text=ex.query, gt=ex.positives, skip=ex.skip) for i, ex in enumerate(examples)]


def examples_fingerprint(examples: list[TrainExample]) -> str:
    return texts_fingerprint([json.dumps(asdict(ex), sort_keys=True) for ex in examples])


@dataclass
class EncoderTraining:
    spec: EncoderSpec
    loss: EncoderLoss
    negatives: NegativeCounts
    fn_filter: dict[str, Any]
    train: TrainConfig


def train_encoder_stage(cache: StageCache, setup: EncoderTraining, examples: list[TrainExample], skill_texts: dict[str, str],
                        skills_by_id: dict, query_texts: list[str], base_pool: StageRecord, semantic: StageRecord,
                        lexical: StageRecord, semantic_lists: list[list[str]], lexical_lists: list[list[str]],
                        benchmark_ids: set[str], user: str) -> StageRecord:
    params = {"base": asdict(setup.spec), "loss": asdict(setup.loss), "negatives": asdict(setup.negatives),
              "fn_filter": setup.fn_filter, "train": asdict(setup.train)}
    inputs = [base_pool.key, semantic.key, lexical.key, examples_fingerprint(examples),
              texts_fingerprint(sorted(benchmark_ids)), texts_fingerprint(query_texts)]

    def run(out: Path, work: Path) -> dict[str, Any]:
        ids = json.loads((Path(base_pool.path) / "ids.json").read_text())
        emb = np.load(Path(base_pool.path) / "embeddings.npy").astype(np.float32)
        emb /= np.linalg.norm(emb, axis=1, keepdims=True).clip(min=1e-12)
        fcfg = setup.fn_filter
        fn = FalseNegativeFilter(skills_by_id, dict(zip(ids, emb)), same_name=bool(fcfg["same_name"]),
                                 body_trigram_jaccard=fcfg["body_trigram_jaccard"],
                                 embedding_cosine=fcfg["embedding_cosine"]) if fcfg["enabled"] else None
        negs, contributed = mine_negatives(examples, list(skills_by_id.values()), semantic_lists, lexical_lists,
                                           setup.negatives, fn, setup.train.seed)
        renamed = [TrainExample(q, ex.positives, ex.skip) for q, ex in zip(query_texts, examples)]
        _, losses = train_encoder(setup.spec, renamed, negs, skill_texts, setup.loss, setup.train, work, out / "model")
        fn_report = fn.report() if fn else {"enabled": False}
        (out / "fn_filter.json").write_text(json.dumps(fn_report, indent=2))
        (out / "loss_curve.json").write_text(json.dumps(losses))
        return {"fn_filter": fn_report, "negatives": contributed, "n_examples": len(examples),
                "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None}

    return cache.get_or_build_resumable("train_encoder", params, inputs, run,
                                        code=TRAIN_CODE + [encoder_module, fn_filter_module, negatives_module], user=user)


def train_reranker_stage(cache: StageCache, spec: RerankerSpec, loss: dict[str, Any], cfg: TrainConfig, list_size: int,
                         examples: list[TrainExample], candidates: StageRecord, candidate_lists: list[list[str]],
                         skill_texts: dict[str, str], user: str) -> StageRecord:
    params = {"base": asdict(spec), "loss": loss, "train": asdict(cfg), "list_size": list_size}
    inputs = [candidates.key, examples_fingerprint(examples),
              texts_fingerprint([skill_texts[i] for i in sorted(skill_texts)])]

    def run(out: Path, work: Path) -> dict[str, Any]:
        lists = build_lists(examples, candidate_lists, loss, list_size)
        _, losses = train_reranker(spec, lists, skill_texts, loss, cfg, work, out / "model")
        (out / "loss_curve.json").write_text(json.dumps(losses))
        return {"n_lists": len(lists), "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None}

    return cache.get_or_build_resumable("train_reranker", params, inputs, run,
                                        code=TRAIN_CODE + [reranker_module, scorers_module], user=user)

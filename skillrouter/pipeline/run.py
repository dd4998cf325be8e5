"""Run one grid cell: data -> fields -> retrieval [-> rerank] -> metrics, writing the run directory.

Every cell writes ``status.json`` when it starts and ``metrics.json`` (with its status) when it
ends, from inside the job, so a grid's state can be read from disk whatever the launcher did.
A failing cell records its error and never touches another cell's files.
"""
from __future__ import annotations

import json
import logging
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from ..data import DataError, Dataset, Query, Skill
from ..data.jsonl import atomic_write_json
from ..data.loaders import ErrorPolicy
from ..eval.metrics import aggregate_rows, parse_metrics, per_query_rows, recall_curve
from ..fields import Caps, TextSpec
from ..models import respect_cpu_allocation
from ..rankings import Ranking, write_predictions, write_rankings
from ..rerank.llm_judge import JudgeSpec, LLMJudge
from ..rerank.scorers import RerankerSpec, make_scorer
from ..retrieval.dense import EncoderSpec
from ..train.encoder import EncoderLoss
from ..train.loop import TrainConfig
from ..train.negatives import NegativeCounts
from ..tracking import make_tracker
from ..train.pairs import TrainExample, load_pairs
from . import stages
from .cache import StageCache, StageRecord, record_dict, texts_fingerprint
from .cell_data import CellData
from .provenance import provenance
from .shards import ShardPlan
from .train_stages import EncoderTraining, train_encoder_stage, train_queries, train_reranker_stage

log = logging.getLogger(__name__)


class CellContext:
    """The run directory, the cache and the stage records of one cell."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.cfg, self.run_dir = cfg, run_dir
        self.cache = StageCache(cfg.cache_dir, stale_after=cfg.cache_lock_stale_s,
                                verify_after_days=cfg.cache_verify_after_days)
        self.stages: dict[str, StageRecord] = {}
        self.user = str(run_dir)

    def record(self, name: str, rec: StageRecord) -> StageRecord:
        """Keep the first record of a stage: a later lookup in the same cell is a cache hit of
        the artifact this cell just built, not a reuse from another cell."""
        return self.stages.setdefault(name, rec)

    def timed(self, name: str, fn, *args, **kwargs):
        """Time an uncached stage so metrics.json lists it beside the cached ones."""
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        self.record(name, StageRecord(key="-", cached=False, seconds=round(time.perf_counter() - t0, 3), path=""))
        return result


def _stage_model(section: DictConfig) -> DictConfig:
    """The model config a stage runs: a trained preset's ``base``, else the preset itself."""
    return section.base if section.kind == "trained" else section


def _caps(section: DictConfig, default: DictConfig) -> Caps:
    """A preset's own ``caps`` (a released checkpoint's evaluator budget) win over the global ones."""
    caps = section.caps if "caps" in section else default
    return Caps(description=caps.description, body=caps.body)


def encoder_text(cfg: DictConfig) -> TextSpec:
    enc = _stage_model(cfg.encoder)
    return TextSpec(mode=cfg.fields.mode, style=enc.get("text_style", "joined"), caps=_caps(enc, cfg.caps.encoder),
                    query_cap=enc.query_cap if "query_cap" in enc else cfg.caps.query,
                    query_instruction=enc.get("query_instruction", ""))


def reranker_text(cfg: DictConfig) -> TextSpec:
    rr = _stage_model(cfg.reranker)
    prompt_format = rr.get("prompt_format", "qwen3")
    return TextSpec(mode=cfg.fields.mode, style="joined" if prompt_format == "qwen3" else "skillrouter",
                    caps=_caps(rr, cfg.caps.reranker), query_cap=rr.query_cap if "query_cap" in rr else cfg.caps.query,
                    prompt_format=prompt_format)


def encoder_spec(enc: DictConfig) -> EncoderSpec:
    enc = _stage_model(enc)
    return EncoderSpec(model=enc.model, pooling=enc.pooling, max_seq_length=enc.max_seq_length,
                       query_instruction=enc.query_instruction, document_prefix=enc.document_prefix,
                       batch_size=enc.batch_size, padding_side=enc.get("padding_side"),
                       trust_remote_code=enc.get("trust_remote_code", False), backend=enc.get("backend", "torch"),
                       max_tokens=enc.get("max_tokens"))


@dataclass
class Retriever:
    """A first-stage retriever over one rendered pool: BM25, or a dense encoder with its pool
    embeddings (``model_path`` set when the encoder was fine-tuned in this grid)."""

    ids: list[str]
    texts: list[str]
    text: TextSpec
    bm25: dict[str, Any] | None = None
    spec: EncoderSpec | None = None
    pool: StageRecord | None = None
    model_path: str | None = None
    model_key: str | None = None

    def retrieve(self, ctx: CellContext, queries: list[Query], k: int) -> StageRecord:
        qtexts = [self.text.query(q.text) for q in queries]
        if self.bm25 is not None:
            return stages.retrieve_bm25(ctx.cache, self.bm25, self.texts, self.ids, queries, qtexts, k, ctx.user,
                                        ctx.cfg.progress)
        return stages.retrieve_dense(ctx.cache, self.spec, self.pool, queries, qtexts, k, ctx.user,
                                     model_path=self.model_path, model_key=self.model_key, progress=ctx.cfg.progress)


def dense_retriever(ctx: CellContext, enc: DictConfig, ids: list[str], texts: list[str], stage_name: str,
                    model_path: str | None = None, model_key: str | None = None) -> Retriever:
    spec = encoder_spec(enc)
    embed = ctx.cfg.embed
    plan = ShardPlan(shards=embed.shards, launcher=embed.launcher, slurm=OmegaConf.to_container(embed.slurm))
    pool = stages.embed_pool(ctx.cache, spec, texts, ids, ctx.user, model_path=model_path, model_key=model_key,
                             progress=ctx.cfg.progress, plan=plan)
    ctx.record(stage_name, pool)
    return Retriever(ids, texts, encoder_text(ctx.cfg), spec=spec, pool=pool, model_path=model_path, model_key=model_key)


def base_retriever(ctx: CellContext, enc: DictConfig, ids: list[str], texts: list[str], stage_name: str) -> Retriever:
    if enc.kind == "bm25":
        return Retriever(ids, texts, encoder_text(ctx.cfg), bm25=OmegaConf.to_container(enc))
    if enc.kind == "dense":
        return dense_retriever(ctx, enc, ids, texts, stage_name)
    raise ValueError(f"encoder.kind must be bm25, dense or trained, got {enc.kind!r}")


def training_examples(ctx: CellContext, dataset: Dataset, data: CellData) -> list[TrainExample]:
    pairs = data.file("train_pairs")
    if not pairs:
        raise DataError("config", None, "data.train_pairs", "training needs a pairs JSONL ({query, skill_id(s)})")
    benchmark = {g for q in dataset.queries for g in q.all_gt}
    return load_pairs(pairs, {s.id for s in dataset.skills}, benchmark,
                      ErrorPolicy(ctx.cfg.data.on_error, dataset.report))


def render_encoder_pool(cfg: DictConfig, skills: list[Skill], oracle: dict[str, str] | None) -> tuple[list[str], list[str]]:
    text = encoder_text(cfg)
    return [s.id for s in skills], [text.skill(s, oracle) for s in skills]


def trained_encoder(ctx: CellContext, dataset: Dataset, oracle: dict[str, str] | None,
                    data: CellData) -> StageRecord:
    """Mine negatives with the base encoder and BM25 over the training pool, filter them, fine-tune."""
    cfg, enc = ctx.cfg, ctx.cfg.encoder
    if enc.base.kind != "dense":
        raise ValueError("encoder=trained needs a dense encoder.base")
    examples = training_examples(ctx, dataset, data)
    tq = train_queries(examples)
    pool = dataset.training_pool()
    ids, texts = render_encoder_pool(cfg, pool, oracle)
    base = base_retriever(ctx, enc.base, ids, texts, "embed_pool_base")
    lexical = Retriever(ids, texts, TextSpec(mode=cfg.fields.mode, query_cap=base.text.query_cap),
                        bm25={"name": "bm25", "kind": "bm25", "k1": 1.5, "b": 0.75, "stopwords": "en"})
    depth = enc.negatives.depth
    sem = ctx.record("mine_semantic", base.retrieve(ctx, tq, depth))
    lex = ctx.record("mine_lexical", lexical.retrieve(ctx, tq, depth))
    lists = {}
    for name, rec in (("sem", sem), ("lex", lex)):
        rankings = stages.load_stage_rankings(rec)  # once per artifact, not once per training query
        lists[name] = [rankings[q.id].ids for q in tq]
    setup = EncoderTraining(spec=base.spec, loss=EncoderLoss(**enc.loss), negatives=NegativeCounts(**enc.negatives),
                            fn_filter=OmegaConf.to_container(cfg.fn_filter), train=TrainConfig(**enc.train, seed=cfg.seed))
    qtexts = [base.text.query(ex.query) for ex in examples]
    rec = train_encoder_stage(ctx.cache, setup, examples, dict(zip(ids, texts)), {s.id: s for s in pool}, qtexts,
                              base.pool, sem, lex, lists["sem"], lists["lex"], {g for q in dataset.queries for g in q.all_gt},
                              ctx.user)
    ctx.record("train_encoder", rec)
    atomic_write_json(ctx.run_dir / "fn_filter.json", json.loads((Path(rec.path) / "fn_filter.json").read_text()))
    return rec


def prepare_retriever(ctx: CellContext, dataset: Dataset, skills: list[Skill], oracle: dict[str, str] | None,
                      data: CellData, stage_name: str = "embed_pool") -> Retriever:
    """The cell's first-stage retriever over ``skills`` (fine-tuning the encoder first if asked)."""
    cfg = ctx.cfg
    ids, texts = render_encoder_pool(cfg, skills, oracle)
    if cfg.encoder.kind == "trained":
        rec = trained_encoder(ctx, dataset, oracle, data)
        return dense_retriever(ctx, cfg.encoder.base, ids, texts, stage_name, model_path=str(Path(rec.path) / "model"),
                               model_key=rec.key)
    return base_retriever(ctx, cfg.encoder, ids, texts, stage_name)


def reranker_spec(rr: DictConfig) -> RerankerSpec:
    return RerankerSpec(model=rr.model, head=rr.head, max_length=rr.max_length, instruction=rr.instruction,
                        batch_size=rr.batch_size, prompt_format=rr.get("prompt_format", "qwen3"),
                        body_max_tokens=rr.get("body_max_tokens", 4096), trust_remote_code=rr.get("trust_remote_code", False))


def rerank(ctx: CellContext, dataset: Dataset, oracle: dict[str, str] | None, rankings: dict[str, Ranking],
           data: CellData) -> dict[str, Ranking]:
    """Reorder each query's top ``topk`` with the configured reranker (trained here if asked)."""
    cfg, rr = ctx.cfg, ctx.cfg.reranker
    text = reranker_text(cfg)
    texts = {s.id: text.skill(s, oracle) for s in dataset.skills}
    model_key, model_path = "pretrained", None
    if rr.kind == "trained":
        examples = training_examples(ctx, dataset, data)
        tq = train_queries(examples)
        pool = dataset.training_pool()
        retriever = prepare_retriever(ctx, dataset, pool, oracle, data, "embed_pool_train")
        cands = retriever.retrieve(ctx, tq, rr.candidates)
        ctx.record("reranker_candidates", cands)
        cand_rankings = stages.load_stage_rankings(cands)
        train_texts = {s.id: texts[s.id] for s in pool}  # no distractors: one model serves both tiers
        rec = train_reranker_stage(ctx.cache, reranker_spec(rr.base), OmegaConf.to_container(cfg.loss),
                                   TrainConfig(**rr.train, seed=cfg.seed), rr.list_size, examples, cands,
                                   [cand_rankings[q.id].ids for q in tq], train_texts, ctx.user)
        ctx.record("train_reranker", rec)
        model_key, model_path = rec.key, str(Path(rec.path) / "model")
    params = {"reranker": OmegaConf.to_container(rr), "topk": cfg.topk, "query_cap": text.query_cap}
    if rr.kind == "trained":
        params["reranker"] = {"trained": True, "base": OmegaConf.to_container(rr.base)}
    qtexts = {q.id: text.query(q.text) for q in dataset.queries}
    rec = stages.rerank(ctx.cache, params, [model_key, ctx.stages["retrieve"].key, texts_fingerprint(list(texts.values()))],
                        lambda: make_list_scorer(rr, texts, model_path), rankings, dataset.queries, qtexts, cfg.topk,
                        ctx.user)
    ctx.record("rerank", rec)
    return stages.load_stage_rankings(rec)


def make_list_scorer(rr: DictConfig, texts: dict[str, str], model_path: str | None):
    """A (query, candidate ids) -> scores callable for the configured reranker."""
    if rr.kind == "llm_judge":
        return LLMJudge(JudgeSpec(url=rr.url, model=rr.model, api_key_env=rr.api_key_env, timeout=rr.timeout,
                                  max_chars_per_skill=rr.max_chars_per_skill), texts)
    scorer = make_scorer(reranker_spec(_stage_model(rr)), model_path=model_path)
    return lambda query, ids: scorer.score([query] * len(ids), [texts[i] for i in ids])


def rendered_examples(cfg: DictConfig, dataset: Dataset, oracle: dict[str, str] | None) -> dict[str, Any]:
    """The exact text of one skill and one query as each stage saw them: prompt wording is never ambiguous."""
    skill, query = dataset.skills[0], dataset.queries[0]
    enc, rr = encoder_text(cfg), reranker_text(cfg)
    return {"skill": {"id": skill.id, "encoder": enc.skill(skill, oracle), "reranker": rr.skill(skill, oracle)},
            "query": {"id": query.id, "encoder": enc.query(query.text), "reranker": rr.query(query.text)}}


def evaluate_cell(cfg: DictConfig, run_dir: Path, choices: dict[str, str]) -> tuple[dict[str, Any], dict[str, dict]]:
    """Run one cell end to end; return the ``metrics.json`` payload and the per-query metrics."""
    ctx = CellContext(cfg, run_dir)
    t0 = time.perf_counter()
    data = CellData(cfg, ctx.cache, ctx.user, ctx.record)
    dataset = data.dataset()
    oracle = data.oracle()
    atomic_write_json(run_dir / "rendered_examples.json", rendered_examples(cfg, dataset, oracle))
    retriever = prepare_retriever(ctx, dataset, dataset.skills, oracle, data)
    ctx.record("retrieve", retriever.retrieve(ctx, dataset.queries, cfg.retrieve_k))
    rankings = stages.load_stage_rankings(ctx.stages["retrieve"])
    if cfg.reranker.kind != "none":
        rankings = rerank(ctx, dataset, oracle, rankings, data)
    ordered = [rankings.get(q.id, Ranking(q.id, [], [])) for q in dataset.queries]
    result, rows = score_rankings(cfg, run_dir, dataset, ordered, choices, data.data, timed=ctx.timed)
    result["stages"] = {name: record_dict(rec) for name, rec in ctx.stages.items()}
    result["cache"] = {"quarantined": ctx.cache.quarantined}
    result["synth"] = data.synth.reports
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result, rows


def score_rankings(cfg: DictConfig, run_dir: Path, dataset: Dataset, ordered: list[Ranking], choices: dict[str, str],
                   data: dict[str, Any], timed=None) -> tuple[dict[str, Any], dict[str, dict]]:
    """Score a set of rankings (one per query, in query order) under the ``eval`` config, a cell's own
    or an external system's (``eval.score``): writes ``rankings.jsonl``, ``predictions.json`` and
    ``per_query.json`` to ``run_dir`` and returns the ``metrics.json`` payload and the per-query rows."""
    write_rankings(run_dir / "rankings.jsonl", ordered)
    write_predictions(run_dir / "predictions.json", ordered)
    metrics_spec = parse_metrics(cfg.eval.metrics)
    breakdown = list(cfg.eval.breakdown)
    by_qid = {r.qid: r.ids for r in ordered}
    rows = per_query_rows(by_qid, dataset.queries, metrics_spec)

    def aggregate():
        return aggregate_rows(rows, dataset.queries, metrics_spec, breakdown)

    metrics, counts = timed("evaluate", aggregate) if timed else aggregate()
    atomic_write_json(run_dir / "per_query.json", rows)
    return {
        "choices": choices, "metrics": metrics, "counts": counts, "n_queries": counts["all"], "status": "completed",
        "recall_curve": [round(r, 6) for r in recall_curve(by_qid, dataset.queries)],
        "eval": {"metrics": [m.name for m in metrics_spec], "breakdown": breakdown},
        "data": {"config": data, "tier": OmegaConf.to_container(cfg.tier), "n_skills": len(dataset.skills),
                 "skipped": dataset.report.skipped, "skip_examples": dataset.report.examples},
    }, rows


def run_cell(cfg: DictConfig, run_dir: Path, choices: dict[str, str], group: str,
             evaluate: Callable[[DictConfig, Path, dict[str, str]], tuple[dict, dict]] = evaluate_cell) -> dict[str, Any]:
    """Run a cell (``evaluate``: a grid cell, or scoring an external prediction file) and record its
    status; failures are written, logged in one line and re-raised."""
    run_dir.mkdir(parents=True, exist_ok=True)
    respect_cpu_allocation()
    atomic_write_json(run_dir / "status.json", {"status": "running", "started": time.time(), "choices": choices})
    atomic_write_json(run_dir / "provenance.json", provenance(cfg))
    tracker = make_tracker(cfg)
    tracker.start(cfg, choices, run_dir, group)
    try:
        result, rows = evaluate(cfg, run_dir, choices)
        tracker.log_result(result, rows)
    except Exception as exc:
        tracker.finish(failed=True)
        (run_dir / "error.txt").write_text(traceback.format_exc())
        failed = {"choices": choices, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}
        atomic_write_json(run_dir / "metrics.json", failed)
        atomic_write_json(run_dir / "status.json", {**failed, "ended": time.time()})
        log.error("cell failed: %s (traceback in %s)", failed["error"], run_dir / "error.txt")
        raise
    tracker.finish()
    atomic_write_json(run_dir / "metrics.json", result)
    atomic_write_json(run_dir / "status.json", {"status": "completed", "ended": time.time(), "choices": choices,
                                                "stages": result["stages"]})
    headline = " ".join(f"{k}={v:.4f}" for k, v in list(result["metrics"].items())[:3] if v is not None)
    log.info("%s (n=%d) -> %s", headline, result["n_queries"], run_dir / "metrics.json")
    return result

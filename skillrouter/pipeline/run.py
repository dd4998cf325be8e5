"""Run one grid cell: data -> fields -> retrieval [-> rerank] -> metrics, writing the run directory.

Every cell writes ``status.json`` when it starts and ``metrics.json`` (with its status) when it
ends, from inside the job, so a grid's state can be read from disk whatever the launcher did.
A failing cell records its error and never touches another cell's files.
"""
from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..data import DataError, Dataset, load_dataset, load_descriptions
from ..data.jsonl import atomic_write_json
from ..eval.metrics import aggregate, per_query
from ..fields import Caps, render_query, render_skill
from ..rankings import Ranking, write_rankings
from ..retrieval.dense import EncoderSpec
from .cache import StageCache, StageRecord, record_dict
from .provenance import provenance
from . import stages

log = logging.getLogger(__name__)


class CellContext:
    """The run directory, the cache and the stage records of one cell."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.cfg, self.run_dir = cfg, run_dir
        self.cache = StageCache(cfg.cache_dir, reuse=cfg.cache_reuse)
        self.stages: dict[str, StageRecord] = {}
        self.user = str(run_dir)

    def timed(self, name: str, fn, *args, **kwargs):
        """Time an uncached stage so metrics.json lists it beside the cached ones."""
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        self.stages[name] = StageRecord(key="-", cached=False, seconds=round(time.perf_counter() - t0, 3), path="")
        return result


def caps_of(cfg: DictConfig, stage: str) -> Caps:
    return Caps(description=cfg.caps[stage].description, body=cfg.caps[stage].body)


def encoder_spec(enc: DictConfig) -> EncoderSpec:
    return EncoderSpec(model=enc.model, pooling=enc.pooling, max_seq_length=enc.max_seq_length,
                       query_instruction=enc.query_instruction, document_prefix=enc.document_prefix,
                       batch_size=enc.batch_size)


def load_cell_data(ctx: CellContext) -> tuple[Dataset, dict[str, str] | None, dict[str, str | None]]:
    cfg = ctx.cfg
    data = cfg.data
    paths: dict[str, str | None] = {k: data.get(k) for k in stages.DATA_FILES}
    if data.get("builtin"):
        paths, ctx.stages["builtin_data"] = stages.builtin_data(ctx.cache, OmegaConf.to_container(data.builtin), ctx.user)
    if not paths["pool"] or not paths["queries"]:
        raise DataError("config", None, "data.pool/data.queries", "both paths are required (data=jsonl data.pool=PATH data.queries=PATH)")
    if cfg.tier.distractors and not paths["distractors"]:
        raise DataError("config", None, "data.distractors", "tier=hard needs a distractor JSONL")
    dataset = ctx.timed("load_data", load_dataset, paths["pool"], paths["queries"],
                        distractors=paths["distractors"] if cfg.tier.distractors else None,
                        pool_format=data.pool_format, queries_format=data.queries_format,
                        on_error=data.on_error, max_field_chars=data.max_field_chars)
    oracle = None
    if cfg.fields.mode == "oracle_nd":
        if not paths["oracle_nd"]:
            raise DataError("config", None, "data.oracle_nd", "fields=oracle_nd needs a JSONL of {id, description}")
        oracle = load_descriptions(paths["oracle_nd"])
    return dataset, oracle, paths


def retrieve(ctx: CellContext, dataset: Dataset, oracle: dict[str, str] | None) -> dict[str, Ranking]:
    cfg = ctx.cfg
    enc = cfg.encoder
    ids = [s.id for s in dataset.skills]
    texts = [render_skill(s, cfg.fields.mode, caps_of(cfg, "encoder"), oracle) for s in dataset.skills]
    if enc.kind == "bm25":
        rec = stages.retrieve_bm25(ctx.cache, OmegaConf.to_container(enc), texts, ids, dataset.queries,
                                   cfg.caps.query, cfg.retrieve_k, ctx.user, cfg.progress)
    elif enc.kind == "dense":
        spec = encoder_spec(enc)
        ctx.stages["embed_pool"] = stages.embed_pool(ctx.cache, spec, texts, ids, ctx.user, progress=cfg.progress)
        rec = stages.retrieve_dense(ctx.cache, spec, ctx.stages["embed_pool"], dataset.queries, cfg.caps.query,
                                    cfg.retrieve_k, ctx.user, progress=cfg.progress)
    else:
        raise ValueError(f"encoder.kind must be bm25 or dense, got {enc.kind!r}")
    ctx.stages["retrieve"] = rec
    return stages.load_stage_rankings(rec)


def rendered_examples(cfg: DictConfig, dataset: Dataset, oracle: dict[str, str] | None) -> dict[str, Any]:
    """The exact text of one skill and one query as each stage saw them: prompt wording is never ambiguous."""
    skill, query = dataset.skills[0], dataset.queries[0]
    return {
        "skill": {"id": skill.id,
                  "encoder": render_skill(skill, cfg.fields.mode, caps_of(cfg, "encoder"), oracle),
                  "reranker": render_skill(skill, cfg.fields.mode, caps_of(cfg, "reranker"), oracle)},
        "query": {"id": query.id,
                  "encoder": render_query(query.text, cfg.caps.query, cfg.encoder.get("query_instruction", "")),
                  "reranker": render_query(query.text, cfg.caps.query)},
    }


def evaluate_cell(cfg: DictConfig, run_dir: Path, choices: dict[str, str]) -> dict[str, Any]:
    """Run one cell end to end and return the ``metrics.json`` payload."""
    ctx = CellContext(cfg, run_dir)
    t0 = time.perf_counter()
    dataset, oracle, paths = load_cell_data(ctx)
    atomic_write_json(run_dir / "rendered_examples.json", rendered_examples(cfg, dataset, oracle))
    rankings = retrieve(ctx, dataset, oracle)
    ordered = [rankings.get(q.id, Ranking(q.id, [], [])) for q in dataset.queries]
    metrics, counts = ctx.timed("evaluate", aggregate, {r.qid: r.ids for r in ordered}, dataset.queries)
    write_rankings(run_dir / "rankings.jsonl", ordered)
    atomic_write_json(run_dir / "per_query.json", {q.id: per_query(r.ids, q) for q, r in zip(dataset.queries, ordered)})
    return {
        "choices": choices, "metrics": metrics, "counts": counts, "n_queries": counts["all"], "status": "completed",
        "stages": {name: record_dict(rec) for name, rec in ctx.stages.items()},
        "data": {"paths": {k: v for k, v in paths.items() if v}, "tier_distractors": bool(cfg.tier.distractors),
                 "pool_format": cfg.data.pool_format, "queries_format": cfg.data.queries_format,
                 "on_error": cfg.data.on_error, "max_field_chars": cfg.data.max_field_chars,
                 "n_skills": len(dataset.skills),
                 "skipped": dataset.report.skipped, "skip_examples": dataset.report.examples},
        "seconds": round(time.perf_counter() - t0, 3),
    }


def run_cell(cfg: DictConfig, run_dir: Path, choices: dict[str, str]) -> dict[str, Any]:
    """Run a cell and record its status; failures are written, logged in one line and re-raised."""
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "status.json", {"status": "running", "started": time.time(), "choices": choices})
    atomic_write_json(run_dir / "provenance.json", provenance(cfg))
    try:
        result = evaluate_cell(cfg, run_dir, choices)
    except Exception as exc:
        (run_dir / "error.txt").write_text(traceback.format_exc())
        failed = {"choices": choices, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}
        atomic_write_json(run_dir / "metrics.json", failed)
        atomic_write_json(run_dir / "status.json", {**failed, "ended": time.time()})
        log.error("cell failed: %s (traceback in %s)", failed["error"], run_dir / "error.txt")
        raise
    atomic_write_json(run_dir / "metrics.json", result)
    atomic_write_json(run_dir / "status.json", {"status": "completed", "ended": time.time(), "choices": choices,
                                                "stages": result["stages"]})
    log.info("hit@1=%.4f mrr@10=%.4f r@10=%.4f (n=%d) -> %s", result["metrics"]["hit@1"], result["metrics"]["mrr@10"],
             result["metrics"]["r@10"], result["n_queries"], run_dir / "metrics.json")
    return result

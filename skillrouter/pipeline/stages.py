"""The stages of one cell. Each reads only its slice of the config and its inputs' keys, and
publishes one artifact through the :class:`StageCache`, so cells that agree upstream share it."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from ..data import builtin, columnar, dataset as dataset_module, loaders, releases
from ..data.columnar import read_dataset, write_dataset
from ..data.dataset import load_source, source_files
from ..data.types import Dataset, Query
from ..rankings import Ranking, read_rankings, write_rankings
from ..rerank import reorder as reorder_module
from ..rerank.reorder import ListScorer, rerank_top_k
from ..retrieval import bm25 as bm25_module, dense as dense_module, index as index_module, onnx_backend
from ..retrieval.bm25 import bm25_search
from ..retrieval.dense import EXECUTION_ONLY, EncoderSpec, encode, load_encoder
from ..retrieval.index import exact_top_k
from .cache import StageCache, StageRecord, files_fingerprint, texts_fingerprint
from .shards import ShardPlan, embed_sharded, embedding_identity


def builtin_data(cache: StageCache, params: dict[str, Any], user: str) -> tuple[dict[str, str], StageRecord]:
    """Generate the built-in benchmark once per parameter set."""
    rec = cache.get_or_build("builtin_data", 1, params, [], lambda out: {"files": {k: str(v.name) for k, v in builtin.generate(out, **params).items()}},
                              code=[builtin], user=user)
    return {name: str(Path(rec.path) / f"{name}.jsonl") for name in builtin.FILES}, rec


LOAD_PARAMS = ("source", "pool_format", "queries_format", "on_error", "max_field_chars")


def load_data(cache: StageCache, data: dict[str, Any], tier: str, with_distractors: bool, user: str) -> tuple[Dataset, StageRecord]:
    """The parsed, validated dataset, stored columnar and keyed by the content of the files it was
    read from: the first cell parses and validates, every other cell reads columns."""
    params = {**{k: data.get(k) for k in LOAD_PARAMS}, "tier": tier, "distractors": with_distractors}
    inputs = [files_fingerprint(source_files(data, tier, with_distractors))]

    built: list[Dataset] = []

    def build(out: Path) -> dict[str, Any]:
        built.append(load_source(data, tier, with_distractors))
        write_dataset(built[0], out)
        return {"n_skills": len(built[0].skills), "n_queries": len(built[0].queries)}

    rec = cache.get_or_build("load_data", 1, params, inputs, build,
                             code=[loaders, releases, dataset_module, columnar], user=user)
    return (built[0] if built else read_dataset(Path(rec.path))), rec  # the builder keeps what it parsed


def _ranked(ids: list[str], idx: np.ndarray, scores: np.ndarray, qids: list[str]) -> list[Ranking]:
    return [Ranking(qid, [ids[j] for j in row if j >= 0], [float(s) for j, s in zip(row, srow) if j >= 0])
            for qid, row, srow in zip(qids, idx, scores)]


def encoder_model(cache: StageCache, spec: EncoderSpec, model_path: str | None, model_key: str | None, user: str):
    """The encoder to run: the sentence-transformers model, or for ``backend: onnx|onnx-int8`` its
    ONNX Runtime export (itself a cached stage, so a grid exports each model once)."""
    model = load_encoder(spec, model_path)
    if spec.backend == "torch":
        return model
    params = {k: v for k, v in asdict(spec).items() if k not in EXECUTION_ONLY}
    name = "model.int8.onnx" if spec.backend == "onnx-int8" else "model.onnx"

    def build(out: Path) -> dict[str, Any]:
        onnx_backend.export(model, out / "model.onnx")  # the model loaded above, not a second load
        if spec.backend == "onnx-int8":
            onnx_backend.quantize(out / "model.onnx", out / name)
            (out / "model.onnx").unlink()
        return {"file": name}

    rec = cache.get_or_build("export_onnx", 1, params, [model_key] if model_key else [], build, code=[onnx_backend],
                             user=user)
    return onnx_backend.OnnxEncoder(Path(rec.path) / name, model)


def embed_pool(cache: StageCache, spec: EncoderSpec, texts: list[str], ids: list[str], user: str,
               model_path: str | None = None, model_key: str | None = None, progress: bool = True,
               plan: ShardPlan = ShardPlan()) -> StageRecord:
    """Pool embeddings, stored float16, keyed by (model, rendered pool) and reused by any later run.
    With ``plan.shards > 1`` (or a SLURM launcher) they are built as shards in parallel jobs and
    merged (same key, same artifact: sharding is how it is computed, not what it is)."""
    params, inputs = embedding_identity(asdict(spec), ids, texts, model_key)

    def build(out: Path) -> dict[str, Any]:
        if plan.shards > 1 or plan.launcher == "slurm":
            emb = embed_sharded(cache, spec, texts, ids, plan, user, model_path, model_key)
        else:
            model = encoder_model(cache, spec, model_path, model_key, user)
            emb = encode(model, [spec.document_prefix + t for t in texts], spec.batch_size, progress, spec.max_tokens)
        np.save(out / "embeddings.npy", emb.astype(np.float16))
        (out / "ids.json").write_text(json.dumps(ids))
        return {"n": len(ids), "dim": int(emb.shape[1]), "shards": plan.shards}

    return cache.get_or_build("embed_pool", 1, params, inputs, build, code=[dense_module], user=user)


def retrieve_dense(cache: StageCache, spec: EncoderSpec, pool_rec: StageRecord, queries: list[Query], qtexts: list[str],
                   k: int, user: str, model_path: str | None = None, model_key: str | None = None,
                   progress: bool = True) -> StageRecord:
    """Top-k of the pool for each query; ``qtexts`` are the rendered queries (instruction included)."""
    params = {"encoder": {k: v for k, v in asdict(spec).items() if k not in ("batch_size", "max_tokens")}, "k": k}
    inputs = [pool_rec.key, texts_fingerprint([q.id for q in queries]), texts_fingerprint(qtexts)]

    def build(out: Path) -> dict[str, Any]:
        pool_dir = Path(pool_rec.path)
        ids = json.loads((pool_dir / "ids.json").read_text())
        emb = np.load(pool_dir / "embeddings.npy").astype(np.float32)
        model = encoder_model(cache, spec, model_path, model_key, user)
        idx, scores = exact_top_k(emb, encode(model, qtexts, spec.batch_size, progress, spec.max_tokens), k)
        write_rankings(out / "rankings.jsonl", _ranked(ids, idx, scores, [q.id for q in queries]), top_n=k)
        return {"n_queries": len(queries)}

    return cache.get_or_build("retrieve", 1, params, inputs, build, code=[dense_module, index_module], user=user)


def retrieve_bm25(cache: StageCache, enc_cfg: dict[str, Any], texts: list[str], ids: list[str], queries: list[Query],
                  qtexts: list[str], k: int, user: str, progress: bool = True) -> StageRecord:
    params = {"encoder": enc_cfg, "k": k}
    inputs = [texts_fingerprint(ids), texts_fingerprint(texts), texts_fingerprint([q.id for q in queries]), texts_fingerprint(qtexts)]

    def build(out: Path) -> dict[str, Any]:
        idx, scores = bm25_search(texts, qtexts, k, k1=enc_cfg["k1"], b=enc_cfg["b"], stopwords=enc_cfg.get("stopwords"),
                                  show_progress=progress)
        write_rankings(out / "rankings.jsonl", _ranked(ids, idx, scores, [q.id for q in queries]), top_n=k)
        return {"n_queries": len(queries)}

    return cache.get_or_build("retrieve", 1, params, inputs, build, code=[bm25_module], user=user)


def load_stage_rankings(rec: StageRecord) -> dict[str, Ranking]:
    return read_rankings(Path(rec.path) / "rankings.jsonl")



def rerank(cache: StageCache, params: dict[str, Any], inputs: list[str], make_scorer: Callable[[], ListScorer],
           rankings: dict[str, Ranking], queries: list[Query], qtexts: dict[str, str], k: int, user: str) -> StageRecord:
    """Reorder every query's top-k; the scorer (a model load) is only built when the artifact is.
    ``qtexts`` are the queries as the reranker reads them."""
    inputs = inputs + [texts_fingerprint([q.id for q in queries]), texts_fingerprint([qtexts[q.id] for q in queries])]

    def build(out: Path) -> dict[str, Any]:
        scorer = make_scorer()
        ordered = [rerank_top_k(rankings.get(q.id, Ranking(q.id, [], [])), qtexts[q.id], k, scorer)
                   for q in tqdm(queries, desc=f"rerank top-{k}", leave=False)]
        write_rankings(out / "rankings.jsonl", ordered, top_n=max(k, max((len(r.ids) for r in ordered), default=0)))
        return {"n_queries": len(queries), "judge_failures": getattr(scorer, "failures", 0)}

    return cache.get_or_build("rerank", 1, params, inputs, build, code=[reorder_module], user=user)

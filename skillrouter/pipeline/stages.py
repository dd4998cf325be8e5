"""The stages of one cell. Each reads only its slice of the config and its inputs' keys, and
publishes one artifact through the :class:`StageCache`, so cells that agree upstream share it."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from ..data import builtin
from ..data.types import Query
from ..rankings import Ranking, read_rankings, write_rankings
from ..rerank import reorder as reorder_module
from ..rerank.reorder import ListScorer, rerank_top_k
from ..retrieval import bm25 as bm25_module, dense as dense_module, index as index_module
from ..retrieval.bm25 import bm25_search
from ..retrieval.dense import EncoderSpec, encode, load_encoder
from ..retrieval.index import exact_top_k
from .cache import StageCache, StageRecord, texts_fingerprint

def builtin_data(cache: StageCache, params: dict[str, Any], user: str) -> tuple[dict[str, str], StageRecord]:
    """Generate the built-in benchmark once per parameter set."""
    rec = cache.get_or_build("builtin_data", 1, params, [], lambda out: {"files": {k: str(v.name) for k, v in builtin.generate(out, **params).items()}},
                              code=[builtin], user=user)
    return {name: str(Path(rec.path) / f"{name}.jsonl") for name in builtin.FILES}, rec


def _ranked(ids: list[str], idx: np.ndarray, scores: np.ndarray, qids: list[str]) -> list[Ranking]:
    return [Ranking(qid, [ids[j] for j in row if j >= 0], [float(s) for j, s in zip(row, srow) if j >= 0])
            for qid, row, srow in zip(qids, idx, scores)]


def embed_pool(cache: StageCache, spec: EncoderSpec, texts: list[str], ids: list[str], user: str,
               model_path: str | None = None, model_key: str | None = None, progress: bool = True) -> StageRecord:
    """Pool embeddings, stored float16, keyed by (model, rendered pool) and reused by any later run."""
    params = {k: v for k, v in asdict(spec).items() if k not in ("query_instruction", "batch_size")}
    inputs = [texts_fingerprint(ids), texts_fingerprint(texts)] + ([model_key] if model_key else [])

    def build(out: Path) -> dict[str, Any]:
        model = load_encoder(spec, model_path)
        emb = encode(model, [spec.document_prefix + t for t in texts], spec.batch_size, progress)
        np.save(out / "embeddings.npy", emb.astype(np.float16))
        (out / "ids.json").write_text(json.dumps(ids))
        return {"n": len(ids), "dim": int(emb.shape[1])}

    return cache.get_or_build("embed_pool", 1, params, inputs, build, code=[dense_module], user=user)


def retrieve_dense(cache: StageCache, spec: EncoderSpec, pool_rec: StageRecord, queries: list[Query], qtexts: list[str],
                   k: int, user: str, model_path: str | None = None, progress: bool = True) -> StageRecord:
    """Top-k of the pool for each query; ``qtexts`` are the rendered queries (instruction included)."""
    params = {"encoder": asdict(spec), "k": k}
    inputs = [pool_rec.key, texts_fingerprint([q.id for q in queries]), texts_fingerprint(qtexts)]

    def build(out: Path) -> dict[str, Any]:
        pool_dir = Path(pool_rec.path)
        ids = json.loads((pool_dir / "ids.json").read_text())
        emb = np.load(pool_dir / "embeddings.npy").astype(np.float32)
        model = load_encoder(spec, model_path)
        idx, scores = exact_top_k(emb, encode(model, qtexts, spec.batch_size, progress), k)
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

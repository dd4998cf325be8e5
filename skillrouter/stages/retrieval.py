"""Retrieval stages: pool embeddings (whole, or as shards merged in order), an encoder's ONNX export,
and top-k retrieval, dense or BM25, for the benchmark's queries or the training queries (negative
mining and reranker candidate lists read the same stages the evaluation does)."""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..data.types import Dataset, Query, Skill
from ..fields import TextSpec
from ..rankings import Ranking, write_rankings
from ..retrieval import bm25 as bm25_module, dense as dense_module, index as index_module, onnx_backend
from ..retrieval.bm25 import bm25_search
from ..retrieval.dense import EXECUTION_ONLY, EncoderSpec, encode, load_encoder
from ..retrieval.index import exact_top_k
from ..throughput import Throughput, combined
from ..data.pairs import TrainExample
from .data import read_descriptions, read_examples
from .graph import BuildContext, FileRef, Items, Stage, file_inputs, spec_dict

SUBSETS = ("all", "training")  # the whole pool, or without Hard-tier distractors (what training mines from)
QUERY_SETS = ("benchmark", "training")


def pool_of(dataset: Dataset, subset: str) -> list[Skill]:
    return dataset.training_pool() if subset == "training" else dataset.skills


def train_queries(examples: list[TrainExample]) -> list[Query]:
    """Training examples as queries, so the evaluation's retrieve stages serve negative mining and
    reranker candidate lists too."""
    return [Query(id=f"train-{i:06d}", text=ex.query, gt=ex.positives, skip=ex.skip) for i, ex in enumerate(examples)]


def skill_text(spec: TextSpec) -> dict[str, Any]:
    """The part of a rendering spec that shapes skill texts (the query settings do not)."""
    return {k: v for k, v in spec_dict(spec).items() if k not in ("query_cap", "query_instruction")}


def skill_renderer(params: Mapping[str, Any]) -> TextSpec:
    """How a stage renders skills, from its ``text`` params (made by :func:`skill_text`: no query settings)."""
    return TextSpec.from_dict({**params["text"], "query_cap": None, "query_instruction": ""})


def rendered_pool(ctx: BuildContext) -> tuple[list[str], list[str]]:
    """``(ids, texts)`` of the stage's pool as its ``text`` params render them."""
    text = skill_renderer(ctx.params)
    oracle = read_descriptions(ctx)
    skills = pool_of(ctx.dataset(), ctx.params["subset"])
    return [s.id for s in skills], [text.skill(s, oracle) for s in skills]


def _queries(ctx: BuildContext) -> list[Query]:
    if ctx.params["queries"] == "training":
        return train_queries(read_examples(ctx.input("pairs")))
    return ctx.dataset().queries


@functools.lru_cache(maxsize=2)
def _encoder(spec: EncoderSpec, model_path: str | None, onnx_file: str | None):
    """One load per process for the stages that run the same encoder one after the other."""
    model = load_encoder(spec, model_path)
    return onnx_backend.OnnxEncoder(Path(onnx_file), model) if onnx_file else model


def encoder_model(ctx: BuildContext):
    """The stage's encoder: fine-tuned (``model`` input) or not, in ONNX Runtime (``onnx`` input) or torch."""
    spec = EncoderSpec(**ctx.stage.options["spec"])
    model_path = str(ctx.input("model") / "model") if ctx.has("model") else None
    onnx_file = str(ctx.input("onnx") / ctx.manifest("onnx")["file"]) if ctx.has("onnx") else None
    return _encoder(spec, model_path, onnx_file), spec


def _identity(spec: EncoderSpec) -> dict[str, Any]:
    return {k: v for k, v in spec_dict(spec).items() if k not in EXECUTION_ONLY}


def _build_export(ctx: BuildContext) -> dict[str, Any]:
    spec = EncoderSpec(**ctx.stage.options["spec"])
    model = load_encoder(spec, str(ctx.input("model") / "model") if ctx.has("model") else None)
    name = "model.int8.onnx" if spec.backend == "onnx-int8" else "model.onnx"
    onnx_backend.export(model, ctx.out / "model.onnx")
    if spec.backend == "onnx-int8":
        onnx_backend.quantize(ctx.out / "model.onnx", ctx.out / name)
        (ctx.out / "model.onnx").unlink()
    return {"file": name}


def export_onnx(spec: EncoderSpec, model: Stage | None) -> Stage:
    """An encoder's ONNX Runtime export (``encoder.backend=onnx|onnx-int8``), made once per model."""
    return Stage("export_onnx", _build_export, _identity(spec), inputs={"model": model} if model else {}, resource="cpu", options={"spec": spec_dict(spec)}, code=(onnx_backend.__name__,))


def _model_inputs(model: Stage | None, onnx: Stage | None) -> dict[str, Stage]:
    return {**({"model": model} if model else {}), **({"onnx": onnx} if onnx else {})}


def _save_embeddings(out: Path, emb: np.ndarray) -> None:
    np.save(out / "embeddings.npy", emb.astype(np.float16))


def _embedded(ctx: BuildContext, texts: list[str]) -> tuple[np.ndarray, dict[str, Any]]:
    """The stage's encoder's embeddings of ``texts`` (documents) and what computing them took."""
    model, spec = encoder_model(ctx)
    meter = Throughput()
    emb = encode(model, [spec.document_prefix + t for t in texts], spec.batch_size, ctx.progress, spec.max_tokens,
                 bf16=spec.bf16, meter=meter)
    return emb, meter.record()


def _build_embed(ctx: BuildContext) -> dict[str, Any]:
    ids, texts = rendered_pool(ctx)
    emb, throughput = _embedded(ctx, texts)
    _save_embeddings(ctx.out, emb)
    (ctx.out / "ids.json").write_text(json.dumps(ids))
    return {"n": len(ids), "items": len(ids), "throughput": throughput}


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous, near-equal ranges covering ``range(n)`` (empty ones included, so shard i is always i)."""
    edges = [round(i * n / shards) for i in range(shards + 1)]
    return list(zip(edges, edges[1:]))


def _build_shard(ctx: BuildContext) -> dict[str, Any]:
    ids, texts = rendered_pool(ctx)
    a, b = shard_bounds(len(ids), ctx.params["of"])[ctx.params["shard"]]
    emb, throughput = _embedded(ctx, texts[a:b])
    _save_embeddings(ctx.out, emb)
    return {"n": b - a, "items": b - a, "throughput": throughput}


def _build_merge(ctx: BuildContext) -> dict[str, Any]:
    ids, _ = rendered_pool(ctx)
    parts = [np.load(ctx.cache.entry(s.kind, s.key) / "embeddings.npy") for s in ctx.stage.after]
    emb = np.concatenate([p for p in parts if p.size])
    np.save(ctx.out / "embeddings.npy", emb)
    (ctx.out / "ids.json").write_text(json.dumps(ids))
    shards = [ctx.cache.manifest(s.kind, s.key).get("throughput") for s in ctx.stage.after]
    return {"n": len(ids), "shards": len(parts), **({"throughput": combined(shards)} if all(shards) else {})}


def embed_pool(spec: EncoderSpec, text: TextSpec, data: Stage, subset: str, oracle: FileRef | None = None,
               model: Stage | None = None, onnx: Stage | None = None, shards: int = 1) -> Stage:
    """Pool embeddings, stored float16, keyed by the encoder and how the pool is rendered. With
    ``shards > 1`` they are built as that many ``embed_shard`` stages (side by side: a job array on a
    cluster) and merged in order; the key is the same either way."""
    if subset not in SUBSETS:
        raise ValueError(f"pool subset must be one of {SUBSETS}, got {subset!r}")
    refs, files, names, paths = file_inputs({"oracle": oracle})
    params = {"encoder": _identity(spec), "text": skill_text(text), "subset": subset, "files": names}
    inputs = {"data": data, **refs, **_model_inputs(model, onnx)}
    common = dict(inputs=inputs, files=files, resource="gpu", code=(dense_module.__name__,),
                  options={"spec": spec_dict(spec), "paths": paths},
                  items=Items("data", "n_training_pool" if subset == "training" else "n_skills"))
    if shards <= 1:
        return Stage("embed_pool", _build_embed, params, **common)
    parts = tuple(Stage("embed_shard", _build_shard, {**params, "shard": i, "of": shards}, **common) for i in range(shards))
    return Stage("embed_pool", _build_merge, params, **{**common, "resource": "cpu"}, cheap=True, after=parts)


def ranked(ids: list[str], idx: np.ndarray, scores: np.ndarray, qids: list[str]) -> list[Ranking]:
    """Search results (row indices into ``ids``, -1 for none) as one ranking per query."""
    return [Ranking(qid, [ids[j] for j in row if j >= 0], [float(s) for j, s in zip(row, srow) if j >= 0])
            for qid, row, srow in zip(qids, idx, scores)]


def _query_texts(ctx: BuildContext, queries: list[Query]) -> list[str]:
    text = TextSpec.from_dict(ctx.params["query_text"])
    return [text.query(q.text) for q in queries]


def _build_dense(ctx: BuildContext) -> dict[str, Any]:
    pool = ctx.input("pool")
    ids = json.loads((pool / "ids.json").read_text())
    emb = np.load(pool / "embeddings.npy").astype(np.float32)
    queries = _queries(ctx)
    model, spec = encoder_model(ctx)
    meter = Throughput()
    embedded = encode(model, _query_texts(ctx, queries), spec.batch_size, ctx.progress, spec.max_tokens, bf16=spec.bf16,
                      meter=meter)
    idx, scores = exact_top_k(emb, embedded, ctx.params["k"])
    write_rankings(ctx.out / "rankings.jsonl", ranked(ids, idx, scores, [q.id for q in queries]), top_n=ctx.params["k"])
    return {"n_queries": len(queries), "items": len(queries), "throughput": meter.record()}


def _build_bm25(ctx: BuildContext) -> dict[str, Any]:
    ids, texts = rendered_pool(ctx)
    queries = _queries(ctx)
    enc, k = ctx.params["encoder"], ctx.params["k"]
    idx, scores = bm25_search(texts, _query_texts(ctx, queries), k, k1=enc["k1"], b=enc["b"],
                              stopwords=enc.get("stopwords"), show_progress=ctx.progress)
    write_rankings(ctx.out / "rankings.jsonl", ranked(ids, idx, scores, [q.id for q in queries]), top_n=k)
    return {"n_queries": len(queries), "items": len(queries)}


def _query_inputs(queries: str, data: Stage, pairs: Stage | None) -> dict[str, Stage]:
    if queries not in QUERY_SETS:
        raise ValueError(f"query set must be one of {QUERY_SETS}, got {queries!r}")
    if queries == "training":
        if pairs is None:
            raise ValueError("retrieval for training queries needs the train_pairs stage")
        return {"data": data, "pairs": pairs}
    return {"data": data}


def _query_items(queries: str) -> Items:
    return Items("pairs", "n_examples") if queries == "training" else Items("data", "n_queries")


def retrieve_dense(spec: EncoderSpec, query_text: TextSpec, pool: Stage, data: Stage, k: int, queries: str = "benchmark",
                   pairs: Stage | None = None, model: Stage | None = None, onnx: Stage | None = None) -> Stage:
    """Top-k of the embedded pool per query. Cheap (seconds next to embedding the pool): on a cluster it
    runs in the job that embedded the pool."""
    params = {"encoder": {k: v for k, v in spec_dict(spec).items() if k not in ("batch_size", "max_tokens")}, "k": k,
              "queries": queries, "query_text": spec_dict(query_text)}
    return Stage("retrieve", _build_dense, params, inputs={"pool": pool, **_query_inputs(queries, data, pairs),
                                                           **_model_inputs(model, onnx)}, resource="gpu", cheap=True, options={"spec": spec_dict(spec)},
                 items=_query_items(queries), code=(dense_module.__name__, index_module.__name__))


def retrieve_bm25(bm25: dict[str, Any], text: TextSpec, query_text: TextSpec, data: Stage, subset: str, k: int,
                  queries: str = "benchmark", pairs: Stage | None = None, oracle: FileRef | None = None) -> Stage:
    """BM25 top-k over the rendered pool: a CPU stage, never on a GPU."""
    refs, files, names, paths = file_inputs({"oracle": oracle})
    params = {"encoder": bm25, "k": k, "queries": queries, "subset": subset, "text": skill_text(text),
              "query_text": spec_dict(query_text), "files": names}
    return Stage("retrieve", _build_bm25, params, inputs={**_query_inputs(queries, data, pairs), **refs}, files=files, resource="cpu", options={"paths": paths},
                 items=_query_items(queries), code=(bm25_module.__name__,))

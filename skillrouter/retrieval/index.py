"""Exact inner-product top-K search: FAISS on the GPU when a GPU FAISS build sees one (the ``[gpu]``
extra), a torch matmul on the GPU when only torch does, FAISS on the CPU otherwise. Exact search over
<= 100K vectors costs the same either way; what matters on a GPU is not copying the pool back."""
from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)


def _torch_top_k(docs: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    d = torch.from_numpy(docs).cuda(non_blocking=True)
    q = torch.from_numpy(queries).cuda(non_blocking=True)
    scores, idx = torch.topk(q @ d.T, min(k, len(docs)), dim=1)
    return idx.cpu().numpy(), scores.float().cpu().numpy()


def _faiss():
    """The ``faiss`` module, or None when it is not installed (a GPU machine may search with torch alone)."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def exact_top_k(doc_emb: np.ndarray, query_emb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, scores)`` of shape ``(n_queries, min(k, n_docs))``; vectors are expected unit-norm,
    so inner product is cosine. ``faiss`` is needed only where no GPU is: on one, a GPU FAISS build if there is
    one, else a torch matmul."""
    docs = np.ascontiguousarray(doc_emb, dtype=np.float32)
    queries = np.ascontiguousarray(query_emb, dtype=np.float32)
    k = min(k, len(docs))
    faiss = _faiss()
    if faiss is not None and faiss.get_num_gpus() > 0 and hasattr(faiss, "StandardGpuResources"):
        try:
            index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, faiss.IndexFlatIP(docs.shape[1]))
            index.add(docs)
            scores, idx = index.search(queries, k)
            return idx, scores
        except RuntimeError as exc:  # e.g. a wheel without kernels for this GPU
            log.warning("FAISS GPU index unavailable (%s); searching with torch", exc)
    found = _torch_top_k(docs, queries, k)
    if found is not None:
        return found
    if faiss is None:
        raise ModuleNotFoundError("exact search on the CPU needs faiss (pip install faiss-cpu)")
    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(docs)
    scores, idx = index.search(queries, k)
    return idx, scores

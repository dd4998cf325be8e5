"""Exact inner-product top-K search: FAISS on the GPU when FAISS sees one, on the CPU otherwise."""
from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)


def exact_top_k(doc_emb: np.ndarray, query_emb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, scores)`` of shape ``(n_queries, min(k, n_docs))``; vectors are expected unit-norm,
    so inner product is cosine."""
    import faiss

    docs = np.ascontiguousarray(doc_emb, dtype=np.float32)
    index = faiss.IndexFlatIP(docs.shape[1])
    if faiss.get_num_gpus() > 0 and hasattr(faiss, "StandardGpuResources"):
        try:
            index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
        except RuntimeError as exc:  # e.g. a wheel without kernels for this GPU
            log.warning("FAISS GPU index unavailable (%s); searching on the CPU", exc)
    index.add(docs)
    scores, idx = index.search(np.ascontiguousarray(query_emb, dtype=np.float32), min(k, len(docs)))
    return idx, scores

"""Lexical retrieval with bm25s over the rendered skill texts."""
from __future__ import annotations

import logging

import numpy as np


def bm25_search(docs: list[str], queries: list[str], k: int, k1: float = 1.5, b: float = 0.75,
                stopwords: str | None = "en", show_progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(indices, scores)`` of shape ``(len(queries), min(k, len(docs)))``, best first. bm25s draws
    its bars only on a terminal (in a log file they are one endless line)."""
    import bm25s

    from ..progress import on_terminal

    show_progress = show_progress and on_terminal()
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(bm25s.tokenize(docs, stopwords=stopwords, show_progress=show_progress), show_progress=show_progress)
    query_tokens = bm25s.tokenize(queries, stopwords=stopwords, show_progress=False)
    # numpy's top-k, never "auto": where JAX is installed (CUDA images ship it) auto picks it, and JAX's first call
    # takes 75 % of the GPU's memory for its own pool, which the model stages of the same node then lack
    idx, scores = retriever.retrieve(query_tokens, k=min(k, len(docs)), show_progress=show_progress,
                                     backend_selection="numpy")
    return np.asarray(idx), np.asarray(scores, dtype=np.float32)

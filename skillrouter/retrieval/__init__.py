"""First-stage retrieval over the whole pool: BM25, dense bi-encoders, exact top-K search."""

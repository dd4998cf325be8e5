"""How sequences become model batches: grouped longest first (similar lengths share a batch), sized by rows and by
a token budget, each padded only to its own longest sequence. The encoders, the rerankers and both trainers batch
through here, from token ids computed once (never inside a batch)."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def token_budget_batches(lengths: list[int], max_tokens: int | None, max_rows: int, packed: bool = False
                         ) -> list[list[int]]:
    """Indices grouped longest first into batches of at most ``max_rows`` rows whose size stays within ``max_tokens``
    (a single longer text gets a batch of its own): padded size (rows x longest), or with ``packed`` the sum of the
    lengths. No budget: rows only."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    size = 0
    for i in order:
        grown = size + lengths[i] if packed else (len(batches[-1]) + 1) * lengths[batches[-1][0]] if batches else 0
        if batches and len(batches[-1]) < max_rows and (max_tokens is None or grown <= max_tokens):
            batches[-1].append(i)
            size = grown
        else:
            batches.append([i])
            size = lengths[i]
    return batches


def padded(rows: Sequence[Sequence[int]], pad_id: int, types: Sequence[Sequence[int]] | None = None, left: bool = False
           ) -> dict[str, np.ndarray]:
    """``input_ids``, ``attention_mask`` (and ``token_type_ids`` when given) of rows padded to the longest, on the
    right or (``left``: decoders read the last position) on the left."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    kinds = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span], mask[i, span] = row, 1
        if types is not None:
            kinds[i, span] = types[i]
    return {"input_ids": ids, "attention_mask": mask, **({"token_type_ids": kinds} if types is not None else {})}

"""Reorder the encoder's top-K with a reranker; ranks beyond K keep the encoder's order (so R@50
stays defined). Reranked positions carry reranker scores, the tail keeps encoder scores."""
from __future__ import annotations

from typing import Callable, Sequence

from ..rankings import Ranking

# (query text, candidate skill ids) -> one score per candidate
ListScorer = Callable[[str, Sequence[str]], Sequence[float]]


def rerank_top_k(ranking: Ranking, query_text: str, k: int, score: ListScorer) -> Ranking:
    head_ids = ranking.ids[:k]
    if not head_ids:
        return ranking
    scores = list(score(query_text, head_ids))
    order = sorted(range(len(head_ids)), key=lambda j: (-scores[j], j))  # stable on ties
    return Ranking(ranking.qid, [head_ids[j] for j in order] + ranking.ids[k:],
                   [scores[j] for j in order] + ranking.scores[k:])

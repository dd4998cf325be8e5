"""Hard negatives per training query from four sources (SkillRouter's default mix of 10):
4 semantic neighbours from the base encoder's top 50, 3 lexical BM25 matches from the top 50,
2 skills of the same category as a positive, 1 random skill of another category.

The semantic and lexical candidate lists come from the same retrieve stages the evaluation uses
(so the base encoder's pool embeddings are computed once and shared); sampling within each
source is seeded. Every pick passes the false-negative filter; a rejected pick is replaced by the
next candidate of the same source.
"""
from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from ..data.types import Skill
from .fn_filter import FalseNegativeFilter
from ..data.pairs import TrainExample

SOURCES = ("semantic", "lexical", "category", "random")


@dataclass(frozen=True)
class NegativeCounts:
    semantic: int = 4
    lexical: int = 3
    category: int = 2
    random: int = 1
    depth: int = 50


def _pick(candidates: list[str], n: int, gt: tuple[str, ...], fn_filter: FalseNegativeFilter | None) -> list[str]:
    """The first ``n`` candidates the false-negative filter lets through."""
    picked: list[str] = []
    for cand in candidates:
        if len(picked) == n:
            break
        if fn_filter is None or fn_filter.keep(cand, gt):
            picked.append(cand)
    return picked


SPARE = 20  # candidates drawn beyond the count, so the false-negative filter can reject some


def _outside(rng: random.Random, all_ids: list[str], category_of: dict[str, str], cats: list[str], n: int) -> list[str]:
    """Up to ``n`` distinct random ids outside ``cats``: rejection sampling, so the cost does not grow
    with the pool (a pool almost entirely inside ``cats`` falls back to a scan)."""
    picked: dict[str, None] = {}
    for _ in range(20 * n):
        if len(picked) == n:
            return list(picked)
        cand = all_ids[rng.randrange(len(all_ids))]
        if category_of[cand] not in cats:
            picked[cand] = None
    others = [i for i in all_ids if category_of[i] not in cats] or all_ids
    return rng.sample(others, min(len(others), n))


def mine_negatives(examples: list[TrainExample], skills: list[Skill], semantic: list[list[str]], lexical: list[list[str]],
                   counts: NegativeCounts, fn_filter: FalseNegativeFilter | None, seed: int) -> tuple[list[list[str]], dict[str, int]]:
    """Return per example its negative ids, and how many each source contributed."""
    rng = random.Random(seed)
    by_category: dict[str, list[str]] = defaultdict(list)
    for s in skills:
        by_category[s.category or ""].append(s.id)
    category_of = {s.id: s.category or "" for s in skills}
    all_ids = [s.id for s in skills]
    contributed = dict.fromkeys(SOURCES, 0)
    out: list[list[str]] = []
    for ex, sem, lex in zip(examples, semantic, lexical):
        cats = sorted({category_of.get(p, "") for p in ex.positives} - {""})
        same = [i for c in cats for i in rng.sample(by_category[c], min(len(by_category[c]), SPARE + counts.category))]
        sources = (("semantic", sem[: counts.depth], counts.semantic),
                   ("lexical", lex[: counts.depth], counts.lexical),
                   ("category", same, counts.category),
                   ("random", _outside(rng, all_ids, category_of, cats, SPARE + counts.random), counts.random))
        chosen: list[str] = []
        for source, pool, n in sources:
            candidates = [c for c in pool if c not in ex.positives and c not in chosen]
            rng.shuffle(candidates)
            picked = _pick(candidates, n, ex.positives, fn_filter)
            chosen += picked
            contributed[source] += len(picked)
        out.append(chosen)
    return out, contributed

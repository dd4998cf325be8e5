"""The dev split a study tunes on: queries kept out of training and scored against the training pool.

A tuned hyperparameter chosen on the test queries overstates the test metric, so a study's objective reads
a dev split instead, from one of two sources:

* ``data.dev_queries=FILE``: the user's dev queries (any queries format the benchmark loaders read); training
  pairs with the same query text are dropped from training, and counted;
* otherwise a seeded share (``data.dev_share``, ``data.dev_seed``) carved away from training, by ``data.dev_unit``:
  ``skill`` (the default) holds out that share of the training positives' skills with every query that names one,
  so no model trains on a dev query's skills, as none trains on a test query's (benchmark-labelled skills are never
  training positives); ``query`` holds out that share of the distinct query texts (their skills stay in training
  through the other queries: a dev score then favours whatever learned those skills). A dev query's positives (over
  all its pairs) become its ground truth.

:func:`describe` is what every output records of the split: its source, sizes, seed and a digest of the texts."""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from .pairs import TrainExample
from .types import DataError, Query


@dataclass(frozen=True)
class DevSplit:
    """The training examples left to train on, the dev queries, and how many examples were held out."""

    train: list[TrainExample]
    queries: list[Query]
    held_examples: int


UNITS = ("skill", "query")


def _held_texts(examples: list[TrainExample], share: float, seed: int, source: str, unit: str) -> set[str]:
    """The query texts a split holds out: those naming a sampled share of the positive skills (``skill``), or a
    sampled share of the texts (``query``)."""
    if unit not in UNITS:
        raise DataError("config", None, "data.dev_unit", f"must be one of {', '.join(UNITS)}, got {unit!r}")
    pool = sorted({p for ex in examples for p in ex.positives}) if unit == "skill" else sorted({ex.query for ex in examples})
    n = max(1, round(share * len(pool)))
    if n >= len(pool):
        raise DataError(source, None, "query", f"{len(pool)} distinct training {'positive skills' if unit == 'skill' else 'queries'}: "
                        f"a dev share of {share} leaves none to train on")
    sampled = set(random.Random(seed).sample(pool, n))
    held = {ex.query for ex in examples if (set(ex.positives) & sampled if unit == "skill" else ex.query in sampled)}
    if len(held) == len({ex.query for ex in examples}):
        raise DataError(source, None, "query", f"every training query names one of the {n} dev skills: a dev share of "
                        f"{share} leaves none to train on")
    return held


def carve(examples: list[TrainExample], share: float, seed: int, source: str, unit: str = "skill") -> DevSplit:
    """Hold out ``share`` of the positive skills (with every query naming one) or of the distinct query texts of
    ``examples`` (``source``: where they came from, for errors)."""
    if not 0 < share < 1:
        raise DataError("config", None, "data.dev_share", f"must be between 0 and 1 (exclusive), got {share}")
    held = _held_texts(examples, share, seed, source, unit)
    positives: dict[str, dict[str, None]] = {t: {} for t in sorted(held)}
    skips: dict[str, dict[str, None]] = {t: {} for t in sorted(held)}
    for ex in examples:
        if ex.query in held:
            positives[ex.query].update(dict.fromkeys(ex.positives))
            skips[ex.query].update(dict.fromkeys(ex.skip))
    queries = [Query(id=f"dev-{i:05d}", text=t, gt=tuple(p), all_gt=tuple(p), skip=tuple(s for s in skips[t] if s not in p))
               for i, (t, p) in enumerate(positives.items())]
    train = [ex for ex in examples if ex.query not in held]
    return DevSplit(train, queries, len(examples) - len(train))


def given(examples: list[TrainExample], queries: list[Query]) -> DevSplit:
    """The user's dev queries; training keeps none of their texts."""
    texts = {q.text for q in queries}
    train = [ex for ex in examples if ex.query not in texts]
    return DevSplit(train, queries, len(examples) - len(train))


def describe(split: DevSplit, source: dict[str, Any]) -> dict[str, Any]:
    """What a cell records of its dev split (``source``: the file, or the share and seed)."""
    digest = hashlib.sha256("\n".join(sorted(q.text for q in split.queries)).encode()).hexdigest()[:16]
    return {**source, "n_queries": len(split.queries), "held_out_examples": split.held_examples,
            "train_examples": len(split.train), "queries_sha256": digest}

"""The dev split as a training watches it (early stopping): after each epoch, the cell's objective on the queries
held out of training, one value per query, so a curve can say when it is flat.

Each is a plain, picklable object (a data-parallel training ships it to every process): the reranker's reorders each
dev query's first-stage head by the model's scores, the encoder's embeds the dev pool and queries and ranks. Turning
rankings into the objective (``objective``: the metric code lives in ``skillrouter.eval``, which training does not
import) is the stage's, handed in as a module-level function. A training watches it through :func:`metered`, so its
passes are counted apart from the steps'."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..retrieval.dense import encode
from ..retrieval.index import exact_top_k
from ..throughput import ModelFlops, Throughput

Objective = Callable[[Mapping[str, Sequence[str]]], list[float]]  # ranked ids per dev query id -> per-query values


@dataclass(frozen=True)
class RerankerDev:
    """Dev queries (as the reranker reads them) with their first-stage rankings; the model reorders each head."""

    qids: tuple[str, ...]
    queries: tuple[str, ...]
    rankings: tuple[tuple[str, ...], ...]
    depth: int
    texts: Mapping[str, str]  # the reranker's text of every head skill
    objective: Objective
    objective_name: str = "objective"

    def __call__(self, scorer, meter: Throughput) -> list[float]:
        """The objective per dev query; ``meter`` gets the pairs scored and the time, in place of the scorer's own."""
        heads = [r[:self.depth] for r in self.rankings]
        own, scorer.meter = scorer.meter, meter
        try:
            with meter.timed():
                scores = scorer.score([q for q, head in zip(self.queries, heads) for _ in head],
                                      [self.texts[i] for head in heads for i in head])
        finally:
            scorer.meter = own
        ranked, offset = {}, 0
        for qid, ranking, head in zip(self.qids, self.rankings, heads):
            mine = scores[offset:offset + len(head)]
            offset += len(head)
            order = sorted(range(len(head)), key=lambda j: -mine[j])  # stable: the first stage's order on ties
            ranked[qid] = [head[j] for j in order] + list(ranking[self.depth:])
        return self.objective(ranked)


@dataclass(frozen=True)
class EncoderDev:
    """Dev queries (with the encoder's instruction) and the pool they are ranked in (with its document prefix)."""

    qids: tuple[str, ...]
    queries: tuple[str, ...]
    pool_ids: tuple[str, ...]
    pool_texts: tuple[str, ...]
    depth: int
    batch_size: int
    objective: Objective
    objective_name: str = "objective"
    bf16: bool = False

    def __call__(self, model, meter: Throughput) -> list[float]:
        """The objective per dev query; ``meter`` gets the pool's and the queries' tokens and time."""
        docs = encode(model, list(self.pool_texts), self.batch_size, False, bf16=self.bf16, meter=meter)
        queries = encode(model, list(self.queries), self.batch_size, False, bf16=self.bf16, meter=meter)
        idx, _ = exact_top_k(docs, queries, self.depth)
        return self.objective({qid: [self.pool_ids[j] for j in row if j >= 0] for qid, row in zip(self.qids, idx)})


@dataclass(frozen=True)
class MeteredDev:
    """A dev split whose passes go to a meter of their own (one forward pass each, timed): the training's meter then
    holds its steps alone, as its tokens/s and FLOPs per step claim. Scored on the training's meter, a reranker's dev
    pairs had counted as three passes each with none of their time: a quarter of a built-in training's tokens."""

    dev: RerankerDev | EncoderDev
    meter: Throughput

    @property
    def objective_name(self) -> str:
        return self.dev.objective_name

    def __call__(self, model) -> list[float]:
        return self.dev(model, self.meter)


def metered(dev: RerankerDev | EncoderDev | None, flops: ModelFlops | None) -> tuple[MeteredDev | None, Throughput]:
    """The dev split a training watches (None without one) and the meter its passes go to."""
    meter = Throughput(flops=flops, passes=1)
    return (MeteredDev(dev, meter) if dev is not None else None), meter


def training_figures(steps: Throughput, dev: Throughput) -> dict[str, Any]:
    """What a training's ``metrics.json`` says of its throughput: its steps', with its dev passes' under ``dev``."""
    return {**steps.record(), **({"dev": dev.record()} if dev.sequences else {})}

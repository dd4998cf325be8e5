"""The one per-query ranking record that flows from retrieval through reranking into metrics,
reports, W&B tables and significance tests, and its ``rankings.jsonl`` form."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .data.jsonl import atomic_write_jsonl, read_jsonl

TOP_N = 50


@dataclass
class Ranking:
    qid: str
    ids: list[str]
    scores: list[float]

    def top(self, n: int) -> Ranking:
        return Ranking(self.qid, self.ids[:n], self.scores[:n])


def write_rankings(path: str | Path, rankings: list[Ranking], top_n: int = TOP_N) -> None:
    """``{"qid": ..., "ranked": [[skill_id, score], ...]}`` per line, best first, ``top_n`` long."""
    atomic_write_jsonl(path, ({"qid": r.qid, "ranked": [[i, round(float(s), 6)] for i, s in zip(r.ids[:top_n], r.scores[:top_n])]}
                              for r in rankings))


def read_rankings(path: str | Path) -> dict[str, Ranking]:
    out: dict[str, Ranking] = {}
    for _, rec in read_jsonl(path):
        ranked = rec.get("ranked") or []
        out[str(rec["qid"])] = Ranking(str(rec["qid"]), [str(i) for i, _ in ranked], [float(s) for _, s in ranked])
    return out

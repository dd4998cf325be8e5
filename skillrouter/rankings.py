"""The one per-query ranking record that flows from retrieval through reranking into metrics,
reports, W&B tables and significance tests, and its ``rankings.jsonl`` form."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .data.types import DataError
from .data.jsonl import atomic_write_json, atomic_write_jsonl, read_json, read_jsonl

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
    for lineno, rec in read_jsonl(path):
        ranked = rec.get("ranked")
        if "qid" not in rec or not isinstance(ranked, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], (int, float)) for p in ranked):
            raise DataError(str(path), lineno, "ranked", "expected {\"qid\", \"ranked\": [[skill_id, score], ...]}")
        out[str(rec["qid"])] = Ranking(str(rec["qid"]), [i for i, _ in ranked], [float(s) for _, s in ranked])
    return out


def write_predictions(path: str | Path, rankings: list[Ranking], top_n: int = TOP_N) -> None:
    """The SkillRouter release's prediction file: ``{task_id: [skill_id, ...]}``, best first."""
    atomic_write_json(path, {r.qid: r.ids[:top_n] for r in rankings})


def read_external(path: str | Path, queries: list) -> tuple[dict[str, list[str]], int]:
    """Rankings of an external system, keyed by our query ids, and how many entries matched no query.

    Formats: the SkillRouter release's ``{task_id: [skill_id, ...]}`` JSON; R3's ``infer.py`` output
    ``{"query", "top_k": [{"id", "score"}, ...]}`` JSONL (matched by query text, repeated texts in
    file order); our ``rankings.jsonl``.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(str(path), None, None, "file not found")
    if path.suffix == ".json":
        raw = read_json(path)
        if not isinstance(raw, dict):
            raise DataError(str(path), None, None, "expected an object {task_id: [skill_id, ...]}")
        for qid, ids in raw.items():
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise DataError(str(path), qid, None, "expected a list of skill-id strings")
        known = {q.id for q in queries}
        return {str(k): v for k, v in raw.items() if k in known}, sum(1 for k in raw if k not in known)
    records = list(read_jsonl(path))
    if records and "top_k" in records[0][1]:
        by_text: dict[str, list[str]] = {}
        for q in queries:
            by_text.setdefault(q.text, []).append(q.id)
        out: dict[str, list[str]] = {}
        unmatched = 0
        for lineno, rec in records:
            top = rec.get("top_k")
            if not isinstance(rec.get("query"), str) or not isinstance(top, list) or not all(
                    isinstance(t, dict) and isinstance(t.get("id"), str) for t in top):
                raise DataError(str(path), lineno, "top_k", "expected {\"query\": str, \"top_k\": [{\"id\", \"score\"}]}")
            waiting = by_text.get(rec["query"])
            if not waiting:
                unmatched += 1
                continue
            out[waiting.pop(0)] = [t["id"] for t in top]
        return out, unmatched
    known = {q.id for q in queries}
    rankings = read_rankings(path)
    return {k: r.ids for k, r in rankings.items() if k in known}, sum(1 for k in rankings if k not in known)

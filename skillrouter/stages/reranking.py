"""Reranking stages. A pointwise reranker's score of a (query, skill) pair does not depend on how many
candidates are reranked, so ``score_pairs`` scores each query's first ``depth`` candidates once — the
deepest ``topk`` of the grid — and a cheap ``rerank`` per ``topk`` reorders the head from those scores:
the rankings of scoring each K on its own, at the cost of the deepest K. A listwise scorer (the LLM
judge) sees the whole head at once, so it keeps one stage per K."""
from __future__ import annotations

import json
import statistics
from typing import Any, Callable, Mapping, Sequence

from ..fields import TextSpec
from ..rankings import Ranking, read_rankings, write_rankings
from ..rerank import llm_judge as judge_module, reorder as reorder_module
from ..rerank.llm_judge import JudgeSpec, LLMJudge
from ..rerank.reorder import rerank_top_k
from ..rerank.spec import RerankerSpec
from ..progress import progress
from .data import read_descriptions
from .graph import BuildContext, FileRef, Items, Stage, file_inputs, spec_dict
from .retrieval import skill_renderer, skill_text

SCORES = "scores.jsonl"
SCORERS = "skillrouter.rerank.scorers"  # named, not imported: it loads torch


def _texts(ctx: BuildContext, ids: set[str]) -> dict[str, str]:
    """The reranker's text of each candidate (only the candidates: a pool can be 100K skills)."""
    text = skill_renderer(ctx.params)
    oracle = read_descriptions(ctx)
    return {s.id: text.skill(s, oracle) for s in ctx.dataset().skills if s.id in ids}


def _heads(ctx: BuildContext, depth: int) -> tuple[list[Ranking], dict[str, str], dict[str, str]]:
    """The retrieval rankings (query order), each query's reranker text and the candidates' texts."""
    rankings = list(read_rankings(ctx.input("retrieval") / "rankings.jsonl").values())
    query = TextSpec.from_dict(ctx.params["query_text"])
    qtexts = {q.id: query.query(q.text) for q in ctx.dataset().queries}
    return rankings, qtexts, _texts(ctx, {i for r in rankings for i in r.ids[:depth]})


def _reorder(ctx: BuildContext, rankings: list[Ranking], k: int, score: Callable[[Ranking, Sequence[str]], Sequence[float]]
             ) -> int:
    """Write every query's ranking with its top ``k`` reordered by ``score(ranking, head ids)``; returns
    the query count."""
    with progress(len(rankings), f"rerank top-{k}", "queries", ctx.progress) as bar:
        ordered = []
        for r in rankings:
            ordered.append(rerank_top_k(r, r.qid, k, lambda _qid, ids, r=r: score(r, ids)))
            bar.update()
    write_rankings(ctx.out / "rankings.jsonl", ordered, top_n=max(k, max((len(r.ids) for r in ordered), default=0)))
    return len(ordered)


def _build_scores(ctx: BuildContext) -> dict[str, Any]:
    depth = ctx.params["depth"]
    rankings, qtexts, texts = _heads(ctx, depth)
    from ..rerank.scorers import make_scorer  # torch: in the job that scores, not in every job that plans

    spec = RerankerSpec(**ctx.stage.options["spec"])
    scorer = make_scorer(spec, model_path=str(ctx.input("model") / "model") if ctx.has("model") else None)
    kept: list[tuple[int, int, int, int]] = []
    with progress(len(rankings), f"score top-{depth} pairs", "queries", ctx.progress) as bar, \
            open(ctx.out / SCORES, "w", encoding="utf-8") as fh:
        for r in rankings:
            ids = r.ids[:depth]
            pairs = [qtexts.get(r.qid, "")] * len(ids), [texts[i] for i in ids]
            scores = scorer.score(*pairs) if ids else []
            if ids and hasattr(scorer, "kept_tokens"):
                kept += scorer.kept_tokens(*pairs)
            fh.write(json.dumps({"qid": r.qid, "ids": ids, "scores": [float(s) for s in scores]}) + "\n")
            bar.update()
    return {"n_queries": len(rankings), "pairs": sum(min(depth, len(r.ids)) for r in rankings), "items": len(rankings),
            **({"truncation": truncation_summary(kept, spec)} if kept else {})}


def truncation_summary(kept: list[tuple[int, int, int, int]], spec: RerankerSpec) -> dict[str, Any]:
    """What the reranker saw of its pairs: median tokens of query and skill before and after truncation, and the
    share of pairs whose query or skill was cut (at ``max_length``, the query first where ``query_max_tokens`` is set)."""
    def median(values: list[int]) -> float:
        return float(statistics.median(values))

    return {"max_length": spec.max_length, "query_max_tokens": spec.query_max_tokens, "pairs": len(kept),
            "query_tokens": median([k[0] for k in kept]), "query_kept": median([k[1] for k in kept]),
            "skill_tokens": median([k[2] for k in kept]), "skill_kept": median([k[3] for k in kept]),
            "queries_cut": round(sum(k[1] < k[0] for k in kept) / len(kept), 4),
            "skills_cut": round(sum(k[3] < k[2] for k in kept) / len(kept), 4)}


def score_pairs(spec: RerankerSpec, trained: bool, depth: int, text: TextSpec, query_text: TextSpec, retrieval: Stage,
                data: Stage, model: Stage | None = None, oracle: FileRef | None = None) -> Stage:
    """A pointwise reranker's score of each query's first ``depth`` retrieved candidates."""
    refs, files, names, paths = file_inputs({"oracle": oracle})
    identity = {k: v for k, v in spec_dict(spec).items() if k != "batch_size"}
    params = {"reranker": {"trained": trained, **identity}, "depth": depth, "text": skill_text(text),
              "query_text": spec_dict(query_text), "files": names}
    return Stage("score_pairs", _build_scores, params,
                 inputs={"retrieval": retrieval, "data": data, **({"model": model} if model else {}), **refs}, files=files, resource="gpu", options={"spec": spec_dict(spec), "paths": paths},
                 items=Items("data", "n_queries", "depth"), code=(SCORERS,))


def _build_reorder(ctx: BuildContext) -> dict[str, Any]:
    rankings = list(read_rankings(ctx.input("retrieval") / "rankings.jsonl").values())
    scored: dict[str, dict[str, float]] = {}
    with open(ctx.input("scores") / SCORES, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            scored[row["qid"]] = dict(zip(row["ids"], row["scores"]))
    k = ctx.params["k"]
    n = _reorder(ctx, rankings, k, lambda r, ids: [scored[r.qid][i] for i in ids])
    return {"n_queries": n}


def rerank(k: int, scores: Stage, retrieval: Stage) -> Stage:
    """Each query's top ``k`` reordered by the pair scores already computed (a few seconds: cheap)."""
    return Stage("rerank", _build_reorder, {"k": k}, inputs={"scores": scores, "retrieval": retrieval}, cheap=True, code=(reorder_module.__name__,))


def _build_judge(ctx: BuildContext) -> dict[str, Any]:
    k = ctx.params["k"]
    rankings, qtexts, texts = _heads(ctx, k)
    judge = LLMJudge(JudgeSpec(**{**ctx.params["reranker"], **ctx.stage.options["endpoint"]}), texts)
    n = _reorder(ctx, rankings, k, lambda r, ids: judge(qtexts.get(r.qid, ""), ids))
    return {"n_queries": n, "judge_failures": judge.failures, "items": n}


def judge_rerank(judge: Mapping[str, Any], k: int, text: TextSpec, query_text: TextSpec, retrieval: Stage, data: Stage,
                 oracle: FileRef | None = None) -> Stage:
    """An LLM judge picks one of each query's top ``k`` (listwise: one stage per K)."""
    refs, files, names, paths = file_inputs({"oracle": oracle})
    params = {"reranker": {"model": judge["model"], "max_chars_per_skill": judge["max_chars_per_skill"]}, "k": k,
              "text": skill_text(text), "query_text": spec_dict(query_text), "files": names}
    endpoint = {"url": judge["url"], "api_key_env": judge["api_key_env"], "timeout": judge["timeout"]}
    return Stage("rerank", _build_judge, params, inputs={"retrieval": retrieval, "data": data, **refs}, files=files, resource="llm", options={"endpoint": endpoint, "paths": paths},
                 items=Items("data", "n_queries"), code=(reorder_module.__name__, judge_module.__name__))

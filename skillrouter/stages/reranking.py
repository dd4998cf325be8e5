"""Reranking stages. A pointwise reranker's score of a (query, skill) pair does not depend on how many
candidates are reranked, so ``score_pairs`` scores each query's first ``depth`` candidates once — the
deepest ``topk`` of the grid — and a cheap ``rerank`` per ``topk`` reorders the head from those scores:
the rankings of scoring each K on its own, at the cost of the deepest K. A listwise scorer (the LLM
judge) sees the whole head at once, so it keeps one stage per K.

``rerank`` also fuses the reranker's scores with the first stage's (``fusion``: :mod:`skillrouter.rerank.fusion`),
from the same cached pair scores: sweeping the fusion weight scores no pair again. ``fusion.alpha=dev`` reads the
weight from a ``fusion_weight`` stage, which chooses it on the dev split (the reranker's scores of the dev queries'
heads, from their own ``score_pairs``) by the cell's ``objective``; the test split is never read for it."""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..fields import TextSpec
from ..rankings import Ranking, read_rankings, write_rankings
from ..eval.metrics import aggregate_rows, parse_metrics, per_query_rows
from ..rerank import fusion as fusion_module, llm_judge as judge_module, reorder as reorder_module
from ..rerank.fusion import ALPHA_GRID, Fusion, fuse, one_standard_error
from ..rerank.llm_judge import JudgeSpec, LLMJudge
from ..rerank.reorder import rerank_top_k
from ..rerank.spec import PAIR_HEADS, RerankerSpec
from ..progress import progress
from ..synth.client import URL_ENV
from ..throughput import Throughput, model_flops
from .data import read_descriptions
from .graph import BuildContext, FileRef, Items, Stage, file_inputs, spec_dict
from .retrieval import skill_renderer, skill_text

SCORES = "scores.jsonl"
SCORERS = "skillrouter.rerank.scorers"  # named, not imported: it loads torch
SCORE_LAYER = "skillrouter.rerank.score_layer"  # bf16 scoring's fp32 score layer (not training's: not in its key)
ONNX_BACKENDS = ("onnx", "onnx-int8")
BACKENDS = ("torch", "bf16", *ONNX_BACKENDS)  # reranker.backend


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


HeadScore = Callable[[Ranking, Sequence[str]], Sequence[float]]  # (a ranking, its head's ids) -> their scores


def _reordered(r: Ranking, k: int, score: HeadScore) -> Ranking:
    """``r`` with its top ``k`` reordered by ``score(r, head ids)``."""
    return rerank_top_k(r, r.qid, k, lambda _qid, ids: score(r, ids))


def _reorder(ctx: BuildContext, rankings: list[Ranking], k: int, score: HeadScore) -> int:
    """Write every query's ranking with its top ``k`` reordered by ``score(ranking, head ids)``; returns
    the query count."""
    with progress(len(rankings), f"rerank top-{k}", "queries", ctx.progress) as bar:
        ordered = []
        for r in rankings:
            ordered.append(_reordered(r, k, score))
            bar.update()
    write_rankings(ctx.out / "rankings.jsonl", ordered, top_n=max(k, max((len(r.ids) for r in ordered), default=0)))
    return len(ordered)


def pair_scorer(ctx: BuildContext) -> tuple[Any, RerankerSpec]:
    """The stage's reranker: fine-tuned (``model`` input) or not, in ONNX Runtime (``onnx`` input) or torch."""
    from ..rerank.scorers import make_scorer  # torch: in the job that scores, not in every job that plans

    spec = RerankerSpec(**ctx.stage.options["spec"])
    onnx = (str(ctx.input("onnx")), ctx.manifest("onnx")["file"]) if ctx.has("onnx") else None
    bf16 = ctx.params["reranker"].get("backend") == "bf16"
    scorer = make_scorer(spec, model_path=str(ctx.input("model") / "model") if ctx.has("model") else None, onnx=onnx,
                         bf16=bf16)
    return scorer, spec


QUERY_CHUNK = 64  # queries whose pairs are scored together: batched by length across queries, memory bounded


def _build_scores(ctx: BuildContext) -> dict[str, Any]:
    depth = ctx.params["depth"]
    rankings, qtexts, texts = _heads(ctx, depth)
    scorer, spec = pair_scorer(ctx)
    meter = Throughput(flops=model_flops(scorer))
    scorer.meter = meter
    kept: list[tuple[int, int, int, int]] = []
    with progress(len(rankings), f"score top-{depth} pairs", "queries", ctx.progress) as bar, \
            open(ctx.out / SCORES, "w", encoding="utf-8") as fh:
        for start in range(0, len(rankings), QUERY_CHUNK):
            chunk = rankings[start:start + QUERY_CHUNK]
            heads = [r.ids[:depth] for r in chunk]
            queries = [qtexts.get(r.qid, "") for r, ids in zip(chunk, heads) for _ in ids]
            docs = [texts[i] for ids in heads for i in ids]
            with meter.timed():
                scores = scorer.score(queries, docs) if docs else []
            if docs and hasattr(scorer, "kept_tokens"):
                kept += scorer.kept_tokens(queries, docs)
            offset = 0
            for r, ids in zip(chunk, heads):
                fh.write(json.dumps({"qid": r.qid, "ids": ids, "scores": [float(x) for x in scores[offset:offset + len(ids)]]})
                         + "\n")
                offset += len(ids)
            bar.update(len(chunk))
    return {"n_queries": len(rankings), "pairs": sum(min(depth, len(r.ids)) for r in rankings), "items": len(rankings),
            "throughput": meter.record(), **({"truncation": truncation_summary(kept, spec)} if kept else {})}


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


def _identity(spec: RerankerSpec) -> dict[str, Any]:
    return {k: v for k, v in spec_dict(spec).items() if k != "batch_size"}


def score_pairs(spec: RerankerSpec, trained: bool, depth: int, text: TextSpec, query_text: TextSpec, retrieval: Stage,
                data: Stage, model: Stage | None = None, oracle: FileRef | None = None, onnx: Stage | None = None,
                backend: str = "torch") -> Stage:
    """A pointwise reranker's score of each query's first ``depth`` retrieved candidates, in ``backend`` (``onnx``:
    its :func:`export_reranker`, run by ONNX Runtime)."""
    refs, files, names, paths = file_inputs({"oracle": oracle})
    code = (SCORERS, SCORE_LAYER) if backend == "bf16" else (SCORERS,)
    backend = {"backend": backend} if backend != "torch" else {}  # torch keeps the key it always had
    params = {"reranker": {"trained": trained, **_identity(spec), **backend}, "depth": depth, "text": skill_text(text),
              "query_text": spec_dict(query_text), "files": names}
    inputs = {"retrieval": retrieval, "data": data, **({"model": model} if model else {}), **({"onnx": onnx} if onnx else {})}
    return Stage("score_pairs", _build_scores, params, inputs={**inputs, **refs}, files=files, resource="gpu",
                 options={"spec": spec_dict(spec), "paths": paths}, items=Items("data", "n_queries", "depth"),
                 code=code)


def _build_export(ctx: BuildContext) -> dict[str, Any]:
    from ..rerank.onnx_backend import export
    from ..rerank.scorers import make_scorer

    spec = RerankerSpec(**ctx.stage.options["spec"])
    scorer = make_scorer(spec, model_path=str(ctx.input("model") / "model") if ctx.has("model") else None)
    return {"file": export(scorer, ctx.out, int8=ctx.params["backend"] == "onnx-int8")}


def export_reranker(spec: RerankerSpec, backend: str, model: Stage | None = None) -> Stage:
    """A pair cross-encoder's ONNX Runtime export (``reranker.backend=onnx|onnx-int8``), with its
    tokenizer, made once per weights (a fine-tuned reranker's from its ``model`` input)."""
    if backend not in ONNX_BACKENDS:
        raise ValueError(f"reranker.backend must be torch or one of {', '.join(ONNX_BACKENDS)}, got {backend!r}")
    if spec.head not in PAIR_HEADS:
        raise ValueError(f"reranker.backend={backend} runs pair cross-encoders ({', '.join(PAIR_HEADS)}); this reranker's head is "
                         f"{spec.head!r} (Qwen3's yes/no rerankers run in torch: reranker.backend=torch)")
    return Stage("export_reranker", _build_export, {"reranker": _identity(spec), "backend": backend},
                 inputs={"model": model} if model else {}, resource="cpu", options={"spec": spec_dict(spec)},
                 code=("skillrouter.rerank.onnx_backend", SCORERS))


def read_scores(entry: Path) -> dict[str, dict[str, float]]:
    """A ``score_pairs`` entry's scores: per query id, per candidate id."""
    scored: dict[str, dict[str, float]] = {}
    with open(entry / SCORES, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            scored[row["qid"]] = dict(zip(row["ids"], row["scores"]))
    return scored


def fused_score(scored: Mapping[str, Mapping[str, float]], fusion: Fusion) -> HeadScore:
    """A head's scores: the fusion of its first-stage scores and the reranker's (``scored``)."""
    return lambda r, ids: fuse(r.scores[:len(ids)], [scored[r.qid][i] for i in ids], fusion)


def fused_rankings(rankings: list[Ranking], scored: Mapping[str, Mapping[str, float]], k: int, fusion: Fusion
                   ) -> list[Ranking]:
    """Each ranking's top ``k`` reordered by the fusion of its first-stage and reranker scores."""
    score = fused_score(scored, fusion)
    return [_reordered(r, k, score) for r in rankings]


def _build_reorder(ctx: BuildContext) -> dict[str, Any]:
    rankings = list(read_rankings(ctx.input("retrieval") / "rankings.jsonl").values())
    scored = read_scores(ctx.input("scores"))
    k, spec = ctx.params["k"], dict(ctx.params.get("fusion") or {"method": "none"})
    record: dict[str, Any] = {"method": spec["method"]}
    if spec.get("alpha") == "dev":
        chosen = json.loads((ctx.input("weight") / WEIGHT).read_text())
        spec["alpha"] = chosen["alpha"]
        record.update(alpha=chosen["alpha"], chosen_on="dev", dev=chosen["dev"])
    elif spec["method"] == "interpolate":
        record.update(alpha=spec["alpha"], chosen_on="config")
    elif spec["method"] == "rrf":
        record.update(k=spec["k"])
    fusion = Fusion(spec["method"], float(spec.get("alpha", 0.5)), int(spec.get("k", 60)))
    n = _reorder(ctx, rankings, k, fused_score(scored, fusion))
    return {"n_queries": n, **({"fusion": record} if spec["method"] != "none" else {})}


def rerank(k: int, scores: Stage, retrieval: Stage, fusion: Mapping[str, Any] | None = None, weight: Stage | None = None
           ) -> Stage:
    """Each query's top ``k`` reordered by the pair scores already computed, fused with the first stage's as
    ``fusion`` says (a few seconds: cheap); ``weight``: the ``fusion_weight`` stage of ``fusion.alpha=dev``."""
    params: dict[str, Any] = {"k": k}
    if fusion and fusion["method"] != "none":  # fusion=none keeps the key it always had
        params["fusion"] = dict(fusion)
    return Stage("rerank", _build_reorder, params,
                 inputs={"scores": scores, "retrieval": retrieval, **({"weight": weight} if weight else {})}, cheap=True,
                 code=(reorder_module.__name__, fusion_module.__name__))


WEIGHT = "weight.json"


def _build_weight(ctx: BuildContext) -> dict[str, Any]:
    rankings = list(read_rankings(ctx.input("retrieval") / "rankings.jsonl").values())
    scored = read_scores(ctx.input("scores"))
    queries = list(ctx.dataset().queries)
    objective, k = ctx.params["objective"], ctx.params["k"]
    metrics = parse_metrics([objective])
    per_alpha = {}
    for alpha in ctx.params["grid"]:
        fused = fused_rankings(rankings, scored, k, Fusion("interpolate", alpha))
        rows = per_query_rows({r.qid: r.ids for r in fused}, queries, metrics)
        per_alpha[alpha] = [rows[q.id][objective] for q in queries if objective in rows[q.id]]
    curve = {a: float(np.mean(v)) if v else None for a, v in per_alpha.items()}
    alpha, best, se = one_standard_error(per_alpha)
    flat = all(v is not None and v >= curve[best] - se for v in curve.values())  # no weight beats another beyond noise
    chosen = {"alpha": alpha, "dev": {"objective": objective, "score": curve[alpha], "best": best, "best_score": curve[best],
                                      "standard_error": round(se, 6), "queries": len(queries), "flat": flat,
                                      "curve": {str(a): v for a, v in curve.items()}}}
    (ctx.out / WEIGHT).write_text(json.dumps(chosen, indent=2))
    return {**chosen, "items": len(queries)}


def fusion_weight(k: int, objective: str, dev_retrieval: Stage, dev_scores: Stage, dev_data: Stage,
                  grid: Sequence[float] = ALPHA_GRID) -> Stage:
    """``fusion.alpha=dev``: the interpolation weight among ``grid`` chosen on the dev split's ``objective``, from the
    reranker's scores of the dev queries' top ``k``: the smallest weight whose dev score is within one standard error
    (over the dev queries) of the best (the one-standard-error rule): the reranker moves the first stage's order only
    as far as the dev split says, beyond its noise, that it helps (on the built-in data's 13 dev queries the best
    weight moved to 0.7 on a one-query difference, and the test split's Hit@1 fell below the first stage's)."""
    return Stage("fusion_weight", _build_weight, {"k": k, "objective": objective, "grid": [float(a) for a in grid]},
                 inputs={"retrieval": dev_retrieval, "scores": dev_scores, "data": dev_data}, cheap=True,
                 code=(reorder_module.__name__, fusion_module.__name__))


def _build_judge(ctx: BuildContext) -> dict[str, Any]:
    k = ctx.params["k"]
    rankings, qtexts, texts = _heads(ctx, k)
    endpoint = dict(ctx.stage.options["endpoint"])
    endpoint["url"] = endpoint["url"] or os.environ.get(URL_ENV)  # the grid's own server (llm=stub|vllm)
    judge = LLMJudge(JudgeSpec(**{**ctx.params["reranker"], **endpoint}), texts)
    n = _reorder(ctx, rankings, k, lambda r, ids: judge(qtexts.get(r.qid, ""), ids))
    return {"n_queries": n, "judge_failures": judge.failures, "items": n}


def judge_rerank(judge: Mapping[str, Any], k: int, text: TextSpec, query_text: TextSpec, retrieval: Stage, data: Stage,
                 oracle: FileRef | None = None) -> Stage:
    """An LLM judge picks one of each query's top ``k`` (listwise: one stage per K). ``judge["url"]`` None: the grid's
    own LLM server (``llm=stub|vllm``), started for this stage and found through the environment."""
    refs, files, names, paths = file_inputs({"oracle": oracle})
    params = {"reranker": {"model": judge["model"], "max_chars_per_skill": judge["max_chars_per_skill"]}, "k": k,
              "text": skill_text(text), "query_text": spec_dict(query_text), "files": names}
    endpoint = {"url": judge["url"], "api_key_env": judge["api_key_env"], "timeout": judge["timeout"]}
    return Stage("rerank", _build_judge, params, inputs={"retrieval": retrieval, "data": data, **refs}, files=files, resource="llm",
                 options={"endpoint": endpoint, "paths": paths, "llm_server": not judge["url"]},
                 items=Items("data", "n_queries"), code=(reorder_module.__name__, judge_module.__name__))

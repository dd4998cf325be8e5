"""Our fusion (:mod:`skillrouter.rerank.fusion`) against ranx's on the same runs: for every weight ``alpha=dev`` chooses
from, ``interpolate`` against ranx's ``wsum`` over ``zmuv``-normalised runs, and ``rrf`` (k 60) against ranx's
``rrf``: how many queries' fused orders differ, how many of those differ beyond ties (our order is not an order of
ranx's fused scores: RRF ties whenever two candidates swap ranks between the stages, and each library breaks ties its
own way; ours keeps the first stage's order), and the seconds each takes (ranx's first call includes its numba
compile, reported apart).

    python benchmarks/fusion_parity.py [--queries N] [--head K]

The runs: N queries, each with a head of K candidates whose first-stage and reranker scores are drawn as correlated
normals (no tied scores within a stage). Figures: reports/perf/fusion_parity.{json,md}.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, write_figures  # noqa: E402

sys.path.insert(0, str(ROOT))
from skillrouter.rerank.fusion import ALPHA_GRID, Fusion, fuse  # noqa: E402


def heads(n: int, k: int, seed: int = 0) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """First-stage and reranker scores per query and candidate."""
    rng = np.random.default_rng(seed)
    first, reranker = {}, {}
    for q in range(n):
        a = rng.normal(size=k)
        b = 0.5 * a + rng.normal(size=k) * 3.0 + 10.0  # another scale, partly agreeing
        ids = [f"s{q}_{j}" for j in range(k)]
        first[f"q{q}"], reranker[f"q{q}"] = dict(zip(ids, a.tolist())), dict(zip(ids, b.tolist()))
    return first, reranker


def ours(first: dict, reranker: dict, fusion: Fusion) -> dict[str, list[str]]:
    out = {}
    for q, scores in first.items():
        ids = sorted(scores, key=lambda i: -scores[i])  # the head in the first stage's order, as rerank reads it
        fused = fuse([scores[i] for i in ids], [reranker[q][i] for i in ids], fusion)
        out[q] = [ids[j] for j in sorted(range(len(ids)), key=lambda j: (-fused[j], j))]
    return out


def beyond_ties(order: list[str], scores: dict[str, float]) -> bool:
    """Whether ``order`` is not a best-first order of ``scores`` (ties in any order)."""
    return any(scores[a] < scores[b] - 1e-12 for a, b in zip(order, order[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--head", type=int, default=20)
    args = parser.parse_args()
    from ranx import Run, fuse as ranx_fuse

    first, reranker = heads(args.queries, args.head)
    runs = [Run(first, name="first"), Run(reranker, name="reranker")]
    t0 = time.perf_counter()
    ranx_fuse(runs=runs, norm="zmuv", method="wsum", params={"weights": [0.5, 0.5]})
    compile_s = time.perf_counter() - t0
    figures: dict = {"queries": args.queries, "head": args.head, "ranx first call (s, numba compile included)": round(compile_s, 2)}
    cases = [(f"interpolate alpha={a}", Fusion("interpolate", a), {"norm": "zmuv", "method": "wsum",
                                                                   "params": {"weights": [1 - a, a]}}) for a in ALPHA_GRID]
    cases.append(("rrf k=60", Fusion("rrf", k=60), {"norm": None, "method": "rrf", "params": {"k": 60}}))
    for label, fusion, theirs in cases:
        t0 = time.perf_counter()
        mine = ours(first, reranker, fusion)
        ours_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        fused = ranx_fuse(runs=runs, **theirs).to_dict()
        ranx_s = time.perf_counter() - t0
        other = {q: sorted(docs, key=lambda d: -docs[d]) for q, docs in fused.items()}
        figures[label] = {"queries whose order differs": sum(mine[q] != other[q] for q in mine),
                          "of those beyond ties": sum(beyond_ties(mine[q], fused[q]) for q in mine),
                          "ours (s)": round(ours_s, 3), "ranx (s)": round(ranx_s, 3)}
    write_figures("fusion_parity", figures, "python benchmarks/fusion_parity.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

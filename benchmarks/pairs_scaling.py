"""Everything around training that is not model compute, as the training pairs grow 150 -> 5,000:
reading the mining rankings, negative mining with the three-layer false-negative filter, the
encoder's InfoNCE rows, the reranker's candidate lists, the validated examples written and read back
(the train_pairs stage's file). Each must
grow linearly in the number of pairs (per-pair time flat), so the paper's 37,979 pairs are routine.

    python benchmarks/pairs_scaling.py [--sizes 150 500 1500 5000]

Pool: the 13.6K real skills of ../shared/data (the built-in pool when absent); pairs are sampled
skills with their description as the query; mining lists are random depth-50 rankings written and
read through the same rankings.jsonl the retrieve stage publishes.
"""
from __future__ import annotations

import argparse
import random
from dataclasses import asdict
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, Timer, write_figures  # noqa: E402

from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402
from skillrouter.data.jsonl import atomic_write_jsonl  # noqa: E402
from skillrouter.rankings import Ranking, read_rankings, write_rankings  # noqa: E402
from skillrouter.stages.data import EXAMPLES, read_examples  # noqa: E402
from skillrouter.stages.retrieval import train_queries  # noqa: E402
from skillrouter.train.encoder import _rows  # noqa: E402
from skillrouter.train.fn_filter import FalseNegativeFilter  # noqa: E402
from skillrouter.train.negatives import NegativeCounts, mine_negatives  # noqa: E402
from skillrouter.data.pairs import TrainExample  # noqa: E402
from skillrouter.train.reranker import build_lists  # noqa: E402


def run(skills, n: int, tmp: Path) -> dict[str, float]:
    rng = random.Random(n)
    ids = [s.id for s in skills]
    chosen = rng.sample(skills, n)
    examples = [TrainExample(s.description or s.name, (s.id,)) for s in chosen]
    tq = train_queries(examples)
    emb = {sid: v for sid, v in zip(ids, np.random.default_rng(0).standard_normal((len(ids), 32)).astype(np.float32))}
    emb = {k: v / np.linalg.norm(v) for k, v in emb.items()}
    out: dict[str, float] = {}
    for name in ("sem", "lex"):
        write_rankings(tmp / f"{name}-{n}.jsonl", [Ranking(q.id, rng.sample(ids, 50), [1.0] * 50) for q in tq])
    with Timer() as t:
        lists = {}
        for name in ("sem", "lex"):
            rankings = read_rankings(tmp / f"{name}-{n}.jsonl")
            lists[name] = [rankings[q.id].ids for q in tq]
    out["read_mining_rankings_s"] = t.seconds
    fn = FalseNegativeFilter({s.id: s for s in skills}, emb)
    with Timer() as t:
        negatives, _ = mine_negatives(examples, skills, lists["sem"], lists["lex"], NegativeCounts(), fn, 0)
    out["mine_negatives_with_fn_filter_s"] = t.seconds
    with Timer() as t:
        _rows(examples, negatives, skip_in_pool=False)
        build_lists(examples, lists["sem"], {"name": "listwise"}, 8)
        atomic_write_jsonl(tmp / EXAMPLES, (asdict(ex) for ex in examples))
        read_examples(tmp)
    out["rows_lists_examples_io_s"] = t.seconds
    out["total_s"] = round(sum(out.values()), 3)
    out["per_pair_ms"] = round(1000 * out["total_s"] / n, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[150, 500, 1500, 5000])
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    sample = SHARED_DATA / "skills-sample.jsonl.gz"
    source = sample if sample.exists() else generate(tmp / "builtin")["pool"]
    skills = load_pool(source, "jsonl", ErrorPolicy("skip", LoadReport()), 200_000)
    results = {n: run(skills, n, tmp) for n in args.sizes}
    base = results[args.sizes[0]]["per_pair_ms"]
    figures = {"pool": len(skills), **{f"pairs={n}": r for n, r in results.items()},
               "per_pair_ratio_vs_smallest": {n: round(r["per_pair_ms"] / base, 2) for n, r in results.items()}}
    write_figures("pairs_scaling", figures, "python benchmarks/pairs_scaling.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

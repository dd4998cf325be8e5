"""Loading a 70K-skill pool: plain json.loads, the loader as it was on main (commit a044d9f), and our
cached columnar load_data stage cold (parse + validate + write) and warm (read columns), each in its
own process so wall time and peak RSS are its own.

    python benchmarks/load_pool.py [--scale 70000] [--baseline-commit a044d9f]

Targets (issue 10): cold <= 0.5x the main loader, warm <= 2 s. Needs ../shared/data and git history.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA, scaled_pool, write_figures  # noqa: E402

REPORT = """
import json, resource, time
print(json.dumps({"load_s": round(time.perf_counter() - t0, 2),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
"""
PLAIN = """
import gzip, json, sys, time
t0 = time.perf_counter()
n = sum(1 for line in gzip.open(sys.argv[1], "rb") if json.loads(line))
""" + REPORT
MAIN = """
import sys, time
from skillrouter.data import load_dataset
t0 = time.perf_counter()
load_dataset(sys.argv[1], sys.argv[2])
""" + REPORT
STAGE = """
import sys, time
from skillrouter.cache.store import StageCache
from skillrouter.pipeline.execute.build import Builder
from skillrouter.stages.data import load_data
from skillrouter.stages.graph import dataset_at
t0 = time.perf_counter()
rec = Builder(StageCache(sys.argv[3])).build(load_data({"source": "files", "pool": sys.argv[1], "queries": sys.argv[2]}, "easy", False))
assert len(dataset_at(rec.path).skills) > 0
""" + REPORT


def arm(code: str, args: list[str], pythonpath: Path | None = None) -> dict[str, float]:
    """Run one arm in a fresh process: its load time, its own peak RSS, and the process's wall time."""
    env = {**os.environ, **({"PYTHONPATH": str(pythonpath)} if pythonpath else {})}
    t0 = time.perf_counter()  # cwd = the code's own tree: `python -c` puts the cwd first on sys.path
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, env=env, capture_output=True, text=True,
                         cwd=pythonpath or ROOT).stdout
    return {**json.loads(out.strip().splitlines()[-1]), "process_wall_s": round(time.perf_counter() - t0, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, default=70_000)
    parser.add_argument("--baseline-commit", default="a044d9f")
    args = parser.parse_args()
    sample, tasks = SHARED_DATA / "skills-sample.jsonl.gz", SHARED_DATA / "skillsbench-dev-tasks.jsonl"
    tmp = Path(tempfile.mkdtemp())
    pool = tmp / f"pool-{args.scale}.jsonl.gz"
    n = scaled_pool(sample, pool, args.scale)
    baseline = tmp / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.baseline_commit], cwd=ROOT, check=True,
                   capture_output=True)
    try:
        figures = {"skills": n, "pool_file_mb": round(pool.stat().st_size / 2**20, 1),
                   "plain_json_loads": arm(PLAIN, [str(pool)]),
                   f"main_loader_{args.baseline_commit}": arm(MAIN, [str(pool), str(tasks)], baseline),
                   "load_data_stage_cold": arm(STAGE, [str(pool), str(tasks), str(tmp / "cache")], ROOT),
                   "load_data_stage_warm": arm(STAGE, [str(pool), str(tasks), str(tmp / "cache")], ROOT)}
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT, capture_output=True)
    main_s = figures[f"main_loader_{args.baseline_commit}"]["load_s"]
    figures["cold_vs_main"] = round(figures["load_data_stage_cold"]["load_s"] / main_s, 3)
    figures["targets_met"] = {"cold_le_0.5x_main": figures["cold_vs_main"] <= 0.5,
                              "warm_le_2s": figures["load_data_stage_warm"]["load_s"] <= 2.0}
    figures["note"] = ("load_s: the load call in its own process (cold includes hashing the input files and writing "
                       "the columnar copy; warm includes hashing them to find it); process_wall_s adds interpreter start "
                       "and imports; peak_rss_mb is that process's own maximum")
    write_figures("load_pool", figures, "python benchmarks/load_pool.py " + " ".join(sys.argv[1:]))
    print(json.dumps(figures["targets_met"]))


if __name__ == "__main__":
    main()

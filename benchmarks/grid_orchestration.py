"""Grid orchestration: the six-cell grid `loss=listwise,pointwise topk=10,20,50` (trained encoder and
reranker) as one grid (one graph, each unique stage built once) against the same six cells each run on
its own with a private cache (no sharing), and against the same grid run by an earlier commit's code
(cell by cell, before stage-level dispatch), in one run; then the orchestration overhead per cell (launch
to the cell's start) for the local and the SLURM launcher on trivial BM25 cells.

    python benchmarks/grid_orchestration.py [--data tiny] [--skip-slurm]

The SLURM arm needs scripts/slurm_cluster.sh (root). Figures go to reports/perf/grid_orchestration.*.
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
from _common import ROOT, Timer, write_figures  # noqa: E402

SIX_CELLS = ["encoder=trained", "reranker=trained", "loss=listwise,pointwise", "topk=10,20,50"]
CELLS = [[f"loss={loss}", f"topk={k}"] for loss in ("listwise", "pointwise") for k in (10, 20, 50)]
SLURM = ["hydra/launcher=slurm_dev"]


def run_grid(sweep: Path, overrides: list[str], env: dict[str, str], multirun: bool = True, root: Path = ROOT) -> float:
    """Wall seconds of one launch; ``root``: the tree whose code runs (another commit's worktree)."""
    where = f"hydra.sweep.dir={sweep}" if multirun else f"hydra.run.dir={sweep}"
    cmd = [sys.executable, str(root / "launch.py"), *(["-m"] if multirun else []), where, "progress=false", *overrides]
    with Timer() as t:
        subprocess.run(cmd, cwd=root, env={**env, "PYTHONPATH": str(root)}, check=True, capture_output=True)
    return t.seconds


def stage_counts(sweep: Path) -> dict[str, int]:
    built: dict[str, set] = {}
    for f in sweep.glob("**/metrics.json"):
        for name, s in json.loads(f.read_text())["stages"].items():
            if not s["cached"] and s["key"] != "-":
                built.setdefault(name, set()).add((f.parent.name, s["key"]))
    return {name: len(v) for name, v in sorted(built.items())}


def launch_overhead(sweep: Path, overrides: list[str], env: dict[str, str], n: int = 6) -> dict[str, float]:
    t0 = time.time()
    distinct = ",".join(str(10 + 5 * i) for i in range(n))  # cells that differ in what they compute
    wall = run_grid(sweep, ["encoder=bm25", "data=tiny", f"retrieve_k={distinct}", *overrides], env)
    starts = sorted(json.loads(p.read_text())["started"] for p in sweep.glob("*/provenance.json"))
    return {"cells": n, "wall_s": wall, "first_cell_start_s": round(starts[0] - t0, 2),
            "mean_launch_to_start_s": round(sum(s - t0 for s in starts) / len(starts), 2),
            "per_cell_s": round(wall / n, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="tiny", help="data config for the six-cell grid (builtin: ~30 min on 2 cores)")
    parser.add_argument("--skip-slurm", action="store_true")
    parser.add_argument("--baseline-commit", default="62aa938", help="the same grid with this commit's code, locally")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    grid = [*SIX_CELLS, f"data={args.data}"]
    shared = run_grid(tmp / "shared", [*grid, f"cache_dir={tmp / 'cache'}"], env)
    alone = [*SIX_CELLS[:2], f"data={args.data}"]
    private = sum(run_grid(tmp / "private" / str(i), [*alone, *cell, f"cache_dir={tmp / 'private' / str(i) / 'cache'}"], env,
                           multirun=False) for i, cell in enumerate(CELLS))
    rerun = run_grid(tmp / "rerun", [*grid, f"cache_dir={tmp / 'cache'}"], env)
    baseline = tmp / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.baseline_commit], cwd=ROOT, check=True,
                   capture_output=True)
    try:
        before = run_grid(tmp / "before", [*grid, f"cache_dir={tmp / 'cache-before'}"], env, root=baseline)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT, capture_output=True)
    figures = {
        "six_cell_grid": " ".join(grid),
        "shared_cache_wall_s": shared, "private_cache_wall_s": private, "rerun_shared_cache_wall_s": rerun,
        "speedup_shared_vs_private": round(private / shared, 2),
        f"same_grid_with_{args.baseline_commit}_wall_s": before,
        f"ratio_vs_{args.baseline_commit}": round(shared / before, 3),
        "stages_built_shared": stage_counts(tmp / "shared"), "stages_built_private": stage_counts(tmp / "private"),
        "stages_built_rerun": stage_counts(tmp / "rerun"),
        "local_launcher_overhead": launch_overhead(tmp / "local", [f"cache_dir={tmp / 'c2'}"], env),
    }
    if not args.skip_slurm:
        up = subprocess.run(["bash", str(ROOT / "scripts" / "slurm_cluster.sh"), "up"], capture_output=True, text=True, check=True)
        for line in up.stdout.splitlines():
            key, value = line.removeprefix("export ").split("=", 1)
            env[key] = value.replace("$PATH", os.environ["PATH"])
        figures["slurm_launcher_overhead"] = launch_overhead(tmp / "slurm", [*SLURM, f"cache_dir={tmp / 'c3'}"], env)
    write_figures("grid_orchestration", figures, "python benchmarks/grid_orchestration.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

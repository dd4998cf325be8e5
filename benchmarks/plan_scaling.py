"""How planning scales with a grid's size: ``launch.py -m ... plan=true`` on grids of 10, 100 and 1,000 cells (loss x
topk x seed, trained encoder and reranker: every cell has its own training stages), timed as a user runs it, and a
linear fit of seconds against cells. Beside it, the plain library doing the same job: Hydra's ``load_sweep_config``
per cell, which planning called twice per cell before (the basic sweeper's validation, then our composition).

    python benchmarks/plan_scaling.py [--sizes 10 100 1000] [--repeat 2]

Goal (issue 30): 1,000 cells in <= 10 s on this machine, linear. Figures: reports/perf/plan_scaling.*.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, write_figures  # noqa: E402

GRID = ["loss=listwise,pointwise", "topk=10,20,30,40,50", "encoder=trained", "reranker=trained"]  # 10 cells per seed

HYDRA_ALONE = """
import sys, time
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.utils import setup_globals
from hydra.types import RunMode
setup_globals()
with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
    loader = GlobalHydra.instance().config_loader()
    master = loader.load_configuration("config", ["hydra.sweep.dir=" + sys.argv[2]], RunMode.MULTIRUN)
    n = int(sys.argv[3])
    t0 = time.perf_counter()
    for seed in range(n):
        loader.load_sweep_config(master, ["loss=listwise", "topk=10", "encoder=trained", "reranker=trained", f"seed={seed}"])
    print((time.perf_counter() - t0) / n)
"""


def plan_seconds(cells: int, tmp: Path) -> float:
    sweep, cache = tmp / f"sweep{cells}-{time.time_ns()}", tmp / "cache"
    args = [sys.executable, str(ROOT / "launch.py"), "-m", *GRID, f"seed=range(0,{cells // 10})", "plan=true",
            f"hydra.sweep.dir={sweep}", f"cache_dir={cache}"]
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0 or f"plan: {cells} cells" not in proc.stdout:
        raise RuntimeError(f"planning {cells} cells failed: {proc.stdout[-500:]} {proc.stderr[-1500:]}")
    return round(seconds, 3)


def fit(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least squares ``y = a + b x``, with R²."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    ss = sum((y - my) ** 2 for y in ys)
    r2 = 1 - sum((y - (a + b * x)) ** 2 for x, y in zip(xs, ys)) / ss if ss else 1.0
    return {"fixed_s": round(a, 3), "per_cell_ms": round(1000 * b, 3), "r2": round(r2, 5)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--hydra-cells", type=int, default=30, help="cells Hydra composes alone, for its per-cell cost")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {n: [plan_seconds(n, Path(tmp)) for _ in range(args.repeat)] for n in args.sizes}
        hydra = float(subprocess.run([sys.executable, "-c", HYDRA_ALONE, str(ROOT / "conf"), tmp, str(args.hydra_cells)],
                                     cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()[-1])
    medians = {n: round(statistics.median(v), 3) for n, v in runs.items()}
    line = fit([float(n) for n in medians], list(medians.values()))
    largest = max(medians)
    write_figures("plan_scaling", {
        "plan=true wall s (median of runs)": {f"{n} cells": f"{medians[n]} ({' / '.join(map(str, runs[n]))})" for n in runs},
        "seconds per cell": {f"{n} cells": round(medians[n] / n, 4) for n in medians},
        "linear fit (wall = fixed + per_cell x cells)": line,
        "plain Hydra: load_sweep_config per cell, ms": round(1000 * hydra, 1),
        "plain Hydra, as planning called it (twice a cell), projected for the largest grid, s":
            round(2 * hydra * largest + line["fixed_s"], 1),
        f"goal: {largest} cells <= 10 s": medians[largest] <= 10.0,
    }, "python benchmarks/plan_scaling.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

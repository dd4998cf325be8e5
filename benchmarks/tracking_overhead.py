"""What W&B tracking (offline) adds to a grid: the same small grid (built-in data, encoder=minilm,
fields=nd,all: 2 cells, every stage built) with ``tracking=none`` and ``tracking=wandb``, each in a fresh cache,
and, for comparison, the plain library alone making as many offline runs (init, one logged value, finish).

    python benchmarks/tracking_overhead.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, Timer, write_figures  # noqa: E402

GRID = ("encoder=minilm", "fields=nd,all", "progress=false")


def plain_wandb(n: int, folder: Path) -> float:
    """``n`` offline runs made by wandb alone, in one process (as a launcher makes them)."""
    code = ("import sys, wandb\n"
            "for i in range(int(sys.argv[1])):\n"
            "    run = wandb.init(project='bench', mode='offline', dir=sys.argv[2], reinit='create_new')\n"
            "    run.log({'x': i}); run.finish()\n")
    with Timer() as t:
        subprocess.run([sys.executable, "-c", code, str(n), str(folder)], check=True, capture_output=True,
                       env={**os.environ, "WANDB_SILENT": "true"})
    return t.seconds


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    walls = {}
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    for tracking in ("none", "wandb"):
        cmd = [sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={tmp / tracking}",
               f"cache_dir={tmp / tracking / 'cache'}", f"tracking={tracking}", *GRID]
        with Timer() as t:
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, env=env)
        walls[tracking] = t.seconds
    runs = len([p for p in (tmp / "wandb").rglob("offline-run-*") if p.is_dir()])
    (tmp / "plain").mkdir()
    plain = plain_wandb(runs, tmp / "plain")
    write_figures("tracking_overhead", {
        "grid": "built-in data, " + " ".join(GRID[:2]) + " (2 cells, a fresh cache each)",
        "wall_s": {"tracking=none": walls["none"], "tracking=wandb": walls["wandb"]},
        "wandb_runs_made (cells, built stages, grid)": runs,
        "overhead_s": round(walls["wandb"] - walls["none"], 2),
        "overhead_per_run_s": round((walls["wandb"] - walls["none"]) / runs, 3),
        "plain wandb, as many offline runs in one process_s": plain,
    }, "python benchmarks/tracking_overhead.py")


if __name__ == "__main__":
    main()

"""Two reranker trainings (listwise and pointwise on MiniLM's candidates, the built-in data's Hard tier, seed 0,
2 epochs each, no early stopping, so both modes do the same work) run cold as one grid, twice in one run:
the default local launcher (stages one at a time, each on every core) against
``hydra.launcher.workers=2 hydra.launcher.processes=true`` (the two trainings side by side in worker processes,
each on its share of the cores). What the grid's wall clock and its trainings' steps gain, and what the cells
score both ways (thread counts change float sums, not what is computed).

    python benchmarks/stage_processes.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, Timer, write_figures  # noqa: E402

GRID = ["encoder=minilm", "reranker=trained", "loss=listwise,pointwise", "tier=hard", "seed=0", "fusion=none",
        "reranker.train.epochs=2", "reranker.train.early_stopping=null", "progress=false"]
MODES = {"one at a time": [], "2 worker processes": ["hydra.launcher.workers=2", "hydra.launcher.processes=true"]}


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    figures: dict = {"grid": " ".join(GRID), "cores": len(os.sched_getaffinity(0))}
    walls = {}
    for mode, launcher in MODES.items():
        sweep = tmp / mode.replace(" ", "_")
        cmd = [sys.executable, str(ROOT / "launch.py"), "-m", *GRID, *launcher, f"hydra.sweep.dir={sweep}",
               f"cache_dir={sweep / 'cache'}"]
        with Timer() as t:
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        walls[mode] = t.seconds
        cells = [json.loads(f.read_text()) for f in sorted(sweep.glob("*/metrics.json"))]
        figures[mode] = {"wall_s": round(t.seconds, 1)}
        for cell in cells:
            loss, train = cell["choices"]["loss"], cell["stages"]["train_reranker"]
            figures[mode][loss] = {"training_s": round(train["seconds"], 1),
                                   **{m: round(cell["metrics"][m], 4) for m in ("hit@1", "mrr@10")}}
    one, two = walls.values()
    figures["grid speed-up (x)"] = round(one / two, 2)
    write_figures("stage_processes", figures, "python benchmarks/stage_processes.py")


if __name__ == "__main__":
    main()

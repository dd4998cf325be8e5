"""The loss x topk grid (encoder=trained reranker=trained loss=listwise,pointwise topk=10,20,50, Easy and
Hard: sweeps/topk_ablation.yaml) run again when every stage is in the cache: what a cell costs when
nothing is built. Target (issue 10): <= 2 s per cell. The first pass builds what the cache lacks.

    python benchmarks/cached_rerun.py
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, Timer, write_figures  # noqa: E402


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    walls = {}
    for name in ("first", "rerun"):
        cmd = [sys.executable, str(ROOT / "launch.py"), "-m", "-cd", "sweeps", "-cn", "topk_ablation",
               f"hydra.sweep.dir={tmp / name}", "progress=false"]
        with Timer() as t:
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        walls[name] = t.seconds
    cells = [json.loads(f.read_text()) for f in sorted((tmp / "rerun").glob("*/metrics.json"))]
    built = sum(1 for c in cells for s in c["stages"].values() if not s["cached"] and s["key"] != "-")
    per_cell = [c["seconds"] for c in cells]
    write_figures("cached_rerun", {
        "grid": "sweeps/topk_ablation.yaml (encoder=trained reranker=trained loss x topk x tier)", "cells": len(cells),
        "first_pass_wall_s": walls["first"], "rerun_wall_s": walls["rerun"], "rerun_stages_built": built,
        "rerun_wall_per_cell_s": round(walls["rerun"] / len(cells), 2),
        "rerun_in_cell_s": {"max": max(per_cell), "mean": round(sum(per_cell) / len(per_cell), 2)},
        "target_le_2s_per_cell_met": walls["rerun"] / len(cells) <= 2.0,
    }, "python benchmarks/cached_rerun.py")


if __name__ == "__main__":
    main()

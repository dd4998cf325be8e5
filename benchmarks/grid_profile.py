"""Where the time of a grid goes: a real-sample grid (the SkillRouter eval-core sample, Easy and Hard,
BM25 and MiniLM, without and with the MiniLM cross-encoder at top-20) from an empty cache, then the
same grid again from the cache; per stage, seconds and share of the grid, so the next bottleneck is
visible at a glance. Launcher overhead = wall time minus the time spent inside cells.

    python benchmarks/grid_profile.py [--root ../shared/data/skillrouter-eval-core-sample]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PERF, ROOT, SHARED_DATA, Timer, write_figures  # noqa: E402

GRID = ["data=skillrouter_core", "tier=easy,hard", "encoder=bm25,minilm", "reranker=none,minilm_ce", "eval=skillrouter"]


def profile(sweep: Path, wall: float) -> dict:
    per_stage: dict[str, float] = defaultdict(float)
    in_cells = 0.0
    cells = sorted(sweep.glob("*/metrics.json"))
    for f in cells:
        m = json.loads(f.read_text())
        in_cells += m["seconds"]
        for name, stage in m["stages"].items():
            per_stage[name] += stage["seconds"]
    per_stage["(cell bookkeeping: rendering, scoring, writing)"] = max(0.0, in_cells - sum(per_stage.values()))
    per_stage["(launcher, imports, Hydra)"] = max(0.0, wall - in_cells)
    rows = sorted(per_stage.items(), key=lambda kv: -kv[1])
    return {"cells": len(cells), "wall_s": wall,
            "stages": {k: {"seconds": round(v, 2), "share": f"{100 * v / wall:.1f} %"} for k, v in rows}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, default=SHARED_DATA / "skillrouter-eval-core-sample")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    figures = {"grid": " ".join(GRID)}
    lines: list[str] = []
    for run in ("cold", "cached"):
        cmd = [sys.executable, str(ROOT / "launch.py"), "-m", *GRID, f"data.root={args.root.resolve()}",
               f"hydra.sweep.dir={tmp / run}", f"cache_dir={tmp / 'cache'}", "progress=false"]
        with Timer() as t:
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        figures[run] = profile(tmp / run, t.seconds)
        lines.append(f"{run}: {t.seconds:.1f} s for {figures[run]['cells']} cells")
        lines += [f"  {name:<50} {row['seconds']:>8.2f} s  {row['share']:>7}" for name, row in figures[run]["stages"].items()]
    write_figures("grid_profile", figures, "python benchmarks/grid_profile.py " + " ".join(sys.argv[1:]))
    (PERF / "grid_profile.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

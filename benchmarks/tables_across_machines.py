"""How far the committed tables move when the same code regenerates them on other hardware: the checkout's
``reports/`` against ``--other``, the ``reports/`` of a ``make report-demo`` run elsewhere (a clone on another CPU
kind).

    python benchmarks/tables_across_machines.py --other /path/to/clone/reports --name tables_amx_vs_zen5

Per run of ``runs.csv`` (matched by run folder): whether any metric moved. Per three-seed table: how many mean cells
moved, the largest move in points, that move over the larger of the two seed s.d.s (how many seed spreads the hardware
moved it), and whether the best system of each column group is the same. Nothing is timed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, write_figures  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

SEED_TABLES = ("encoder_results", "pipeline_results", "loss_ablation", "topk_ablation")
RUN_METRICS = ("hit@1", "mrr@10", "r@10", "ndcg@10")
MOVED = 1e-9  # a metric equal to six decimals in runs.csv has not moved


def runs_moved(ours: pd.DataFrame, other: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per sweep: its runs, and how many of them moved in any of :data:`RUN_METRICS`."""
    both = ours.merge(other, on="run", suffixes=("", " other"))
    metrics = [m for m in RUN_METRICS if m in both and f"{m} other" in both]
    moved = pd.concat([(both[m] - both[f"{m} other"]).abs().fillna(0) > MOVED for m in metrics], axis=1).any(axis=1)
    sweep = both["run"].map(lambda run: Path(run).parts[2] if len(Path(run).parts) > 2 else run)
    return {name: {"runs": int(len(group)), "moved": int(moved[group.index].sum())}
            for name, group in both.groupby(sweep)}


def table_moved(ours: pd.DataFrame, other: pd.DataFrame) -> dict[str, object]:
    """One seed table's mean cells (Hit@1, MRR@10) against the other machine's."""
    ours, other = ours.set_index(ours.columns[0]), other.set_index(other.columns[0])
    means = [c for c in ours.columns if c.endswith(("hit@1", "mrr@10")) and c in other]
    moves = pd.concat([(ours[c] - other[c]).abs() * 100 for c in means], axis=1, keys=means)
    spread = pd.concat([np.maximum(ours[f"{c} sd"], other[f"{c} sd"]) * 100 for c in means], axis=1, keys=means)
    worst = moves.stack().idxmax()
    over_sd = (moves / spread.replace(0, np.nan)).stack()
    best = {c: (str(ours[c].idxmax()), str(other[c].idxmax())) for c in means if c.endswith("avg/hit@1")}
    return {"mean cells": int(moves.size), "moved": int((moves > 0.05).sum().sum()),
            "largest move (points)": round(float(moves.stack().max()), 1),
            "largest move at": f"{worst[0]}, {worst[1]}: {ours.at[worst[0], worst[1]] * 100:.1f} -> "
                               f"{other.at[worst[0], worst[1]] * 100:.1f}",
            "largest move over seed s.d.": round(float(over_sd.max()), 2) if over_sd.notna().any() else None,
            "same best system (Avg Hit@1)": all(a == b for a, b in best.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", type=Path, required=True, help="another regeneration's reports/ folder")
    parser.add_argument("--ours", type=Path, default=ROOT / "reports")
    parser.add_argument("--name", default="tables_across_machines")
    args = parser.parse_args()

    def both(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        return pd.read_csv(args.ours / f"{name}.csv"), pd.read_csv(args.other / f"{name}.csv")

    figures = {"runs": runs_moved(*both("runs")),
               "tables": {name: table_moved(*both(name))
                          for name in SEED_TABLES if (args.other / f"{name}.csv").exists()}}
    write_figures(args.name, figures, "python benchmarks/tables_across_machines.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

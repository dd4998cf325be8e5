"""One cell of the demo's loss sweep trained as the trainers trained before the presets took the step changes
``train_step_variants.py`` found fastest, and as the presets train now, each from a cold cache: what the change does to
a cell's trainings and to its numbers.

    python benchmarks/trainer_variant_cell.py [--cell "launch.py's arguments"] [--name trainer_variant_cell]

The cell (default ``-cd sweeps -cn loss_ablation encoder=trained reranker=trained loss=listwise tier=hard seed=0``:
an encoder training, its mining, a reranker training with early stopping on the dev split, pair scoring; it must train
both models) runs twice in fresh processes, each in its own new cache, so each builds every stage: ``as trained`` with
the checkpoint's hidden dropout in both trainings and the reranker's attention as loaded (:data:`BEFORE`), ``variant``
with the presets' settings (both trainings without hidden dropout, the reranker's attention eager; the encoder keeps
SDPA: eager attention made its step 0.62x). Figures per run: wall seconds, each training's seconds, tokens (steps and
dev passes) and tokens/s, and the cell's Hit@1, MRR@10 and nDCG@10. One seed of one cell: a hint of what the numbers
do, not a table. Figures: reports/perf/<name>.*
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, write_figures  # noqa: E402

CELL = ("-cd", "sweeps", "-cn", "loss_ablation", "encoder=trained", "reranker=trained", "loss=listwise", "tier=hard",
        "seed=0")
TRAININGS = ("train_encoder", "train_reranker")
BEFORE = ("encoder.train.hidden_dropout=null", "reranker.train.hidden_dropout=null",
          "reranker.train.attention_implementation=null")  # how both trainings trained before the presets' change


def run_cell(variant: bool, overrides: list[str], work: Path) -> dict:
    """The cell in a fresh process and a new cache; its figures."""
    run_dir = work / ("variant" if variant else "as trained")
    argv = [*overrides, *(() if variant else BEFORE), f"cache_dir={work / 'cache' / run_dir.name}",
            f"hydra.run.dir={run_dir}", "progress=false", "tracking=none"]
    command = [sys.executable, "launch.py", *argv]
    t0 = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    figures: dict[str, object] = {"wall s": round(wall, 1)}
    for name in TRAININGS:
        stage = metrics["stages"][name]
        steps, dev = stage["throughput"], stage["throughput"].get("dev") or {}
        figures[name] = {"s": stage["seconds"], "step tokens": steps["tokens"], "step tokens / s": steps["tokens_per_s"],
                         "dev tokens": dev.get("tokens", 0)}
    figures.update({k: round(metrics["metrics"][k], 4) for k in ("hit@1", "mrr@10", "ndcg@10")})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="trainer_variant_cell", help="figures to reports/perf/<name>.*")
    parser.add_argument("--cell", default=" ".join(CELL), help="the cell: launch.py's arguments")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    figures: dict[str, object] = {"cell": args.cell}
    for variant in (False, True):
        figures["variant" if variant else "as trained"] = run_cell(variant, args.cell.split(), work)
        print(figures, flush=True)
    base, fast = figures["as trained"], figures["variant"]
    figures["reranker step tokens / s (x)"] = round(fast["train_reranker"]["step tokens / s"]
                                                    / base["train_reranker"]["step tokens / s"], 2)
    figures["encoder step tokens / s (x)"] = round(fast["train_encoder"]["step tokens / s"]
                                                   / base["train_encoder"]["step tokens / s"], 2)
    write_figures(args.name, figures, "python benchmarks/trainer_variant_cell.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

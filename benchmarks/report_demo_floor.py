"""How fast `make report-demo` could be on this machine: the model FLOPs its runs did, at the device's matmul peak.

    python benchmarks/report_demo_floor.py [--runs outputs/multirun]

Why: issue 45 asks for the demo in <= 60 min and issue 43 in <= 40, and the cold run takes 117 (its reranker
trainings most of it). Whether that gap is overhead to remove or work the grid asks for is a number, not an opinion:
every model stage's ``metrics.json`` record says how many tokens it ran, through how many passes, at how many FLOPs
per token (``skillrouter/throughput.py``). Summed over the distinct stages of the committed sweeps (each stage once,
by its cache key, as a cold run builds it) and divided by a matmul peak measured now on this machine (bf16; fp32 on a
CPU without bf16 units: ``_common.device_peak``), that is
the time the model work alone would take at 100 % of the chip: no padding, no tokenising, no data stages, no
Python. A floor, not an estimate: the real run reaches a fraction of the peak (its utilisation, per stage kind).
Run it on an otherwise idle machine: the peak is what this process reaches now. Figures go to
reports/perf/report_demo_floor.*; they read the runs of the last regeneration (``make report-demo``).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PERF, ROOT, device_peak, write_figures  # noqa: E402

GOALS_MIN = {"issue 45": 60, "issue 43": 40}


def metered_parts(record: dict) -> list[dict]:
    """A stage's throughput record and, for a training, its dev passes (``dev``), metered apart."""
    return [record, *([record["dev"]] if isinstance(record.get("dev"), dict) else [])]


def stage_flops(record: dict) -> float:
    """FLOPs of one stage's throughput record: forward FLOPs per token x tokens x passes, the training's steps and
    its dev passes each at their own passes."""
    return sum(p.get("flops_per_token", 0) * p["tokens"] * p["passes"] for p in metered_parts(record))


def distinct_stages(runs: Path) -> dict[tuple[str, str], dict]:
    """Each stage of the runs under ``runs`` once, by kind and cache key: the record of the run that built it where
    one did (its seconds are the build's), else any (a reused entry's record carries its build's throughput)."""
    stages: dict[tuple[str, str], dict] = {}
    for metrics in sorted(runs.glob("**/metrics.json")):
        for name, record in (json.loads(metrics.read_text()).get("stages") or {}).items():
            if not isinstance(record, dict) or "throughput" not in record:
                continue
            key = (name.split("@")[0], record.get("key", ""))
            if key not in stages or (stages[key].get("cached") and not record.get("cached")):
                stages[key] = record
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs" / "multirun")
    args = parser.parse_args()
    stages = distinct_stages(args.runs)
    if not stages:
        sys.exit(f"no model stage records under {args.runs}: run `make report-demo` first")
    peak_kind, peak = device_peak("cpu")
    kinds: dict[str, dict[str, float]] = defaultdict(lambda: {"stages": 0, "model_tflop": 0.0, "model_seconds": 0.0})
    for (kind, _), record in stages.items():
        work = record["throughput"]
        kinds[kind]["stages"] += 1
        kinds[kind]["model_tflop"] += stage_flops(work) / 1e12
        kinds[kind]["model_seconds"] += sum(p["seconds"] for p in metered_parts(work))
    per_kind = {}
    for kind, k in sorted(kinds.items(), key=lambda kv: -kv[1]["model_tflop"]):
        if k["model_tflop"] < 0.5:
            continue
        per_kind[kind] = {"stages": k["stages"], "model TFLOP": round(k["model_tflop"], 1),
                          "minutes at the peak": round(k["model_tflop"] / peak / 60, 1),
                          "minutes measured (model work)": round(k["model_seconds"] / 60, 1),
                          "utilisation": f"{k['model_tflop'] / k['model_seconds'] / peak:.0%}"}
    total = sum(k["model_tflop"] for k in kinds.values())
    floor_min = total / peak / 60
    demo = PERF / "report_demo.json"
    cold = json.loads(demo.read_text())["figures"]["total_min"] if demo.exists() else None
    runs = str(args.runs.relative_to(ROOT) if args.runs.is_relative_to(ROOT) else args.runs)
    write_figures("report_demo_floor", {
        "runs": runs,
        "distinct model stages": len(stages),
        f"{peak_kind} matmul peak, TFLOP/s (measured now)": round(peak, 3),
        "by stage kind": per_kind,
        "model TFLOP, all stages": round(total, 1),
        "floor: minutes at 100 % of the peak": round(floor_min, 1),
        "the cold run, minutes (report_demo.md)": cold,
        "goals, minutes": GOALS_MIN,
        "utilisation each goal needs, model work alone": {goal: f"{floor_min / minutes:.0%}"
                                                         for goal, minutes in GOALS_MIN.items()},
    }, f"python benchmarks/report_demo_floor.py --runs {runs}")


if __name__ == "__main__":
    main()

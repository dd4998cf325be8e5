"""Regenerate the committed reports/ from scratch: every paper sweep on the built-in data (the encoder, pipeline and
loss tables over three seeds, the others over one), the Qwen3 paths on tiny random stand-ins (field attention; the
SkillRouter reproduction on the eval-core sample of ../shared/data when it is there), the downstream study under
Harbor's oracle (when Docker and Harbor are up: `make demo-agents` brings them), then `python -m skillrouter.report`.
Each sweep's folder is emptied first, so the report holds this code's runs only. The wall time of every step goes to
reports/perf/report_demo.{json,md}, written after each step: a killed run keeps the times of the steps it finished,
and `--from SWEEP` resumes it there (the sweeps before it keep their folders and their times; trainings a killed
sweep left half-done resume from their checkpoints). The figures show the formats, not model quality.

    make report-demo                              # = python scripts/demo_reports.py
    python scripts/demo_reports.py --from tune_reranker_lr
    python scripts/demo_reports.py --workers 2    # stages side by side in worker processes (not the committed way)

The committed reports are made one stage at a time. ``--workers N`` builds up to N stages side by side, each in a worker
process on its share of the cores (``hydra.launcher.processes``): faster on a CPU, but a stage's thread count, so its
float sums, then depends on what runs beside it. Its times go to reports/perf/report_demo_workers<N>.*.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import write_figures  # noqa: E402

PY = sys.executable
STAND_INS = ROOT / ".cache" / "stand-ins"
CORE = ROOT.parent / "shared" / "data" / "skillrouter-eval-core-sample"
MULTIRUN = ROOT / "outputs" / "multirun"
PERF = ROOT / "reports" / "perf"
# One reranker training to convergence (up to 4 epochs with a dev pass each) takes about 5 minutes on 2 cores: the
# three-seed tables (encoder, pipeline, loss; topk reuses the loss table's models) and the skip ablation train as the
# presets do; the Optuna study and the SkillFlow cascade, whose subject is not training length, train their rerankers
# one epoch (the study's sweep names reranker=trained among its params: the override needs it on the command line).
ONE_EPOCH = "reranker.train.epochs=1"
# sweep, extra overrides; the showcase tables' sweeps first: the others reuse their trained models
SWEEPS = [
    ("encoder_results", []), ("pipeline_results", []), ("loss_ablation", []), ("topk_ablation", []),
    ("fn_filter", []), ("skip_ablation", []), ("body_removal", []), ("synth_demo", []), ("synth_r3_demo", []),
    ("tune_reranker_lr", ["hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2", "reranker=trained", ONE_EPOCH]),
    ("skillflow_demo", [ONE_EPOCH]), ("field_attention", [f"reranker.base.model={STAND_INS / 'causal_lm'}"]),
]
REPRODUCTION, DOWNSTREAM = "reproduce_skillrouter", "downstream_demo"  # appended when their inputs are here


def run(step: str, command: list[str], seconds: dict[str, float], failed: list[str]) -> None:
    """One step, timed; a step that fails (a cell of a sweep failed) is named and the others still run: the report
    lists failed runs, it never drops them."""
    print(f"== {step}: {' '.join(command)}", flush=True)
    t0 = time.perf_counter()
    if subprocess.run(command, cwd=ROOT).returncode != 0:
        failed.append(step)
    seconds[step] = round(time.perf_counter() - t0, 1)


def agents_ready() -> bool:
    """Harbor's CLI and a Docker engine that answers (`make demo-agents` sets both up)."""
    harbor = ROOT / ".venv-harbor" / "bin" / "harbor"
    return harbor.exists() and subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def figures_name(workers: int) -> str:
    return "report_demo" if workers == 1 else f"report_demo_workers{workers}"


def write(seconds: dict[str, float], failed: list[str], skipped: list[str], resumed_from: str | None, workers: int,
          done: bool) -> None:
    """The figures so far (after every step: a killed run keeps what it measured)."""
    total = round(sum(seconds.values()), 1)
    command = "make report-demo (python scripts/demo_reports.py)" if workers == 1 else \
        f"python scripts/demo_reports.py --workers {workers}"
    write_figures(figures_name(workers), {"total_s": total, "total_min": round(total / 60, 1), "complete": done,
                                          "workers": workers, "resumed_from": resumed_from or "none (one run)",
                                          "steps_s": seconds, "failed": failed or ["none"],
                                          "skipped": skipped or ["none"]}, command)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="start", choices=[*(name for name, _ in SWEEPS), REPRODUCTION, DOWNSTREAM],
                        help="resume a killed run at this sweep (the earlier ones are kept)")
    parser.add_argument("--workers", type=int, default=1,
                        help="build up to N stages side by side in worker processes (default 1: the committed way)")
    args = parser.parse_args()
    start, workers = args.start, args.workers
    seconds: dict[str, float] = {}
    figures = PERF / f"{figures_name(workers)}.json"
    if start and figures.exists():  # the finished steps' times of the run this one resumes
        seconds.update(json.loads(figures.read_text())["figures"]["steps_s"])
    side_by_side = [f"hydra.launcher.workers={workers}", "hydra.launcher.processes=true"] if workers > 1 else []
    failed: list[str] = []
    if not (STAND_INS / "causal_lm").is_dir():
        run("stand-ins", [PY, "-m", "skillrouter.models", "--out", str(STAND_INS)], seconds, failed)
    sweeps = list(SWEEPS)
    if CORE.is_dir():
        sweeps.append((REPRODUCTION, [f"data.root={CORE}", f"encoder.model={STAND_INS / 'base'}",
                                      f"++reranker.model={STAND_INS / 'causal_lm'}"]))
    skipped = []
    if agents_ready():
        run("downstream tasks", [PY, "-m", "skillrouter.agents.builtin_tasks", "--out", str(ROOT / ".cache" / "builtin-tasks")],
            seconds, failed)
        sweeps.append((DOWNSTREAM, []))
    else:
        skipped.append(f"{DOWNSTREAM} (no Docker engine or Harbor: `make demo-agents` sets them up)")
    names = [name for name, _ in sweeps]
    for name, extra in sweeps[names.index(start) if start else 0:]:
        shutil.rmtree(MULTIRUN / name, ignore_errors=True)
        run(name, [PY, "launch.py", "-m", "-cd", "sweeps", "-cn", name, "progress=false", *extra, *side_by_side],
            seconds, failed)
        write(seconds, failed, skipped, start, workers, done=False)
    run("report", [PY, "-m", "skillrouter.report", "--significance", "--runs", *(str(MULTIRUN / n) for n in names)],
        seconds, failed)
    write(seconds, failed, skipped, start, workers, done=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

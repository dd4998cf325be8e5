"""Regenerate the committed reports/ from scratch: every paper sweep on the built-in data (the encoder, pipeline and
loss tables over three seeds, the others over one), the Qwen3 paths on tiny random stand-ins (field attention; the
SkillRouter reproduction on the eval-core sample of ../shared/data when it is there), the downstream study under
Harbor's oracle (when Docker and Harbor are up: `make demo-agents` brings them), then `python -m skillrouter.report`.
Each sweep's folder is emptied first, so the report holds this code's runs only. The wall time of every step goes to
reports/perf/report_demo.{json,md}. The figures show the formats, not model quality.

    make report-demo                 # = python scripts/demo_reports.py
"""
from __future__ import annotations

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
# sweep, extra overrides; the showcase tables' sweeps first: the others reuse their trained models
SWEEPS = [
    ("encoder_results", []), ("pipeline_results", []), ("loss_ablation", []), ("topk_ablation", []),
    ("fn_filter", []), ("skip_ablation", []), ("body_removal", []), ("synth_demo", []), ("synth_r3_demo", []),
    ("tune_reranker_lr", ["hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2"]), ("skillflow_demo", []),
    ("field_attention", [f"reranker.base.model={STAND_INS / 'causal_lm'}"]),
]


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


def main() -> None:
    seconds: dict[str, float] = {}
    failed: list[str] = []
    t0 = time.perf_counter()
    if not (STAND_INS / "causal_lm").is_dir():
        run("stand-ins", [PY, "-m", "skillrouter.models", "--out", str(STAND_INS)], seconds, failed)
    sweeps = list(SWEEPS)
    if CORE.is_dir():
        sweeps.append(("reproduce_skillrouter", [f"data.root={CORE}", f"encoder.model={STAND_INS / 'base'}",
                                                 f"++reranker.model={STAND_INS / 'causal_lm'}"]))
    skipped = []
    if agents_ready():
        run("downstream tasks", [PY, "-m", "skillrouter.agents.builtin_tasks", "--out", str(ROOT / ".cache" / "builtin-tasks")],
            seconds, failed)
        sweeps.append(("downstream_demo", []))
    else:
        skipped.append("downstream_demo (no Docker engine or Harbor: `make demo-agents` sets them up)")
    for name, extra in sweeps:
        shutil.rmtree(MULTIRUN / name, ignore_errors=True)
        run(name, [PY, "launch.py", "-m", "-cd", "sweeps", "-cn", name, "progress=false", *extra], seconds, failed)
    roots = [str(MULTIRUN / name) for name, _ in sweeps]
    run("report", [PY, "-m", "skillrouter.report", "--significance", "--runs", *roots], seconds, failed)
    total = round(time.perf_counter() - t0, 1)
    write_figures("report_demo", {"total_s": total, "total_min": round(total / 60, 1), "steps_s": seconds,
                                  "failed": failed or ["none"], "skipped": skipped or ["none"]},
                  "make report-demo (python scripts/demo_reports.py)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

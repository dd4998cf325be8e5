"""What a grid holds on the cluster against what it uses: the user's grid `encoder=trained reranker=trained
loss=listwise,pointwise topk=10,20,50` (6 cells) and the same with `tier=easy,hard` (12 cells), each under
cell-level dispatch (`dispatch=cell`: a job per cell, shared stages built under a lock while the other
cells' jobs wait) and stage-level dispatch (the default: a job per unique stage, with its class's
resources), on the repository's SLURM cluster declared as a node with 8 job slots and 6 counted GPUs (a
free GPU per cell, as on a GPU cluster), every job with 8 GB, each run from an empty cache, in one run.

    python benchmarks/grid_allocation.py [--data builtin] [--cpus 8] [--gpus 6] [--mem-gb 8] [--repeat 2]

Per run, from SLURM's own record of every job of the grid (scontrol; start, end, CPUs, GPUs): allocated
GPU-seconds (sum over jobs of elapsed x GPUs), allocated CPU-seconds, the number of jobs, the wall time; from
the cache manifests and the plan: the seconds of the unique stage builds, GPU-class and CPU-class, and of
the longest chain of them (the critical path: the wall time no dispatch can beat; wall minus it is overhead).
`gpu_alloc_ratio` = allocated GPU-seconds / GPU-class build seconds. Each grid runs `--repeat` times per mode,
the modes interleaved (the machine is noisy): the figures are medians, every wall time is listed. Targets
(stage-level): ratio <= 1.25, no CPU-class stage holds a GPU, wall time no worse than cell-level.
Figures: reports/perf/grid_allocation.*.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PERF, ROOT, Timer  # noqa: E402

USER_GRID = ["encoder=trained", "reranker=trained", "loss=listwise,pointwise", "topk=10,20,50"]
GRIDS = {"6 cells (loss x topk)": USER_GRID, "12 cells (loss x topk x tier)": [*USER_GRID, "tier=easy,hard"]}
MODES = ("cell", "stage")


def cluster(cpus: int, gpus: int, mem_gb: int) -> dict[str, str]:
    env = dict(os.environ, SKILLROUTER_SLURM_CPUS=str(cpus), SKILLROUTER_SLURM_GPUS=str(gpus),
               SKILLROUTER_SLURM_MEM_MB=str(1024 * mem_gb * cpus), HF_HUB_OFFLINE="1")
    up = subprocess.run(["bash", str(ROOT / "scripts" / "slurm_cluster.sh"), "up"], env=env, capture_output=True,
                        text=True, check=True)
    for line in up.stdout.splitlines():
        key, value = line.removeprefix("export ").split("=", 1)
        env[key] = value.replace("$PATH", os.environ["PATH"])
    return env


def _seconds(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").timestamp()


def grid_jobs(env: dict[str, str], sweep: Path) -> list[dict[str, object]]:
    """Every job (array task) of one grid as SLURM accounts it: elapsed seconds, CPUs, GPUs, name."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], env=env, capture_output=True, text=True).stdout
    jobs = []
    for line in out.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if not f.get("StdOut", "").startswith(str(sweep)) or f.get("StartTime") in (None, "Unknown", "None"):
            continue
        gpus = re.search(r"gres:gpu(?::[^:]+)?:(\d+)", f.get("TresPerNode", ""))
        jobs.append({"id": f"{f['ArrayJobId']}_{f['ArrayTaskId']}" if f.get("ArrayTaskId") else f["JobId"],
                     "name": f.get("JobName"), "state": f.get("JobState"), "cpus": int(f.get("NumCPUs", 1)),
                     "gpus": int(gpus.group(1)) if gpus else 0,
                     "elapsed_s": _seconds(f["EndTime"]) - _seconds(f["StartTime"])})
    return jobs


def cache_manifests(cache: Path) -> dict[str, dict]:
    """Every built stage's manifest in a run's cache (its key, inputs' keys and build seconds), by key."""
    return {m["key"]: m for m in (json.loads(f.read_text()) for f in cache.glob("*/*/manifest.json"))}


def builds(sweep: Path, manifests: dict[str, dict]) -> dict[str, float]:
    """Seconds of the unique stage builds, by resource class (the plan says each stage's class)."""
    resource = {s["key"]: s["resource"] for s in json.loads((sweep / "plan.json").read_text())["stages"]}
    out = {"gpu": 0.0, "cpu": 0.0, "llm": 0.0}
    for key, m in manifests.items():
        out[resource.get(key, "cpu")] += m["build_seconds"]
    return {k: round(v, 1) for k, v in out.items()}


def critical_path(manifests: dict[str, dict]) -> float:
    """Seconds of the longest chain of stage builds (each stage after its inputs): what any dispatch needs at
    the least with unlimited slots; wall time minus it is the orchestration's overhead."""
    longest: dict[str, float] = {}

    def chain(key: str) -> float:
        if key not in longest:
            m = manifests[key]
            longest[key] = m["build_seconds"] + max((chain(k) for k in m.get("inputs", {}).values() if k in manifests),
                                                    default=0.0)
        return longest[key]

    return round(max((chain(k) for k in manifests), default=0.0), 1)


def cpu_stages_on_gpus(sweep: Path, jobs: list[dict[str, object]]) -> int:
    """Jobs holding a GPU that built a CPU-class stage of their own (not a cheap one run inline)."""
    journal = [json.loads(f.read_text()) for f in (sweep / ".stages").glob("*.json")]
    gpu_jobs = {j["id"] for j in jobs if j["gpus"]}
    return sum(1 for r in journal if r.get("job_id") in gpu_jobs and r["resource"] == "cpu" and not r["cheap"])


def run(env: dict[str, str], grid: list[str], mode: str, data: str, mem_gb: int, tmp: Path) -> dict[str, object]:
    sweep, cache = tmp / f"{mode}-{len(os.listdir(tmp))}", tmp / f"cache-{len(os.listdir(tmp))}"
    cmd = [sys.executable, str(ROOT / "launch.py"), "-m", "hydra/launcher=slurm_dev", *grid, f"data={data}",
           f"dispatch={mode}", f"hydra.launcher.mem_gb={mem_gb}", f"hydra.sweep.dir={sweep}", f"cache_dir={cache}",
           "progress=false"]
    with Timer() as wall:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"grid failed ({mode}): {proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    time.sleep(2)  # the last jobs' end times reach scontrol
    manifests = cache_manifests(cache)
    jobs, built = grid_jobs(env, sweep), builds(sweep, manifests)
    gpu_s = sum(j["elapsed_s"] * j["gpus"] for j in jobs)
    metrics = {str(sorted(m["choices"].items())): m["metrics"]
               for m in (json.loads(f.read_text()) for f in sweep.glob("*/metrics.json"))}
    path = critical_path(manifests)
    return {"wall_s": wall.seconds, "critical_path_s": path, "overhead_s": round(wall.seconds - path, 1),
            "jobs": len(jobs), "gpu_jobs": sum(1 for j in jobs if j["gpus"]),
            "allocated_gpu_s": round(gpu_s, 1), "allocated_cpu_s": round(sum(j["elapsed_s"] * j["cpus"] for j in jobs), 1),
            "build_s": built, "gpu_alloc_ratio": round(gpu_s / built["gpu"], 2) if built["gpu"] else None,
            "cpu_class_stages_holding_a_gpu": cpu_stages_on_gpus(sweep, jobs) if mode == "stage" else None,
            "metrics": metrics}


def median_run(runs: list[dict[str, object]]) -> dict[str, object]:
    """The medians of repeated runs of one mode (every wall time kept), and the first run's metrics."""
    out: dict[str, object] = {}
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = round(statistics.median(r[key] for r in runs), 2)
        elif key == "build_s":
            out[key] = {k: round(statistics.median(r[key][k] for r in runs), 1) for k in value}
        else:
            out[key] = value
    out["wall_s_each"] = [r["wall_s"] for r in runs]
    return out


def markdown(figures: dict, command: str) -> str:
    cols = ["wall_s (median)", "wall_s each", "critical path s", "overhead s", "jobs", "gpu_jobs", "allocated_gpu_s",
            "allocated_cpu_s", "gpu build s", "cpu build s", "gpu_alloc_ratio"]
    lines = ["# grid_allocation", "", f"`{command}` on {figures['machine']} (a SLURM node declared with "
             f"{figures['cluster']['cpus']} job slots and {figures['cluster']['gpus']} counted GPUs on 2 cores; "
             f"data={figures['data']}: the built-in data is a format demo, so these are orchestration figures, not "
             "model quality).", "", "| grid | dispatch | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for grid, modes in figures["grids"].items():
        for mode, r in modes["runs"].items():
            row = [r["wall_s"], " / ".join(f"{w:.0f}" for w in r["wall_s_each"]), r["critical_path_s"], r["overhead_s"],
                   r["jobs"], r["gpu_jobs"],
                   r["allocated_gpu_s"], r["allocated_cpu_s"], r["build_s"]["gpu"], r["build_s"]["cpu"], r["gpu_alloc_ratio"]]
            lines.append(f"| {grid} | {mode} | " + " | ".join(str(v) for v in row) + " |")
    lines += ["", "| grid | target | met |", "|---|---|---|"]
    for grid, modes in figures["grids"].items():
        lines += [f"| {grid} | {name} | {'yes' if ok else 'no'} |" for name, ok in modes["targets"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="builtin")
    parser.add_argument("--cpus", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=6)
    parser.add_argument("--mem-gb", type=int, default=8, help="per job, and per declared slot")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    env = cluster(args.cpus, args.gpus, args.mem_gb)
    tmp = Path(tempfile.mkdtemp())
    figures: dict = {"machine": os.uname().nodename + f", {os.cpu_count()} cores", "data": args.data,
                     "cluster": {"cpus": args.cpus, "gpus": args.gpus, "mem_gb_per_job": args.mem_gb}, "grids": {}}
    for name, grid in GRIDS.items():
        each: dict[str, list] = {mode: [] for mode in MODES}
        for _ in range(args.repeat):
            for mode in MODES:
                each[mode].append(run(env, grid, mode, args.data, args.mem_gb, tmp))
        runs = {mode: median_run(r) for mode, r in each.items()}
        cell, stage = runs["cell"], runs["stage"]
        same = all(abs(cell["metrics"][c][m] - v) < 1e-6 for c, row in stage["metrics"].items() for m, v in row.items()
                   if v is not None)
        figures["grids"][name] = {"overrides": " ".join(grid), "runs": {m: {k: v for k, v in r.items() if k != "metrics"}
                                                                     for m, r in runs.items()},
                                  "targets": {"stage: gpu_alloc_ratio <= 1.25": stage["gpu_alloc_ratio"] <= 1.25,
                                              "stage: no CPU-class stage holds a GPU": stage["cpu_class_stages_holding_a_gpu"] == 0,
                                              "stage: wall time <= cell-level": stage["wall_s"] <= cell["wall_s"],
                                              "same metrics under both": same}}
    command = "python benchmarks/grid_allocation.py " + " ".join(sys.argv[1:])
    PERF.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": "grid_allocation", "command": command, "date": time.strftime("%Y-%m-%d"), "figures": figures}
    (PERF / "grid_allocation.json").write_text(json.dumps(payload, indent=2) + "\n")
    (PERF / "grid_allocation.md").write_text(markdown(figures, command))
    print(markdown(figures, command))


if __name__ == "__main__":
    main()

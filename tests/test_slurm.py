"""Grids on a real single-node SLURM cluster (scripts/slurm_cluster.sh), against the local launcher."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from .conftest import ROOT, reliability_row, write_jsonl

pytestmark = pytest.mark.slurm
SLURM_ARGS = ["hydra/launcher=slurm_dev"]  # the profile for the cluster of scripts/slurm_cluster.sh
CLUSTER = ["bash", str(ROOT / "scripts" / "slurm_cluster.sh")]


@pytest.fixture(scope="module")
def slurm_env():
    """Bring the cluster up (idempotent) and return its environment; stop it afterwards if this
    fixture started it. Outside CI a machine that cannot run it skips; in CI it must work. The tests own
    the cluster: see ``_own_cluster``."""
    was_up = subprocess.run(["sinfo"], capture_output=True).returncode == 0 if shutil.which("sinfo") else False
    proc = subprocess.run([*CLUSTER, "up"], capture_output=True, text=True)
    if proc.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"SLURM cluster did not come up:\n{proc.stderr[-2000:]}")
        pytest.skip(f"no SLURM cluster here: {proc.stderr.strip()[-300:]}")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for line in proc.stdout.splitlines():
        key, value = line.removeprefix("export ").split("=", 1)
        env[key] = value.replace("$PATH", os.environ["PATH"])
    yield env
    if not was_up:
        subprocess.run([*CLUSTER, "down"], capture_output=True)


@pytest.fixture(autouse=True)
def _own_cluster(slurm_env):
    """Each test starts on a node in service with an empty queue, and leaves it so: the jobs of a test
    that failed midway (its launcher killed by a timeout, its node left drained) would otherwise hold the
    slots and GPUs of every test after it."""
    _reset(slurm_env)
    yield
    _reset(slurm_env)


def launch(env, sweep: Path, cache: Path, *overrides: str, slurm: bool | list[str] = True, wait: bool = True):
    """The grid through the cluster's launcher (``slurm``: the dev profile, or these launcher overrides), or locally
    on one thread, as each of the dev profile's 1-CPU jobs runs: a float sum's order follows the thread count, and a
    bf16 training turns that into rank flips between runs the tests hold equal (run alone, outside make test's
    one-thread workers, a two-thread local grid's reranker flipped a rank at top-50)."""
    launcher = slurm if isinstance(slurm, list) else SLURM_ARGS if slurm else []
    if not slurm:
        env = dict(env, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    args = [sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={sweep}", f"cache_dir={cache}",
            "progress=false", "data=tiny", *launcher, *overrides]
    if not wait:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def metrics_by_choice(sweep: Path, key: str) -> dict[str, dict]:
    out = {}
    for f in sweep.glob("*/metrics.json"):
        m = json.loads(f.read_text())
        out[m["choices"][key]] = m
    return out


def test_slurm_grid_matches_local(slurm_env, tmp_path):
    grid = ("encoder=bm25,minilm",)
    slurm = launch(slurm_env, tmp_path / "slurm", tmp_path / "c1", *grid)
    assert slurm.returncode == 0, slurm.stdout[-2000:] + slurm.stderr[-2000:]
    local = launch(slurm_env, tmp_path / "local", tmp_path / "c2", *grid, slurm=False)
    assert local.returncode == 0, local.stderr[-2000:]
    a, b = metrics_by_choice(tmp_path / "slurm", "encoder"), metrics_by_choice(tmp_path / "local", "encoder")
    assert set(a) == {"bm25", "minilm"}
    for enc in a:
        assert a[enc]["metrics"] == pytest.approx(b[enc]["metrics"], abs=1e-6)
    assert list((tmp_path / "slurm" / ".submitit").iterdir()), "jobs went through submitit"


def test_failing_cell_is_reported_while_others_finish(slurm_env, tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", [{"id": "a", "name": "csv", "body": "rows"}, {"id": "b", "name": "pdf"}])
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "name": "csv"}, {"id": "a", "name": "dup"}])
    queries = write_jsonl(tmp_path / "q.jsonl", [{"id": "q", "query": "csv rows", "gt": ["a"]}])
    proc = launch(slurm_env, tmp_path / "grid", tmp_path / "c", "data=jsonl", f"data.pool={good},{bad}",
                  f"data.queries={queries}", "encoder=bm25")
    assert proc.returncode == 1
    statuses = {json.loads(f.read_text())["status"]: json.loads(f.read_text()) for f in (tmp_path / "grid").glob("*/metrics.json")}
    assert set(statuses) == {"completed", "failed"}
    assert "duplicate skill id 'a'" in statuses["failed"]["error"]
    assert "2 cells: 1 completed, 1 failed" in proc.stdout


def _scontrol_jobs(env) -> list[dict[str, str]]:
    out = subprocess.run(["scontrol", "show", "job", "-o"], env=env, capture_output=True, text=True).stdout
    return [dict(kv.split("=", 1) for kv in line.split() if "=" in kv) for line in out.splitlines() if "JobId=" in line]


def _queued(env) -> list[str]:
    """Ids of the jobs that are not yet over (pending, running, completing, suspended)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout
    return out.split()


def _reset(env) -> None:
    """Cancel every job not yet over and put the node back in service."""
    left = _queued(env)
    if left:
        subprocess.run(["scancel", "--full", *left], env=env, capture_output=True)
        deadline = time.time() + 60
        while _queued(env) and time.time() < deadline:
            time.sleep(0.5)
    if _node_state(env) not in ("idle", "mixed", "allocated", "completing"):
        subprocess.run(["scontrol", "update", f"nodename={_sinfo_node(env)}", "state=resume"], env=env, capture_output=True)


def test_a_cold_start_drops_the_jobs_of_a_cluster_that_died(slurm_env, tmp_path):
    """Jobs saved by a controller that stopped (a machine restart, a killed CI run) have no launcher waiting
    on them: brought up again, the cluster has an empty queue instead of running them before the next grid."""
    sub = subprocess.run(["sbatch", "--hold", "-o", str(tmp_path / "held.out"), "--wrap", "true"], env=slurm_env,
                         capture_output=True, text=True, check=True)
    job = sub.stdout.split()[-1]
    assert job in _queued(slurm_env)
    subprocess.run([*CLUSTER, "down"], env=slurm_env, capture_output=True, check=True)
    subprocess.run([*CLUSTER, "up"], env=slurm_env, capture_output=True, check=True)
    assert _queued(slurm_env) == []


# Every epoch trained (no early stopping), so the training outlasts SLURM's kill of an interrupted task, which came 5-7 s
# after the requeue here (submitit ignores the SIGTERM before it): stopped after its first epoch, a quiet machine's
# training finished and published its model in that window, and the restarted job had nothing to resume.
TRAIN = ("encoder=trained", "encoder.train.batch_size=4", "encoder.train.checkpoint_every=2", "encoder.train.epochs=3",
         "encoder.train.early_stopping=null")


def _job_processes_gone(env, job: str, step_sockets: str) -> bool:
    """No task of the job runs and no step daemon of it is left on the node (``step_sockets``: the glob of its
    sockets in slurmd's spool, :func:`_step_sockets`). The daemons outlive the tasks (a step's daemon retried the
    dead srun for 7 s under load): slurmd refuses to launch a job whose step socket is still in its spool ("Job N
    already running, do not launch second copy"), drains the node and holds the job, and a grid waiting on it would
    wait forever (a CI run timed out so)."""
    out = subprocess.run(["scontrol", "listpids", job], env=env, capture_output=True, text=True).stdout
    if [line for line in out.splitlines()[1:] if line.split() and line.split()[0].isdigit()]:
        return False
    return not glob.glob(step_sockets)


def _step_sockets(env, job: str) -> str:
    """The glob of ``job``'s step sockets in slurmd's spool (``<node>_<job>.<step>``)."""
    config = subprocess.run(["scontrol", "show", "config"], env=env, capture_output=True, text=True, check=True).stdout
    spool = re.search(r"^SlurmdSpoolDir\s*=\s*(\S+)", config, re.M).group(1)
    return str(Path(spool) / f"{_sinfo_node(env)}_{job}.*")


def _interrupt_mid_training(env, cache: Path, interrupt) -> str | None:
    """Once training has written a checkpoint, ``interrupt(job_id)`` the running job; then, once it is
    pending again and its old processes are gone (else slurmd sees a duplicate and drains the node),
    let it start at once (SLURM holds a requeued job ~2 min otherwise). Its job id."""
    work_root = cache / "train_encoder"
    deadline = time.time() + 600
    while time.time() < deadline:
        running = [j for j in _scontrol_jobs(env) if j.get("JobState") == "RUNNING"]
        if list(work_root.glob("*.work/step-*/state.json")) and running:
            job = running[0]["JobId"]
            step_sockets = _step_sockets(env, job)
            interrupt(job)
            for _ in range(900):
                info = next((j for j in _scontrol_jobs(env) if j["JobId"] == job), {})
                if info.get("JobState") == "PENDING" and _job_processes_gone(env, job, step_sockets):
                    if _node_state(env) not in ("idle", "mixed", "allocated"):
                        subprocess.run(["scontrol", "update", f"nodename={_sinfo_node(env)}", "state=resume"], env=env,
                                       capture_output=True)
                    if "held" in info.get("Reason", "").lower():
                        subprocess.run(["scontrol", "release", job], env=env, capture_output=True)
                    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, capture_output=True)
                elif info.get("JobState") == "RUNNING" and info.get("Restarts", "0") != "0":
                    return job
                time.sleep(0.2)
            return job
        time.sleep(0.2)
    return None


def _grid_output(env, proc: subprocess.Popen, timeout: float = 900) -> str:
    """The grid's output once it ends (read as it comes, so a full pipe never stalls the grid). The node is back in
    service once the interrupted job has restarted, so a node that drains again means SLURM stopped the grid's job
    (a refused launch holds it): fail at once, with SLURM's reason, instead of waiting out the timeout on a job that
    will not run."""
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.communicate()[0]), daemon=True)
    reader.start()
    deadline = time.time() + timeout
    while reader.is_alive() and time.time() < deadline:
        if _node_state(env).startswith("drain"):
            proc.kill()
            reason = subprocess.run(["sinfo", "-h", "-o", "%E"], env=env, capture_output=True, text=True).stdout.strip()
            jobs = [f"{j['JobId']} {j.get('JobState')} ({j.get('Reason')})" for j in _scontrol_jobs(env)
                    if j["JobId"] in _queued(env)]
            pytest.fail(f"the node drained under the restarted grid: {reason}; jobs: {jobs}")
        reader.join(1)
    if reader.is_alive():
        proc.kill()
        raise subprocess.TimeoutExpired(proc.args, timeout)
    return out[0]


def _node_state(env) -> str:
    return subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip().rstrip("*")


def _uninterrupted(env, tmp_path: Path) -> subprocess.Popen:
    """The local run to compare a resumed one with, started beside it (it needs no cluster, only a core)."""
    return launch(env, tmp_path / "ref", tmp_path / "refcache", *TRAIN, slurm=False, wait=False)


def _resumed_equals_uninterrupted(tmp_path: Path, ref: subprocess.Popen) -> dict:
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "grid").rglob("*.log*"))
    logs += "".join(p.read_text(errors="replace") for p in (tmp_path / "grid" / ".submitit").rglob("*_log.*"))
    assert "resuming from" in logs
    resumed = json.loads(next((tmp_path / "grid").glob("*/metrics.json")).read_text())
    ref_out, _ = ref.communicate(timeout=900)
    assert ref.returncode == 0, ref_out[-2000:]
    reference = json.loads(next((tmp_path / "ref").glob("*/metrics.json")).read_text())
    assert resumed["metrics"] == pytest.approx(reference["metrics"], abs=1e-6)
    return resumed


def test_preempted_training_cell_is_requeued_and_resumes(slurm_env, tmp_path):
    """Requeue (SLURM's preemption) a cell mid-training: it restarts, resumes from its checkpoint and
    ends with the metrics of an uninterrupted run."""
    proc, ref = launch(slurm_env, tmp_path / "grid", tmp_path / "cache", *TRAIN, wait=False), _uninterrupted(slurm_env, tmp_path)
    requeued = _interrupt_mid_training(slurm_env, tmp_path / "cache",
                                       lambda job: subprocess.run(["scontrol", "requeue", job], env=slurm_env, check=True))
    out = _grid_output(slurm_env, proc)
    assert requeued, "training never reached a checkpoint"
    assert proc.returncode == 0, out[-3000:]
    _resumed_equals_uninterrupted(tmp_path, ref)


def test_node_down_mid_cell_requeues_and_the_cell_finishes(slurm_env, tmp_path):
    """The node is set DOWN while a training cell runs: SLURM requeues it, the node returns, the cell
    resumes from its checkpoint and ends with the metrics of an uninterrupted run."""
    node = _sinfo_node(slurm_env)
    t0 = time.perf_counter()
    proc, ref = launch(slurm_env, tmp_path / "grid", tmp_path / "cache", *TRAIN, wait=False), _uninterrupted(slurm_env, tmp_path)

    def node_down(job: str) -> None:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=fault-injection"], env=slurm_env,
                       check=True)
        # as an operator would: keep it out of service until the dead job's processes are gone, else SLURM
        # relaunches the requeued job next to them and drains the node
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=fault-injection"], env=slurm_env,
                       capture_output=True)

    requeued = _interrupt_mid_training(slurm_env, tmp_path / "cache", node_down)
    out = _grid_output(slurm_env, proc)
    assert requeued, "training never reached a checkpoint"
    assert proc.returncode == 0, out[-3000:]
    recovery = time.perf_counter() - t0
    _resumed_equals_uninterrupted(tmp_path, ref)
    reliability_row("the SLURM node set DOWN while a training cell runs",
                    "SLURM requeued the job; on restart it resumed training from its last checkpoint",
                    "nothing (metrics equal an uninterrupted run; the steps before the checkpoint were not redone)",
                    recovery)


def _sinfo_node(env) -> str:
    return subprocess.run(["sinfo", "-h", "-o", "%n"], env=env, capture_output=True, text=True).stdout.split()[0]


def test_cell_over_its_memory_limit_is_recorded_failed_and_the_grid_finishes(slurm_env, tmp_path):
    """The MiniLM cell holds 1.5 GB more than its 1 GB --mem: SLURM kills it; the grid records it as
    failed with SLURM's reason and the BM25 cell finishes."""
    env = dict(slurm_env, SKILLROUTER_FAULT="lock_acquired@embed_pool:hog=1500")
    t0 = time.perf_counter()
    proc = launch(env, tmp_path / "grid", tmp_path / "cache", "encoder=bm25,minilm", "hydra.launcher.mem_gb=1")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    runs = {json.loads(f.read_text())["choices"]["encoder"]: json.loads(f.read_text()) for f in (tmp_path / "grid").glob("*/metrics.json")}
    assert runs["bm25"]["status"] == "completed" and runs["minilm"]["status"] == "failed"
    assert "Exceeded job memory limit" in runs["minilm"]["error"] or "memory" in runs["minilm"]["error"].lower()
    assert "2 cells: 1 completed, 1 failed" in proc.stdout
    # the override that fixes it, and the peak it had reached, in the cell's error and in `status`
    fix = re.search(r"it had reached (\d+\.\d) GB against its 1\.0 GB limit; fix: "
                    r"\+\+hydra\.launcher\.resources\.kinds\.embed_pool\.mem_gb=(\d+)", runs["minilm"]["error"])
    assert fix and float(fix.group(1)) >= 1.0 and int(fix.group(2)) >= 2, runs["minilm"]["error"]
    status = subprocess.run([sys.executable, "-m", "skillrouter.pipeline.status", str(tmp_path / "grid")], cwd=ROOT,
                            env=slurm_env, capture_output=True, text=True)
    assert f"kinds.embed_pool.mem_gb={fix.group(2)}" in status.stdout, status.stdout
    reliability_row("a cell over its SLURM --mem limit", f"SLURM killed the job; the grid recorded the cell as failed "
                    f"({runs['minilm']['error'][:80]}...) and finished the other cell",
                    "nothing (the other cell finished; the over-limit cell is recorded as failed with SLURM's reason)", time.perf_counter() - t0)


def test_a_refused_submission_is_one_line_with_the_fix(slurm_env, tmp_path):
    """The default profile asks CPU-class stages for 4 CPUs, more than this node has: one line names the
    stage and its cells, SLURM's reason and the override that fixes it; nothing stays queued."""
    proc = launch(slurm_env, tmp_path / "grid", tmp_path / "cache", "encoder=bm25,minilm", slurm=["hydra/launcher=slurm"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("skillrouter: SLURM refused stage retrieve ") and "(cells #0)" in line
    assert "More processors requested than permitted" in line and "hydra.launcher.resources.cpu.cpus=2" in line
    assert not subprocess.run(["squeue", "-h"], env=slurm_env, capture_output=True, text=True).stdout.strip()


def test_two_grids_at_once_over_one_cache(slurm_env, tmp_path):
    cache = tmp_path / "cache"
    a = launch(slurm_env, tmp_path / "a", cache, "encoder=bm25,minilm", "fields=nd,all", wait=False)
    b = launch(slurm_env, tmp_path / "b", cache, "encoder=minilm,bm25", "fields=all,nd", slurm=False, wait=False)
    outs = [p.communicate(timeout=900)[0] for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0, outs[0][-1500:] + outs[1][-1500:]
    built: dict[str, int] = {}
    for f in list((tmp_path / "a").glob("*/metrics.json")) + list((tmp_path / "b").glob("*/metrics.json")):
        for name, stage in json.loads(f.read_text())["stages"].items():
            if stage["key"] != "-" and not stage["cached"]:
                built[stage["key"]] = built.get(stage["key"], 0) + 1
    assert built and all(n == 1 for n in built.values()), built
    entries = [p.parent for p in cache.glob("*/*/manifest.json")]
    assert entries and not list(cache.glob("*/.tmp-*")) and not list(cache.glob("*/*.lock"))
    for entry in entries:
        assert json.loads((entry / "manifest.json").read_text())["key"] == entry.name


def _journal(sweep: Path) -> list[dict]:
    return [json.loads(f.read_text()) for f in (sweep / ".stages").glob("*.json")]


def _grid_jobs(env, sweep: Path) -> dict[str, dict[str, str]]:
    """Every SLURM job (array task) of one grid, by id, as ``scontrol`` shows it."""
    jobs = {}
    for j in _scontrol_jobs(env):
        if j.get("StdOut", "").startswith(str(sweep)):
            jobs[f"{j['ArrayJobId']}_{j['ArrayTaskId']}" if j.get("ArrayTaskId") else j["JobId"]] = j
    return jobs


# one epoch each: dispatch is the subject, and early stopping still scores the epoch on dev (its stages stay in the graph)
USER_GRID = ("encoder=trained", "reranker=trained", "loss=listwise,pointwise", "topk=10,20,50",
             "reranker.train.batch_size=8", "reranker.list_size=4", "encoder.train.epochs=1", "reranker.train.epochs=1")
# Each stage-dispatched training is checked against another dispatch: the pointwise reranker's cells against a local
# run, two cells of the listwise one (the shallowest and deepest top-K) against a job per cell.
LOCAL_GRID = (*(o for o in USER_GRID if not o.startswith("loss=")), "loss=pointwise")
CELL_GRID = (*(o for o in USER_GRID if not o.startswith(("loss=", "topk="))), "loss=listwise", "topk=10,50")


def test_users_grid_by_stage_matches_local_and_cell_dispatch_and_only_gpu_stages_hold_gpus(slurm_env, tmp_path):
    """The user's grid dispatched stage by stage: the metrics of a local run (the pointwise cells) and of cell-level
    dispatch (two listwise cells); each unique stage built once, by a job holding a GPU only if it is GPU-class; the
    cells scored by a CPU array job per reranker; a W&B offline run per cell; the rerun submits no stage at all."""
    env = dict(slurm_env, WANDB_MODE="offline", WANDB_SILENT="true")
    local = launch(env, tmp_path / "local", tmp_path / "c2", *LOCAL_GRID, slurm=False, wait=False)  # beside the cluster's
    by_stage = launch(env, tmp_path / "stage", tmp_path / "cache", *USER_GRID, "tracking=wandb")
    assert by_stage.returncode == 0, by_stage.stdout[-3000:]
    runs = [json.loads(f.read_text()) for f in (tmp_path / "stage").glob("*/metrics.json")]
    assert len(runs) == 6 and all(r["status"] == "completed" for r in runs)
    built = {name: {r["stages"][name]["key"] for r in runs if not r["stages"][name]["cached"]}
             for name in ("train_encoder", "train_reranker", "score_pairs", "rerank")}
    assert {k: len(v) for k, v in built.items()} == {"train_encoder": 1, "train_reranker": 2, "score_pairs": 2, "rerank": 6}
    _one_trained_encoder_and_two_rerankers_in_wandb(tmp_path / "stage")
    journal = _journal(tmp_path / "stage")
    assert journal and all(r["state"] == "built" for r in journal)
    units = {r["job_id"]: r["resource"] for r in journal if not r["cheap"]}  # cheap stages run inside others' jobs
    jobs = _grid_jobs(slurm_env, tmp_path / "stage")
    assert set(units) < set(jobs) and sum(j["JobName"] == "sr-score" for j in jobs.values()) == 2  # one per reranker
    for job_id, job in jobs.items():  # a GPU is held by the jobs of GPU-class stages, and by no other
        assert ("gres:gpu" in job.get("TresPerNode", "")) == (units.get(job_id) == "gpu"), (job_id, job["JobName"])
    by_cell = launch(env, tmp_path / "cell", tmp_path / "c3", *CELL_GRID, "dispatch=cell")
    local_out, _ = local.communicate(timeout=900)
    assert local.returncode == 0 and by_cell.returncode == 0, local_out[-2000:] + by_cell.stdout[-2000:]
    for other, cells in (("local", 3), ("cell", 2)):
        a, b = metrics_by_choices(tmp_path / "stage"), metrics_by_choices(tmp_path / other)
        assert len(b) == cells and b.keys() <= a.keys()
        for cell in b:
            assert a[cell]["metrics"] == pytest.approx(b[cell]["metrics"], abs=1e-6), (other, cell)
    again = launch(env, tmp_path / "again", tmp_path / "cache", *USER_GRID)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "to build 0 gpu" in again.stdout and "submitted" not in again.stdout
    rerun = [json.loads(f.read_text()) for f in (tmp_path / "again").glob("*/metrics.json")]
    assert all(s["cached"] for r in rerun for s in r["stages"].values() if s["key"] != "-")


def _one_trained_encoder_and_two_rerankers_in_wandb(sweep: Path) -> None:
    """Read from the offline run files: 6 cell runs name one encoder artifact and 3 each of two reranker artifacts;
    each training, built in its own SLURM job, logged its per-step loss; every built stage one artifact; one grid run."""
    from collections import Counter

    from skillrouter.tracking.offline import offline_runs, table

    runs = offline_runs(sweep)
    cells = [r for r in runs if r.job_type == "cell"]
    assert len(cells) == 6 and all(r.exit_code == 0 for r in cells)
    assert len({r.config["stages"]["train_encoder"]["artifact"] for r in cells}) == 1
    assert sorted(Counter(r.config["stages"]["train_reranker"]["artifact"] for r in cells).values()) == [3, 3]
    trainings = [r for r in runs if r.job_type in ("train_encoder", "train_reranker")]
    assert sorted(r.job_type for r in trainings) == ["train_encoder", "train_reranker", "train_reranker"]
    for r in trainings:
        assert r.steps and r.steps == list(range(1, len(r.steps) + 1)) and all("train/loss" in h for h in r.history)
    made = Counter(a["name"] for r in runs if r.job_type not in ("cell", "grid") for a in r.artifacts)
    used = {s["artifact"] for r in cells for s in r.config["stages"].values()}
    assert used <= set(made) and set(made.values()) == {1}  # built once, logged once
    (grid,) = [r for r in runs if r.job_type == "grid"]
    assert len(table(grid, "cells")["data"]) == 6


def metrics_by_choices(sweep: Path) -> dict[tuple, dict]:
    out = {}
    for f in sweep.glob("*/metrics.json"):
        m = json.loads(f.read_text())
        out[(m["choices"]["loss"], m["choices"]["topk"])] = m
    return out


def test_a_failing_stage_fails_its_cells_and_leaves_no_job_pending(slurm_env, tmp_path):
    """The training pairs of one cell are bad: the job that reads them first fails, SLURM cancels the jobs
    that depend on it, the cell is failed naming the stage, the other cell completes, nothing is left queued."""
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"query": "x", "skill_id": "no-such-skill"}])
    proc = launch(slurm_env, tmp_path / "grid", tmp_path / "cache", "encoder=bm25", "reranker=none,trained",
                  f"data.train_pairs={pairs}")
    assert proc.returncode == 1, proc.stdout[-3000:]
    runs = {json.loads(f.read_text())["choices"]["reranker"]: json.loads(f.read_text())
            for f in (tmp_path / "grid").glob("*/metrics.json")}
    assert runs["none"]["status"] == "completed" and runs["trained"]["status"] == "failed"
    assert runs["trained"]["failed_stage"]["stage"] == "train_pairs" and "training positives missing" in runs["trained"]["error"]
    assert not subprocess.run(["squeue", "-h"], env=slurm_env, capture_output=True, text=True).stdout.strip()
    states = {r["stage"]: r for r in _journal(tmp_path / "grid")}
    assert states["train_pairs"]["state"] == "failed" and states["train_reranker"]["state"] == "cancelled"
    assert "DependencyNeverSatisfied" in states["train_reranker"]["error"] and states["train_reranker"]["job_id"]
    status = subprocess.run([sys.executable, "-m", "skillrouter.pipeline.status", str(tmp_path / "grid")], env=slurm_env,
                            capture_output=True, text=True, cwd=ROOT).stdout
    assert f"job {states['train_reranker']['job_id']}" in status and "1 completed, 1 failed" in status


def test_config_is_frozen_at_launch(slurm_env, tmp_path):
    """Jobs are submitted held; the sweep's YAML is edited while they wait; released, they still
    run the config composed at launch."""
    conf = tmp_path / "conf"
    conf.mkdir()
    sweep = conf / "frozen.yaml"
    sweep.write_text("defaults:\n  - config\n  - _self_\nretrieve_k: 30\n")
    args = [sys.executable, str(ROOT / "launch.py"), "-m", "-cd", str(conf), "-cn", "frozen", "encoder=bm25",
            f"hydra.sweep.dir={tmp_path / 'grid'}", f"cache_dir={tmp_path / 'cache'}", "progress=false", "data=tiny",
            *SLURM_ARGS, "+hydra.launcher.additional_parameters.hold=true"]
    proc = subprocess.Popen(args, cwd=ROOT, env=slurm_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    held: list[str] = []
    for _ in range(300):
        held = [j["JobId"] for j in _scontrol_jobs(slurm_env) if j.get("JobState") == "PENDING" and "Held" in j.get("Reason", "")]
        if held:
            break
        time.sleep(0.2)
    assert held, "the job was never submitted held"
    sweep.write_text("defaults:\n  - config\n  - _self_\nretrieve_k: 40\n")
    while proc.poll() is None:  # each stage job and the cells' array are submitted held
        for job in [j["JobId"] for j in _scontrol_jobs(slurm_env) if "Held" in j.get("Reason", "")]:
            subprocess.run(["scontrol", "release", job], env=slurm_env, capture_output=True)
        time.sleep(0.3)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-2000:]
    run = next((tmp_path / "grid").glob("*/metrics.json")).parent
    assert json.loads((run / "provenance.json").read_text())["config"]["retrieve_k"] == 30


def test_llm_server_runs_as_its_own_job_and_is_cancelled_after_the_last_generation_stage(slurm_env, tmp_path):
    """llm=vllm with a stand-in server command (no GPU here): the server is a SLURM job, the generation
    stages (their own jobs) ask it, and it is cancelled once the last of them has ended, before the cells
    are scored."""
    stand_in = "'{python} -m skillrouter.synth.stub --host 0.0.0.0 --port {port}'"
    proc = launch(slurm_env, tmp_path / "grid", tmp_path / "cache", "llm=vllm", f"llm.command={stand_in}", "llm.model=stand-in",
                  "llm.slurm.gpus_per_node=null", "llm.slurm.partition=debug", "llm.slurm.cpus_per_task=1",
                  "llm.slurm.mem_gb=1", "llm.startup_timeout_s=180", "synth=skillrouter", "encoder=trained")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    m = json.loads(next((tmp_path / "grid").glob("*/metrics.json")).read_text())
    assert m["synth"]["gen_queries"]["made"] > 0 and m["synth"]["gen_queries"]["usage"]["requests"] > 0
    assert "LLM server job" in proc.stdout + proc.stderr and "cancelled" in proc.stdout + proc.stderr
    jobs = {j["JobId"]: j for j in _scontrol_jobs(slurm_env)}
    server = [j for j in jobs.values() if j.get("JobName") == "llm-server" and str(tmp_path) in j.get("StdOut", "")]
    assert len(server) == 1 and server[0]["JobState"] in ("CANCELLED", "COMPLETED")
    generation = {r["job_id"] for r in _journal(tmp_path / "grid") if r["resource"] == "llm"}
    scoring = [j for j in _grid_jobs(slurm_env, tmp_path / "grid").values() if j["JobName"] == "sr-score"]
    assert generation and scoring and server[0]["EndTime"] <= min(j["StartTime"] for j in scoring)


def test_pool_embedding_shards_go_out_as_one_job_array(slurm_env, tmp_path):
    """embed.shards=2 on SLURM: the two shard stages are the two tasks of one job array, merged; the cell
    scores what an unsharded cell scores."""
    sharded = launch(slurm_env, tmp_path / "sharded", tmp_path / "c1", "encoder=minilm", "embed.shards=2")
    assert sharded.returncode == 0, sharded.stdout[-2000:] + sharded.stderr[-2000:]
    plain = launch(slurm_env, tmp_path / "plain", tmp_path / "c2", "encoder=minilm", slurm=False)
    assert plain.returncode == 0, plain.stderr[-2000:]
    a = json.loads(next((tmp_path / "sharded").glob("*/metrics.json")).read_text())
    b = json.loads(next((tmp_path / "plain").glob("*/metrics.json")).read_text())
    assert a["metrics"] == pytest.approx(b["metrics"], abs=1e-9)
    assert len(list((tmp_path / "c1" / "embed_shard").glob("*/manifest.json"))) == 2
    jobs = sorted(r["job_id"] for r in _journal(tmp_path / "sharded") if r["stage"] == "embed_shard")
    assert len(jobs) == 2 and jobs[0].split("_")[0] == jobs[1].split("_")[0] and jobs[0] != jobs[1]


def test_a_training_stage_over_two_tasks_trains_the_one_process_model(slurm_env, tmp_path):
    """``+hydra.launcher.resources.kinds.train_encoder.tasks_per_node=2``: the encoder's job runs two SLURM tasks (the path of
    ``nodes`` / ``tasks_per_node`` on one node), the first builds the stage and hands the training to the
    second, each is one gloo rank; the weights equal a local single-process training's (a tiny Qwen3: no
    dropout), and the cell's metrics are the local ones."""
    from safetensors.torch import load_file

    from skillrouter.models import build_tiny_qwen3

    tiny = build_tiny_qwen3(tmp_path / "qwen3")  # no dropout: two ranks then draw what one process draws
    grid = ("encoder=trained", "encoder@encoder.base=qwen3_emb_0.6b", f"encoder.base.model={tiny}",
            "encoder.base.max_seq_length=64", "encoder.train.batch_size=8",
            "encoder.train.precision=fp32")  # an identity of the math: fp32 on both sides (bf16 rounds shares apart)
    two = launch(slurm_env, tmp_path / "two", tmp_path / "c2", *grid, "+hydra.launcher.resources.kinds.train_encoder.tasks_per_node=2")
    assert two.returncode == 0, two.stdout[-3000:]
    one = launch(slurm_env, tmp_path / "one", tmp_path / "c1", *grid, slurm=False)
    assert one.returncode == 0, one.stderr[-2000:]
    (trained,) = [r for r in _journal(tmp_path / "two") if r["stage"] == "train_encoder"]
    log = next((tmp_path / "two").rglob(f"{trained['job_id']}_0_log.out")).read_text()
    assert "data-parallel training: 2 ranks over 2 tasks on 1 node(s)" in log
    assert next((tmp_path / "two").rglob(f"{trained['job_id']}_1_log.out")).exists()  # the second task ran
    weights = [load_file(next((tmp_path / c / "train_encoder").rglob("model.safetensors"))) for c in ("c1", "c2")]
    assert weights[0].keys() == weights[1].keys()
    for name, w in weights[0].items():
        torch.testing.assert_close(weights[1][name], w, rtol=1e-4, atol=1e-5, msg=name)
    a, b = metrics_by_choice(tmp_path / "two", "encoder"), metrics_by_choice(tmp_path / "one", "encoder")
    assert a["trained"]["metrics"] == pytest.approx(b["trained"]["metrics"], abs=1e-6)


def test_downstream_trials_run_as_agent_class_jobs_and_match_the_routers_rankings(slurm_env, agent_engine, tmp_path):
    """The downstream grid stage by stage on the cluster: each condition's trials are built in a job without a GPU,
    Harbor and its containers inside it; oracle success follows each cell's own ranking, and ``none`` is built
    once for both routers."""
    from .downstream_tasks import write_study

    study = write_study(tmp_path / "study", with_reader=False)
    args = [sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={tmp_path / 'grid'}", f"cache_dir={tmp_path / 'c'}",
            "progress=false", "data=jsonl", f"data.pool={study['pool']}", f"data.queries={study['queries']}",
            "encoder=bm25,minilm", f"downstream.tasks_root={study['tasks']}", f"downstream.harbor={agent_engine}",
            "downstream.trials=1", "downstream.skills=[none,routed]", *SLURM_ARGS]
    proc = subprocess.run(args, cwd=ROOT, env=slurm_env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    gt = {q["id"]: q["gt"][0] for q in map(json.loads, study["queries"].read_text().splitlines())}
    for run in (tmp_path / "grid").glob("*/metrics.json"):
        metrics = json.loads(run.read_text())
        by = {c["label"]: c for c in metrics["downstream"]["conditions"]}
        ranked = {json.loads(line)["qid"]: json.loads(line)["ranked"][0][0] for line in (run.parent / "rankings.jsonl").open()}
        assert by["routed@1"]["per_task"] == {t: float(gt[t] == ranked[t]) for t in gt}
        assert set(by["none"]["per_task"].values()) == {0.0}
    journal = [r for r in _journal(tmp_path / "grid") if r["stage"] == "agent_trials"]
    assert len(journal) == 3 and all(r["state"] == "built" and r["resource"] == "agent" for r in journal)  # none + 2 routed
    jobs = _grid_jobs(slurm_env, tmp_path / "grid")
    assert all("gres:gpu" not in jobs[r["job_id"]].get("TresPerNode", "") for r in journal)
    # none waits for nothing but the data: a job of its own; a routed condition may follow the retrieval it reads in
    # that job (the dev profile gives both classes the same resources: one job start saved)
    assert "sr-agent_trials" in {jobs[r["job_id"]]["JobName"] for r in journal}


def test_a_capped_queue_splits_the_array_and_waits_for_room(slurm_env, tmp_path):
    """``hydra.launcher.max_queued=2`` with four pool shards: the plan says so, the four shard stages go out as two
    arrays of two, the second submitted only once the first left room in the queue; the cell scores as usual."""
    proc = launch(slurm_env, tmp_path / "grid", tmp_path / "c", "encoder=minilm", "embed.shards=4", "hydra.launcher.max_queued=2")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    submission = json.loads((tmp_path / "grid" / "plan.json").read_text())["submission"]
    assert submission["max_queued"] == 2 and submission["arrays"] == 2
    arrays: dict[str, list[str]] = {}
    for r in _journal(tmp_path / "grid"):
        if r["stage"] == "embed_shard":
            arrays.setdefault(r["job_id"].split("_")[0], []).append(r["job_id"])
    assert sorted(len(v) for v in arrays.values()) == [2, 2]
    jobs = {j["JobId"]: j for j in _scontrol_jobs(slurm_env)}
    first, second = sorted(arrays, key=int)
    first_ends = max(j["EndTime"] for j in jobs.values() if j.get("ArrayJobId") == first)
    second_submitted = min(j["SubmitTime"] for j in jobs.values() if j.get("ArrayJobId") == second)
    assert second_submitted >= first_ends, "the second array waited for room in the queue"


def test_the_users_training_grid_on_the_builtin_data_runs_with_the_clusters_defaults(slurm_env, tmp_path):
    """The README's grid as a new user runs it, on the built-in data with the dev profile's defaults, cut to one of its
    cells (both training kinds, every other stage kind of the grid: the smallest grid that shows it), two of its
    domains, and each training pair in one of its wordings and one epoch (a step's memory is the batch's, not the
    data's or the epochs'). Encoder training peaks at ~7 GB there (a job gets 4 GB per CPU by default); the profile
    gives the training kinds what they measured."""
    args = [sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={tmp_path / 'grid'}", f"cache_dir={tmp_path / 'c'}",
            "progress=false", "encoder=trained", "reranker=trained", "loss=listwise", "topk=20", "data.builtin.n_domains=2",
            "data.builtin.train_templates=1", "encoder.train.epochs=1", "reranker.train.epochs=1", *SLURM_ARGS]
    proc = subprocess.run(args, cwd=ROOT, env=slurm_env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = [json.loads(f.read_text()) for f in (tmp_path / "grid").glob("*/metrics.json")]
    assert len(runs) == 1 and all(r["status"] == "completed" for r in runs)
    jobs = _grid_jobs(slurm_env, tmp_path / "grid")
    training = {j["JobName"]: j for j in jobs.values() if j["JobName"] in ("sr-train_encoder", "sr-train_reranker")}
    assert training["sr-train_encoder"]["MinMemoryNode"] == "11G" and training["sr-train_reranker"]["MinMemoryNode"] == "6G"


def test_an_optuna_study_dispatches_each_batch_of_trials_and_the_best_trials_test_cell_as_slurm_jobs(slurm_env, tmp_path):
    sweep = tmp_path / "study"
    proc = launch(slurm_env, sweep, tmp_path / "cache", "encoder=bm25", "eval.split=dev", "hydra/sweeper=optuna",
                  "hydra.sweeper.direction=maximize", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
                  "encoder.k1=interval(0.5,2.0)")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((sweep / "study.json").read_text())
    assert [t["state"] for t in summary["trials"]] == ["COMPLETE", "COMPLETE"]
    for cell in ("0", "1", summary["test"]["cell"]):
        assert json.loads((sweep / cell / "metrics.json").read_text())["status"] == "completed"
    jobs = _grid_jobs(slurm_env, sweep)
    assert any(j["StdOut"].startswith(str(sweep / "test")) for j in jobs.values()), "the test cell ran as jobs too"
    assert any(not j["StdOut"].startswith(str(sweep / "test")) for j in jobs.values())

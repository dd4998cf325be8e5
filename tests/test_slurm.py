"""Grids on a real single-node SLURM cluster (scripts/slurm_cluster.sh), against the local launcher."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT, write_jsonl

pytestmark = pytest.mark.slurm
SLURM_ARGS = ["hydra/launcher=slurm", "hydra.launcher.partition=debug", "hydra.launcher.cpus_per_task=1",
              "hydra.launcher.mem_gb=null", "hydra.launcher.gpus_per_node=null", "hydra.launcher.timeout_min=20"]


@pytest.fixture(scope="module")
def slurm_env():
    """Bring the cluster up (idempotent) and return its environment; stop it afterwards if this
    fixture started it. Outside CI a machine that cannot run it skips; in CI it must work."""
    script = ["bash", str(ROOT / "scripts" / "slurm_cluster.sh")]
    was_up = subprocess.run(["sinfo"], capture_output=True).returncode == 0 if shutil.which("sinfo") else False
    proc = subprocess.run([*script, "up"], capture_output=True, text=True)
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
        subprocess.run([*script, "down"], capture_output=True)


def launch(env, sweep: Path, cache: Path, *overrides: str, slurm: bool = True, wait: bool = True):
    args = [sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={sweep}", f"cache_dir={cache}",
            "progress=false", "data=tiny", *(SLURM_ARGS if slurm else []), *overrides]
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


def test_preempted_training_cell_is_requeued_and_resumes(slurm_env, tmp_path):
    """Requeue (SLURM's preemption) a cell mid-training: it restarts, resumes from its checkpoint and
    ends with the metrics of an uninterrupted run."""
    train = ("encoder=trained", "encoder.train.batch_size=4", "encoder.train.checkpoint_every=2", "encoder.train.epochs=2")
    proc = launch(slurm_env, tmp_path / "grid", tmp_path / "cache", *train, wait=False)
    work_root = tmp_path / "cache" / "train_encoder"
    deadline, requeued = time.time() + 600, None
    while time.time() < deadline and requeued is None:
        if list(work_root.glob("*.work/step-*/state.json")):
            running = [j for j in _scontrol_jobs(slurm_env) if j.get("JobState") == "RUNNING"]
            if running:
                requeued = running[0]["JobId"]
                subprocess.run(["scontrol", "requeue", requeued], env=slurm_env, check=True)
                # SLURM holds a requeued job ~2 min before it may start; once it is pending
                # again, an operator's `StartTime=now` skips the wait
                for _ in range(300):
                    job = next((j for j in _scontrol_jobs(slurm_env) if j["JobId"] == requeued), {})
                    if job.get("JobState") == "PENDING":
                        subprocess.run(["scontrol", "update", f"JobId={requeued}", "StartTime=now"], env=slurm_env,
                                       capture_output=True)
                    elif job.get("JobState") == "RUNNING" and job.get("Restarts", "0") != "0":
                        break
                    time.sleep(0.2)
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=900)
    assert requeued, "training never reached a checkpoint"
    assert proc.returncode == 0, out[-3000:]
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "grid").rglob("*.log*"))
    logs += "".join(p.read_text(errors="replace") for p in (tmp_path / "grid" / ".submitit").rglob("*_log.*"))
    assert "resuming from" in logs
    resumed = json.loads(next((tmp_path / "grid").glob("*/metrics.json")).read_text())
    ref = launch(slurm_env, tmp_path / "ref", tmp_path / "refcache", *train, slurm=False)
    assert ref.returncode == 0, ref.stderr[-2000:]
    reference = json.loads(next((tmp_path / "ref").glob("*/metrics.json")).read_text())
    assert resumed["metrics"] == pytest.approx(reference["metrics"], abs=1e-6)


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


def test_six_cell_grid_shares_training_and_reruns_from_cache(slurm_env, tmp_path):
    """`loss=listwise,pointwise topk=10,20,50`: one encoder training, two reranker trainings, six
    evaluations, a W&B offline run per cell; the rerun rebuilds nothing."""
    grid = ("encoder=trained", "reranker=trained", "loss=listwise,pointwise", "topk=10,20,50", "tracking=wandb",
            "reranker.train.batch_size=8", "reranker.list_size=4")
    env = dict(slurm_env, WANDB_MODE="offline", WANDB_SILENT="true")
    first = launch(env, tmp_path / "first", tmp_path / "cache", *grid)
    assert first.returncode == 0, first.stdout[-3000:]
    runs = [json.loads(f.read_text()) for f in (tmp_path / "first").glob("*/metrics.json")]
    assert len(runs) == 6 and all(r["status"] == "completed" for r in runs)
    built = {name: {r["stages"][name]["key"] for r in runs if not r["stages"][name]["cached"]}
             for name in ("train_encoder", "train_reranker", "rerank")}
    assert {k: len(v) for k, v in built.items()} == {"train_encoder": 1, "train_reranker": 2, "rerank": 6}
    assert len(list((tmp_path / "first").glob("*/wandb/offline-run-*"))) == 6
    again = launch(env, tmp_path / "again", tmp_path / "cache", *grid)
    assert again.returncode == 0, again.stdout[-3000:]
    rerun = [json.loads(f.read_text()) for f in (tmp_path / "again").glob("*/metrics.json")]
    assert all(s["cached"] for r in rerun for s in r["stages"].values() if s["key"] != "-")
    assert "stages reused from cache" in again.stdout


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
    for job in held:
        subprocess.run(["scontrol", "release", job], env=slurm_env, check=True)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-2000:]
    run = next((tmp_path / "grid").glob("*/metrics.json")).parent
    assert json.loads((run / "provenance.json").read_text())["config"]["retrieve_k"] == 30

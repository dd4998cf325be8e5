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

from .conftest import ROOT, reliability_row, write_jsonl

pytestmark = pytest.mark.slurm
SLURM_ARGS = ["hydra/launcher=slurm_dev"]  # the profile scripts/slurm_cluster.sh prints for this cluster


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


def launch(env, sweep: Path, cache: Path, *overrides: str, slurm: bool | list[str] = True, wait: bool = True):
    launcher = slurm if isinstance(slurm, list) else SLURM_ARGS if slurm else []
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


TRAIN = ("encoder=trained", "encoder.train.batch_size=4", "encoder.train.checkpoint_every=2", "encoder.train.epochs=2")


def _job_processes_gone(env, job: str) -> bool:
    out = subprocess.run(["scontrol", "listpids", job], env=env, capture_output=True, text=True).stdout
    return not [line for line in out.splitlines()[1:] if line.split() and line.split()[0].isdigit()]


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
            interrupt(job)
            for _ in range(900):
                info = next((j for j in _scontrol_jobs(env) if j["JobId"] == job), {})
                if info.get("JobState") == "PENDING" and _job_processes_gone(env, job):
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


def _node_state(env) -> str:
    return subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip().rstrip("*")


def _resumed_equals_uninterrupted(env, tmp_path: Path, out: str) -> dict:
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "grid").rglob("*.log*"))
    logs += "".join(p.read_text(errors="replace") for p in (tmp_path / "grid" / ".submitit").rglob("*_log.*"))
    assert "resuming from" in logs
    resumed = json.loads(next((tmp_path / "grid").glob("*/metrics.json")).read_text())
    ref = launch(env, tmp_path / "ref", tmp_path / "refcache", *TRAIN, slurm=False)
    assert ref.returncode == 0, ref.stderr[-2000:]
    reference = json.loads(next((tmp_path / "ref").glob("*/metrics.json")).read_text())
    assert resumed["metrics"] == pytest.approx(reference["metrics"], abs=1e-6)
    return resumed


def test_preempted_training_cell_is_requeued_and_resumes(slurm_env, tmp_path):
    """Requeue (SLURM's preemption) a cell mid-training: it restarts, resumes from its checkpoint and
    ends with the metrics of an uninterrupted run."""
    proc = launch(slurm_env, tmp_path / "grid", tmp_path / "cache", *TRAIN, wait=False)
    requeued = _interrupt_mid_training(slurm_env, tmp_path / "cache",
                                       lambda job: subprocess.run(["scontrol", "requeue", job], env=slurm_env, check=True))
    out, _ = proc.communicate(timeout=900)
    assert requeued, "training never reached a checkpoint"
    assert proc.returncode == 0, out[-3000:]
    _resumed_equals_uninterrupted(slurm_env, tmp_path, out)


def test_node_down_mid_cell_requeues_and_the_cell_finishes(slurm_env, tmp_path):
    """The node is set DOWN while a training cell runs: SLURM requeues it, the node returns, the cell
    resumes from its checkpoint and ends with the metrics of an uninterrupted run."""
    node = _sinfo_node(slurm_env)
    t0 = time.perf_counter()
    proc = launch(slurm_env, tmp_path / "grid", tmp_path / "cache", *TRAIN, wait=False)

    def node_down(job: str) -> None:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=fault-injection"], env=slurm_env,
                       check=True)
        # as an operator would: keep it out of service until the dead job's processes are gone, else SLURM
        # relaunches the requeued job next to them and drains the node
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=fault-injection"], env=slurm_env,
                       capture_output=True)

    requeued = _interrupt_mid_training(slurm_env, tmp_path / "cache", node_down)
    out, _ = proc.communicate(timeout=900)
    assert requeued, "training never reached a checkpoint"
    assert proc.returncode == 0, out[-3000:]
    recovery = time.perf_counter() - t0
    _resumed_equals_uninterrupted(slurm_env, tmp_path, out)
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
    reliability_row("a cell over its SLURM --mem limit", f"SLURM killed the job; the grid recorded the cell as failed "
                    f"({runs['minilm']['error'][:80]}...) and finished the other cell",
                    "nothing (the other cell finished; the over-limit cell is recorded as failed with SLURM's reason)", time.perf_counter() - t0)


def test_a_refused_submission_is_one_line_with_the_fix(slurm_env, tmp_path):
    """The default profile asks the MiniLM cell for a GPU this cluster does not have: one line names the
    cell, SLURM's reason and the override that fixes it; nothing stays queued."""
    proc = launch(slurm_env, tmp_path / "grid", tmp_path / "cache", "encoder=bm25,minilm", slurm=["hydra/launcher=slurm"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("skillrouter: SLURM refused cell #1 (encoder=minilm")
    assert "Invalid generic resource (gres) specification" in line and "hydra.launcher.gpus_per_node=null" in line
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


def test_llm_server_runs_as_its_own_job_and_is_cancelled(slurm_env, tmp_path):
    """llm=vllm with a stand-in server command (no GPU here): the server is a SLURM job, the grid's
    cells generate through it, and the job is cancelled when the grid ends."""
    stand_in = "'{python} -m skillrouter.synth.stub --host 0.0.0.0 --port {port}'"
    proc = launch(slurm_env, tmp_path / "grid", tmp_path / "cache", "llm=vllm", f"llm.command={stand_in}", "llm.model=stand-in",
                  "llm.slurm.gpus_per_node=null", "llm.slurm.partition=debug", "llm.slurm.cpus_per_task=1",
                  "llm.slurm.mem_gb=1", "llm.startup_timeout_s=180", "synth=skillrouter", "encoder=trained", slurm=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    m = json.loads(next((tmp_path / "grid").glob("*/metrics.json")).read_text())
    assert m["synth"]["gen_queries"]["made"] > 0 and m["synth"]["gen_queries"]["usage"]["requests"] > 0
    assert "LLM server job" in proc.stdout + proc.stderr and "cancelled" in proc.stdout + proc.stderr
    deadline = time.time() + 60
    while time.time() < deadline and any(j.get("JobName") == "llm-server" and j.get("JobState") in ("RUNNING", "PENDING")
                                         for j in _scontrol_jobs(slurm_env)):
        time.sleep(0.5)
    assert not [j for j in _scontrol_jobs(slurm_env) if j.get("JobName") == "llm-server" and j.get("JobState") == "RUNNING"]


def test_pool_embedding_as_a_slurm_job_array_of_shards(slurm_env, tmp_path):
    """embed.shards=2 embed.launcher=slurm: two shard jobs on the cluster, merged; the cell scores what
    an unsharded cell scores."""
    sharded = launch(slurm_env, tmp_path / "sharded", tmp_path / "c1", "encoder=minilm", "embed.shards=2",
                     "embed.launcher=slurm", "embed.slurm.partition=debug", slurm=False)
    assert sharded.returncode == 0, sharded.stdout[-2000:] + sharded.stderr[-2000:]
    plain = launch(slurm_env, tmp_path / "plain", tmp_path / "c2", "encoder=minilm", slurm=False)
    assert plain.returncode == 0, plain.stderr[-2000:]
    a = json.loads(next((tmp_path / "sharded").glob("*/metrics.json")).read_text())
    b = json.loads(next((tmp_path / "plain").glob("*/metrics.json")).read_text())
    assert a["metrics"] == pytest.approx(b["metrics"], abs=1e-9)
    assert len(list((tmp_path / "c1" / "embed_shard").glob("*/manifest.json"))) == 2
    assert list((tmp_path / "c1" / "embed_shard" / ".submitit").iterdir()), "the shards ran as SLURM jobs"

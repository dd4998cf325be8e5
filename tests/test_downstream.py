"""Agent trials for real: Harbor's CLI runs our SkillsBench-format tasks in Docker containers built on this machine
(scripts/docker_engine.sh), inside grids launched as a user launches them. The tasks' solutions can succeed only
with the task's GT skill (tests/downstream_tasks.py), so with Harbor's oracle, success says exactly which skills
each condition injected."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillrouter.cache.store import tree_fingerprint
from skillrouter.rankings import read_rankings
from skillrouter.tracking.offline import offline_runs, table

from .conftest import ROOT
from .downstream_tasks import write_study

pytestmark = pytest.mark.agents
SECRETS = {"ANTHROPIC_API_KEY": "sk-ant-never-written-0123456789", "OPENAI_API_KEY": "sk-oa-never-written-0123456789"}


def _args(tmp_path: Path, study: dict[str, Path], harbor: Path, sweep: str, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={tmp_path / sweep}",
            f"cache_dir={tmp_path / 'cache'}", "progress=false", "data=jsonl", f"data.pool={study['pool']}",
            f"data.queries={study['queries']}", f"downstream.tasks_root={study['tasks']}", f"downstream.harbor={harbor}",
            "downstream.trials=1", *extra]


def _env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}, "HF_HUB_OFFLINE": "1", **extra}


def launch(tmp_path, study, harbor, sweep, *extra, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(_args(tmp_path, study, harbor, sweep, *extra), cwd=ROOT, env=env or _env(), capture_output=True,
                          text=True, timeout=900)


def conditions(run_dir: Path) -> dict[str, dict]:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "completed", metrics.get("error")
    return {c["label"]: c for c in metrics["downstream"]["conditions"]}


def trial_entries(cache: Path) -> dict[str, float]:
    """Every published trial with the time it was published."""
    return {m.parent.name: json.loads(m.read_text())["created"] for m in (cache / "agent_trial").glob("*/manifest.json")}


def test_oracle_success_is_exactly_whether_each_router_injected_the_gt(tmp_path, agent_engine):
    study = write_study(tmp_path / "study")
    tree = tree_fingerprint(study["tasks"])
    proc = launch(tmp_path, study, agent_engine, "grid", "encoder=bm25,minilm", "tracking=wandb",
                  env=_env(WANDB_MODE="offline", WANDB_SILENT="true", **SECRETS))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    routed_outcomes = set()
    for cell in ("0", "1"):
        run = tmp_path / "grid" / cell
        by = conditions(run)
        assert set(by) == {"none", "gold", "routed@1"}
        assert by["gold"]["per_task"] == {"tally-ledger": 1.0, "rotate-logs": 1.0, "orbit-chart": 1.0}
        assert set(by["none"]["per_task"].values()) == {0.0}
        rankings = read_rankings(run / "rankings.jsonl")
        gt = {q["id"]: q["gt"][0] for q in map(json.loads, study["queries"].read_text().splitlines())}
        for task, reward in by["routed@1"]["per_task"].items():
            assert reward == float(gt[task] in rankings[task].ids[:1]), (cell, task)
            assert by["routed@1"]["injected"][task] == rankings[task].ids[:1]
            routed_outcomes.add(reward)
        down = json.loads((run / "metrics.json").read_text())["downstream"]
        assert down["excluded"] == [{"task": "skill-linter",
                                     "reason": "its verifier reads the skills folder (tests/test.sh reads /root/.claude/skills)"}]
        success = by["routed@1"]["success"]
        assert down["uplift_recovered"] == {"routed@1": pytest.approx(success)}  # none = 0, gold = 1
        # the oracle opens the skill that solves its task, and prints its path: it used every gold skill, nothing when
        # none was given, and a routed skill exactly when the router gave it the GT (then it succeeds)
        assert (by["gold"]["skill_use_rate"], by["gold"]["gt_skill_use_rate"]) == (1.0, 1.0)
        assert (by["none"]["skill_use_rate"], by["none"]["gt_skill_use_rate"]) == (0.0, 0.0)
        assert by["routed@1"]["gt_skill_use_rate"] == pytest.approx(success)
    assert routed_outcomes == {0.0, 1.0}, "the routers got some tasks right and some wrong"

    stages = [json.loads((tmp_path / "grid" / c / "metrics.json").read_text())["stages"] for c in ("0", "1")]
    for label in ("none", "gold"):  # one build for both routers
        assert [s[f"agent_trials/{label}"]["cached"] for s in stages] == [False, True]
    assert len(list((tmp_path / "cache" / "agent_trials").glob("*/manifest.json"))) == 4  # none, gold, 2 x routed@1
    entries = trial_entries(tmp_path / "cache")
    assert len(entries) <= 9  # 3 tasks x (none, gold, routed): a routed set equal to gold shares gold's trial

    assert tree_fingerprint(study["tasks"]) == tree, "the task tree is never modified"
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        data = path.read_bytes()
        assert not any(s.encode() in data for s in SECRETS.values()), f"a key was written into {path}"

    trial_runs = [r for r in offline_runs(tmp_path / "grid") if r.job_type == "agent_trials"]
    assert len(trial_runs) == 4
    rows = table(trial_runs[0], "trials")
    assert rows["columns"][:3] == ["task", "index", "reward"] and len(rows["data"]) == 3
    cell_runs = [r for r in offline_runs(tmp_path / "grid") if r.job_type == "cell"]
    assert sorted(r.summary["success@1"] for r in cell_runs) == sorted(conditions(tmp_path / "grid" / c)["routed@1"]["success"]
                                                                      for c in ("0", "1"))
    assert all(r.summary["success/gold"] == 1 and r.summary["success/none"] == 0 for r in cell_runs)

    again = launch(tmp_path, study, agent_engine, "again", "encoder=bm25,minilm")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "harbor:" not in (tmp_path / "again" / "stages.log").read_text(), "a second run starts no trial"
    assert trial_entries(tmp_path / "cache") == entries
    assert conditions(tmp_path / "again" / "0") == conditions(tmp_path / "grid" / "0")


def _containers(prefix: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    return [n for n in out.split() if n.startswith(prefix)]


def test_a_trial_killed_mid_run_is_retried_and_the_others_kept(tmp_path, agent_engine):
    study = write_study(tmp_path / "study", with_reader=False, solve_sleep=5)
    proc = subprocess.Popen(_args(tmp_path, study, agent_engine, "grid", "encoder=bm25", "downstream.skills=[gold]"),
                            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = None
    deadline = time.time() + 300
    while proc.poll() is None and killed is None and time.time() < deadline:
        running = _containers("rotate-logs__")
        if running:
            time.sleep(2)  # inside its solution's sleep
            subprocess.run(["docker", "kill", running[0]], capture_output=True)
            killed = running[0]
        time.sleep(0.3)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    assert killed, "the trial's container was seen and killed"
    gold = conditions(tmp_path / "grid" / "0")["gold"]
    assert gold["per_task"] == {"tally-ledger": 1.0, "rotate-logs": 1.0, "orbit-chart": 1.0} and gold["exceptions"] == 0
    (manifest,) = [json.loads(m.read_text()) for m in (tmp_path / "cache" / "agent_trials").glob("*/manifest.json")]
    assert manifest["harbor_retries"] >= 1 and manifest["run_here"] == 3


def test_a_killed_grid_resumes_with_its_finished_trials_kept(tmp_path, agent_engine):
    study = write_study(tmp_path / "study", with_reader=False, solve_sleep=2)
    args = _args(tmp_path, study, agent_engine, "grid", "encoder=bm25", "downstream.skills=[gold]",
                 "downstream.tasks=[tally-ledger,rotate-logs]", "downstream.trials=2", "downstream.concurrency=1")
    proc = subprocess.Popen(args, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    while not trial_entries(tmp_path / "cache") and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = trial_entries(tmp_path / "cache")
    assert 1 <= len(kept) < 4
    for name in _containers("tally-ledger__") + _containers("rotate-logs__"):  # what the killed Harbor left running
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    resumed = subprocess.run(args, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    after = trial_entries(tmp_path / "cache")
    assert len(after) == 4 and all(after[k] == t for k, t in kept.items()), "the finished trials were kept as they were"
    (manifest,) = [json.loads(m.read_text()) for m in (tmp_path / "cache" / "agent_trials").glob("*/manifest.json")]
    assert manifest["run_here"] == 4 - len(kept) and manifest["reused"] == len(kept)
    assert conditions(tmp_path / "grid" / "0")["gold"]["per_task"] == {"tally-ledger": 1.0, "rotate-logs": 1.0}


def test_terminus2_on_the_stub_llm_completes_its_trials_through_litellm(tmp_path, agent_engine):
    study = write_study(tmp_path / "study", with_reader=False)
    proc = launch(tmp_path, study, agent_engine, "grid", "encoder=bm25", "agent=terminus2", "llm=stub",
                  "downstream.skills=[gold]", "downstream.tasks=[tally-ledger]")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    gold = conditions(tmp_path / "grid" / "0")["gold"]
    assert gold["trials"] == 1 and gold["exceptions"] == 0  # reward 0 is fine: the stub does not solve it
    (entry,) = (tmp_path / "cache" / "agent_trial").iterdir()
    trajectory = json.loads((entry / "agent" / "trajectory.json").read_text())
    assert trajectory["agent"]["name"] == "terminus-2" and trajectory["agent"]["model_name"] == "openai/stub"
    assert len(trajectory["steps"]) >= 2, "the agent sent the model its task and got a turn back"


def test_nop_reads_no_skill(tmp_path, agent_engine):
    """Harbor's nop agent does nothing: given the gold skills, it reads none of them (and fails every task)."""
    study = write_study(tmp_path / "study", with_reader=False)
    proc = launch(tmp_path, study, agent_engine, "grid", "encoder=bm25", "agent=nop", "downstream.skills=[gold]",
                  "downstream.tasks=[tally-ledger]")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    gold = conditions(tmp_path / "grid" / "0")["gold"]
    assert gold["trials"] == 1 and gold["success"] == 0.0
    assert (gold["skill_use_rate"], gold["gt_skill_use_rate"], gold["trials_read"]) == (0.0, 0.0, 0)

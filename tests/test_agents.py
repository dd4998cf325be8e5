"""The downstream study's data side, without containers: task folders validated and flagged, skill sets
written as SKILL.md folders, trials summarised, a plan's trial count — and a task tree that does not join
the benchmark failing its cell in one line."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skillrouter.agents.skill_sets import chosen_ids, place, skill_md, write_set
from skillrouter.agents.tasks import dockerfile_copies, read_task, read_tasks
from skillrouter.agents.trials import TrialRow, summarize, uplift_recovered
from skillrouter.cache.store import tree_fingerprint
from skillrouter.data.loaders import parse_skill_md
from skillrouter.data.types import DataError, LoadReport, Query, Skill
from skillrouter.rankings import Ranking

from .conftest import ROOT
from .downstream_tasks import TASKS, write_study, write_task


@pytest.fixture
def study(tmp_path):
    return write_study(tmp_path / "study")


def test_a_valid_task_reads_its_timeouts_destinations_and_a_fingerprint_without_its_skills(study):
    (task,) = read_tasks(study["tasks"], ["tally-ledger"])
    assert task.timeouts == {"agent": 60.0, "verifier": 60.0, "build": 300.0}
    assert task.destinations == ["/root/.claude/skills", "/root/.agents/skills"]
    assert task.verifier_reads_skills is None
    before = task.fingerprint
    (Path(task.path) / "environment" / "skills" / "ledger-summer" / "SKILL.md").write_text("---\nname: x\n---\nother")
    assert read_task(Path(task.path), task.id).fingerprint == before, "the shipped skills are what conditions replace"
    (Path(task.path) / "instruction.md").write_text("changed")
    assert read_task(Path(task.path), task.id).fingerprint != before


@pytest.mark.parametrize("missing", ["instruction.md", "task.toml", "tests/test.sh", "environment/Dockerfile"])
def test_a_task_missing_a_file_is_one_line_naming_the_task_and_the_file(study, missing):
    (study["tasks"] / "rotate-logs" / missing).unlink()
    with pytest.raises(DataError) as err:
        read_tasks(study["tasks"])
    message = str(err.value)
    assert "\n" not in message and "'rotate-logs'" in message and message.startswith(str(study["tasks"] / "rotate-logs" / missing))


def test_a_dockerfile_that_installs_no_skills_folder_says_which_copy_lines_it_has(study):
    dockerfile = study["tasks"] / "rotate-logs" / "environment" / "Dockerfile"
    dockerfile.write_text("FROM x\n# COPY skills /root/.claude/skills\nCOPY data.csv /root/\nCOPY skills/one /opt/one\n")
    with pytest.raises(DataError, match=r"installs no skills folder .*its COPY lines: data.csv -> /root/, skills/one -> /opt/one"):
        read_tasks(study["tasks"], ["rotate-logs"])


def test_copy_lines_in_json_form_with_flags_and_continuations_are_read():
    text = 'COPY --chown=1000 skills /a/skills\nCOPY ["skills", "/b/skills"]\nADD skills \\\n  /c/skills\n'
    assert dockerfile_copies(text) == [("skills", "/a/skills"), ("skills", "/b/skills"), ("skills", "/c/skills")]


def test_a_verifier_that_reads_the_skills_folder_is_flagged_with_its_file(study):
    (task,) = read_tasks(study["tasks"], ["skill-linter"])
    assert task.verifier_reads_skills == "tests/test.sh reads /root/.claude/skills"
    # a verifier importing a skill copied elsewhere (SkillsBench's verifier-skills pattern) is flagged too
    root = study["tasks"] / "tally-ledger"
    with open(root / "environment" / "Dockerfile", "a") as fh:
        fh.write("COPY skills/ledger-summer /root/verifier-skills/ledger-summer\n")
    (root / "tests" / "test_outputs.py").write_text("import sys\nsys.path.insert(0, '/root/verifier-skills/ledger-summer')\n")
    assert read_task(root, "tally-ledger").verifier_reads_skills == "tests/test_outputs.py reads /root/verifier-skills/ledger-summer"


def test_folders_are_valid_and_unique_and_every_change_is_recorded():
    skills = [Skill("a", "pdf-tools", "d"), Skill("b", "pdf-tools", "d"), Skill("c", "PDF Tools!", "d"), Skill("d", "", "d")]
    placed = place(skills)
    assert [p.folder for p in placed] == ["pdf-tools", "pdf-tools-2", "pdf-tools-3", "d"]
    assert [p.renamed for p in placed] == [None, "clash", "invalid folder name", "invalid folder name"]
    assert placed[1].to_json() == {"id": "b", "name": "pdf-tools", "folder": "pdf-tools-2", "renamed": "clash"}


def test_a_written_skill_reads_back_as_the_pool_record_with_the_folder_as_its_name(tmp_path):
    skill = Skill("x/1", "Odd: Name", 'Says "hi": twice\nand more', "# Body\n\nline: with colon\n")
    (placed,) = place([skill])
    write_set(tmp_path / "set", [placed])
    back = parse_skill_md(tmp_path / "set" / placed.folder / "SKILL.md", tmp_path / "set", 10**6, LoadReport())
    assert (back.name, back.description, back.body) == (placed.folder, skill.description, skill.body)
    assert skill_md(skill, "n").startswith("---\nname: n\n")


def test_a_tree_pool_copies_the_whole_skill_folder_and_the_digest_follows_content(tmp_path):
    tree = tmp_path / "pool"
    (tree / "tools" / "mesh" / "scripts").mkdir(parents=True)
    (tree / "tools" / "mesh" / "SKILL.md").write_text("---\nname: mesh\ndescription: m\n---\nbody")
    (tree / "tools" / "mesh" / "scripts" / "run.py").write_text("print(1)")
    placed = place([Skill("tools/mesh", "mesh", "m", "body")])
    digest = write_set(tmp_path / "a", placed, tree)
    assert (tmp_path / "a" / "mesh" / "scripts" / "run.py").read_text() == "print(1)"
    assert write_set(tmp_path / "b", placed, tree) == digest
    (tree / "tools" / "mesh" / "scripts" / "run.py").write_text("print(2)")
    assert write_set(tmp_path / "c", placed, tree) != digest
    assert write_set(tmp_path / "e1", []) == write_set(tmp_path / "e2", []) == tree_fingerprint(tmp_path / "e1")


def test_conditions_choose_nothing_the_labels_or_the_ranking_head():
    q = Query("t", "text", gt=("g1",), all_gt=("g1", "pdf"))
    r = Ranking("t", ["x", "g1", "y"], [3, 2, 1])
    assert chosen_ids("none", None, q, r) == [] and chosen_ids("gold", None, q, r) == ["g1", "pdf"]
    assert chosen_ids("routed", 2, q, r) == ["x", "g1"] and chosen_ids("routed", 1, q, None) == []
    with pytest.raises(ValueError, match="downstream.skills"):
        chosen_ids("oracle", 1, q, r)


def test_success_is_the_mean_over_tasks_of_the_mean_over_trials_that_ran():
    rows = [TrialRow("a", 0, "k", 1.0), TrialRow("a", 1, "k", 0.0), TrialRow("a", 2, "k", None, "RuntimeError"),
            TrialRow("b", 0, "k", 1.0), TrialRow("b", 1, "k", 1.0), TrialRow("b", 2, "k", 1.0)]
    s = summarize(rows)
    # a: (1 + 0) / 2 = 0.5 (the trial that raised is not a failure); b: 1.0; success = (0.5 + 1.0) / 2
    assert s["success"] == 0.75 and s["per_task"] == {"a": 0.5, "b": 1.0}
    assert (s["trials"], s["exceptions"], s["exception_types"]) == (5, 1, {"RuntimeError": 1})
    # per trial index: 0 -> 1.0, 1 -> 0.5, 2 -> 1.0; population standard deviation = 0.2357
    assert s["spread"] == pytest.approx(0.235702, abs=1e-6)
    assert uplift_recovered(0.5, 0.2, 0.6) == 0.75 and uplift_recovered(0.5, 0.6, 0.6) is None


def _launch(tmp_path: Path, study: dict[str, Path], *extra: str) -> subprocess.CompletedProcess:
    args = [sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={tmp_path / 'sweep'}",
            f"cache_dir={tmp_path / 'cache'}", "progress=false", "data=jsonl", f"data.pool={study['pool']}",
            f"data.queries={study['queries']}", "encoder=bm25", f"downstream.tasks_root={study['tasks']}", *extra]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_plan_counts_trials_and_the_agent_hours_their_timeouts_allow(tmp_path, study):
    proc = _launch(tmp_path, study, "downstream.trials=2", "downstream.k=[1,3]", "plan=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    totals = json.loads((tmp_path / "sweep" / "plan.json").read_text())["totals"]
    # 3 tasks (the verifier-reading one left out) x 4 conditions (none, gold, routed@1, routed@3) x 2 trials,
    # each allowed 60 s of agent and 60 s of verifier
    assert totals["agent_trials"] == 24 and totals["agent_trials_cached"] == 0 and totals["agent_to_build"] == 4
    assert totals["agent_hours"] == pytest.approx(24 * 120 / 3600, abs=1e-3)
    assert "agent trials: 24 to run" in proc.stdout and "at most 0.8 agent-hours" in proc.stdout


def test_a_task_without_a_query_fails_its_cell_in_one_line(tmp_path, study):
    write_task(study["tasks"], "ghost-task", "nothing", {"name": "g", "description": "g", "body": "g"})
    proc = _launch(tmp_path, study, "downstream.skills=[none]")
    assert proc.returncode == 1
    metrics = json.loads((tmp_path / "sweep" / "0" / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["failed_stage"]["stage"] == "skill_sets"
    assert "task 'ghost-task': no query of the benchmark has this id" in metrics["error"]
    shutil.rmtree(study["tasks"] / "ghost-task")
    assert {t[0] for t in TASKS} <= {t.id for t in read_tasks(study["tasks"])}


def test_the_builtin_task_tree_is_valid_and_only_its_gt_bodys_line_solves_each_task(tmp_path):
    """One task per domain of the built-in benchmark (task id = query id); the line its solution looks for is in the
    GT skill's body and in no other skill of the pool or of the Hard tier (siblings and twins say other operations or
    objects); the verifier checks the GT's name."""
    from skillrouter.agents.builtin_tasks import purpose, write_tasks
    from skillrouter.data import builtin

    ids = write_tasks(tmp_path / "tasks", n_tasks=8)
    tasks = {t.id: t for t in read_tasks(tmp_path / "tasks")}
    assert sorted(tasks) == sorted(ids) and len(ids) == 8
    files = builtin.generate(tmp_path / "data")
    records = [json.loads(line) for name in ("pool", "distractors") for line in files[name].read_text().splitlines()]
    queries = {q["id"]: q for q in map(json.loads, files["queries"].read_text().splitlines())}
    assert len({queries[i]["domain"] for i in ids}) == 8 and all(queries[i]["task_type"] == "single" for i in ids)
    for task_id in ids:
        gt = next(r for r in records if r["id"] == queries[task_id]["gt"][0])
        line = purpose(gt["body"])
        assert [r["id"] for r in records if line in r["body"].splitlines()] == [gt["id"]]
        solve = (tmp_path / "tasks" / task_id / "solution" / "solve.sh").read_text()
        assert line in solve and gt["name"] not in solve  # the name comes from the installed skill, not the script
        assert gt["name"] in (tmp_path / "tasks" / task_id / "tests" / "test.sh").read_text()
        assert tasks[task_id].destinations == ["/root/.claude/skills", "/root/.agents/skills"]


def test_skill_use_is_what_the_agents_own_logs_say_it_opened(tmp_path):
    """A skill counts as read when the agent's logs or trajectory name a file in its folder: the oracle's printed
    path, a terminal agent's keystrokes, a tool call's file path; a folder whose name is only a prefix of another is
    not read by a mention of the other; no agent folder, no read."""
    from skillrouter.agents.skill_use import skill_use, use_rates

    oracle, terminal, nop = (tmp_path / n for n in ("oracle", "terminal", "nop"))
    (oracle / "agent").mkdir(parents=True)
    (oracle / "agent" / "oracle.txt").write_text("read /root/.claude/skills/csv-cleaner/SKILL.md\n")
    (terminal / "agent").mkdir(parents=True)
    (terminal / "agent" / "trajectory.json").write_text(json.dumps(
        {"steps": [{"keystrokes": "cat ~/.agents/skills/pdf-reader-pro/scripts/run.sh\n"}]}))
    nop.mkdir()
    injected = ["csv-cleaner", "pdf-reader", "pdf-reader-pro"]
    assert skill_use(oracle, injected, ["csv-cleaner"]).read == ("csv-cleaner",)
    used = skill_use(terminal, injected, ["pdf-reader"])
    assert used.read == ("pdf-reader-pro",) and not used.gt_read  # pdf-reader itself was never opened
    assert not skill_use(nop, injected, ["csv-cleaner"]).any_read
    sets = {"t1": {"skills": [{"id": "a", "folder": "csv-cleaner"}]}, "t2": {"skills": []}}
    rates = use_rates([("t1", oracle), ("t1", nop), ("t2", oracle)], sets, {"t1": ["a"], "t2": ["b"]})
    assert rates == {"skill_use_rate": round(1 / 3, 6), "gt_skill_use_rate": round(1 / 3, 6), "trials_read": 1}
    assert use_rates([], sets, {})["skill_use_rate"] is None

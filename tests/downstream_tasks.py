"""Tasks of our own in SkillsBench's layout whose solution can only succeed with the right skill: each task's GT
skill holds, in its body, the answer token for that task; ``solution/solve.sh`` (Harbor's oracle) looks for the
token in whatever skills the condition installed, and ``tests/test.sh`` checks it. So with ``agent=oracle``
success is 1 exactly when the task's GT skill was injected. Written on the spot: no ../shared, no registry
(the tasks build FROM the base image of scripts/docker_engine.sh)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from skillrouter.agents.builtin_tasks import DOCKERFILE, TASK_TOML, write_scripts

# (task id, query, GT skill (name, description, body words)); the decoys below share the hard query's words
TASKS = [
    ("tally-ledger", "sum the invoice ledger columns and report the grand total",
     ("ledger-summer", "Sum invoice ledger columns into a grand total.", "Add every ledger column of an invoice.")),
    ("rotate-logs", "compress and rotate the nightly server logs",
     ("log-rotator", "Rotate and compress server logs every night.", "Gzip old logs and keep seven days.")),
    ("orbit-chart", "draw the moon phase calendar for next month",
     ("lunar-almanac", "Astronomical tables for tides.", "Ephemeris arithmetic for satellites.")),
]
DECOYS = [
    ("moon-calendar-drawing", "Draw the moon phase calendar for next month.", "Calendar drawing of moon phases."),
    ("csv-deduper", "Remove duplicate rows from CSV files.", "Hash rows and keep the first."),
    ("pdf-splitter", "Split PDF files into pages.", "One file per page."),
]
VERIFIER_READER = ("skill-linter", "lint the skill folder of this task",
                   ("skill-lint", "Lint SKILL.md files.", "Check front matter."))


def token(task: str) -> str:
    return f"tok{int(hashlib.sha256(task.encode()).hexdigest(), 16) % 10**8:08d}"


def _skill(name: str, description: str, body: str, answers: str | None) -> dict:
    text = body + (f"\n\nanswer-for {answers}: {token(answers)}\n" if answers else "\n")
    return {"id": name, "name": name, "description": description, "body": text}


def write_task(root: Path, task: str, query: str, gt: dict, *, reads_skills: bool = False, solve_sleep: float = 0) -> None:
    d = root / task
    (d / "environment" / "skills" / gt["name"]).mkdir(parents=True)
    (d / "instruction.md").write_text(query + "\nWrite the answer token to /root/answer.txt.\n")
    (d / "task.toml").write_text(TASK_TOML)
    (d / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (d / "environment" / "skills" / gt["name"] / "SKILL.md").write_text(
        f"---\nname: {gt['name']}\ndescription: {gt['description']}\n---\n{gt['body']}")
    write_scripts(d, (f"sleep {solve_sleep}\n" if solve_sleep else "")
                  + f"f=$(grep -rlE 'answer-for {task}: tok[0-9]+' /root/.claude/skills | head -1)\n"
                  + "[ -n \"$f\" ] && echo \"read $f\" && "  # the skill file it reads, in its log: the skill-use rate's evidence
                  + f"grep -hoE 'answer-for {task}: tok[0-9]+' \"$f\" | sed 's/.*: //' > /root/answer.txt\nexit 0\n",
                  token(task), "ls /root/.claude/skills >/dev/null && " if reads_skills else "")


def write_study(root: Path, *, with_reader: bool = True, solve_sleep: float = 0) -> dict[str, Path]:
    """A pool, its benchmark (query id = task id) and the task tree; returns their paths."""
    root.mkdir(parents=True, exist_ok=True)
    tasks = root / "tasks"
    chosen = TASKS + ([VERIFIER_READER] if with_reader else [])
    pool = [_skill(n, desc, body, task) for task, _, (n, desc, body) in chosen]
    pool += [_skill(n, desc, body, None) for n, desc, body in DECOYS]
    queries = [{"id": task, "query": query, "gt": [gt[0]]} for task, query, gt in chosen]
    for task, query, (n, desc, body) in chosen:
        write_task(tasks, task, query, _skill(n, desc, body, task), reads_skills=task == VERIFIER_READER[0],
                   solve_sleep=solve_sleep)
    (root / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pool))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return {"pool": root / "pool.jsonl", "queries": root / "queries.jsonl", "tasks": tasks}

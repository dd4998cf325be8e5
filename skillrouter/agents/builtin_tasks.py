"""A task tree for the built-in benchmark, in SkillsBench's layout: the downstream study runs on the built-in data.

    python -m skillrouter.agents.builtin_tasks --out DIR [--tasks 8] [--seed 0]

One task per domain: the domain's first single-skill query (task id = query id), so a grid's rankings route each
task. The task's solution needs its GT skill's *body*: ``solution/solve.sh`` (what Harbor's oracle agent runs) looks
through the installed skills for the body line that says what the GT skill does (``Use this skill to <operation>
<object> in <technology> <domain> work.``: its siblings and Hard twins say other operations or objects) and writes the
``name`` of the skill holding it (and prints the path of the file it read: what the skill-use rate looks for in the
agent's log); ``tests/test.sh`` checks that name. So under the oracle, success is 1 exactly when the condition
installed the GT skill. Tasks build ``FROM`` the base image of ``scripts/docker_engine.sh`` (no registry).
"""
from __future__ import annotations

import argparse
import json
import shlex
import tempfile
from pathlib import Path

from ..data import builtin

BASE_IMAGE = "skillrouter/agent-base:bookworm"
TASK_TOML = ('version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n'
             "[environment]\nbuild_timeout_sec = 300.0\ncpus = 1\nmemory_mb = 512\nstorage_mb = 1024\n")
DOCKERFILE = (f"FROM {BASE_IMAGE}\nWORKDIR /root\n# Claude Code\nCOPY skills /root/.claude/skills\n"
              "# portable agents\nCOPY skills /root/.agents/skills\nSTOPSIGNAL SIGKILL\n")


def purpose(body: str) -> str:
    """The body line that says what a built-in skill does (its GT-only evidence)."""
    return next(line.strip() for line in body.splitlines() if line.startswith("Use this skill to "))


def write_scripts(task_dir: Path, solve: str, expected: str, check: str = "") -> None:
    """A task's ``solution/solve.sh`` (``solve``: its body) and ``tests/test.sh``: reward 1 when ``/root/answer.txt``
    holds ``expected`` (and the shell condition ``check``, if any, holds), else 0."""
    for sub in ("solution", "tests"):
        (task_dir / sub).mkdir(parents=True, exist_ok=True)
    (task_dir / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    (task_dir / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        f"if {check}[ \"$(cat /root/answer.txt 2>/dev/null)\" = {shlex.quote(expected)} ]; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n")
    for script in (task_dir / "solution" / "solve.sh", task_dir / "tests" / "test.sh"):
        script.chmod(0o755)


def write_task(root: Path, task_id: str, query: str, gt: dict) -> None:
    d = root / task_id
    (d / "environment" / "skills").mkdir(parents=True, exist_ok=True)
    (d / "instruction.md").write_text(f"{query}\nWrite the name of the skill that does this to /root/answer.txt.\n")
    (d / "task.toml").write_text(TASK_TOML)
    (d / "environment" / "Dockerfile").write_text(DOCKERFILE)
    line = shlex.quote(purpose(gt["body"]))
    write_scripts(d, f"f=$(grep -rlxF {line} /root/.claude/skills --include=SKILL.md | head -1)\n"
                     "[ -n \"$f\" ] && echo \"read $f\" && sed -n 's/^name: //p' \"$f\" | head -1 > /root/answer.txt\n"
                     "exit 0\n", gt["name"])


def write_tasks(out: Path, n_tasks: int = 8, seed: int = 0) -> list[str]:
    """The task tree of the built-in benchmark (default settings, ``seed``) under ``out``; returns the task ids."""
    with tempfile.TemporaryDirectory() as tmp:
        files = builtin.generate(tmp, seed=seed)
        pool = {r["id"]: r for r in map(json.loads, files["pool"].read_text().splitlines())}
        queries = [json.loads(line) for line in files["queries"].read_text().splitlines()]
    chosen, domains = [], set()
    for q in queries:
        if q["task_type"] == "single" and q["domain"] not in domains and len(chosen) < n_tasks:
            domains.add(q["domain"])
            chosen.append(q)
    for q in chosen:
        write_task(out, q["id"], q["query"], pool[q["gt"][0]])
    return [q["id"] for q in chosen]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", type=int, default=8, help="tasks, one per domain (at most 8)")
    parser.add_argument("--seed", type=int, default=0, help="the built-in data's seed (data.builtin.seed)")
    args = parser.parse_args()
    ids = write_tasks(args.out, args.tasks, args.seed)
    print(f"{len(ids)} tasks in {args.out}: {', '.join(ids)}")


if __name__ == "__main__":
    main()

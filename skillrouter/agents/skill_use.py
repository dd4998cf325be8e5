"""Whether an agent used the skills it was given: from a trial's own record of what the agent did.

An injected skill counts as read when the agent's logs or trajectory (everything Harbor keeps under the trial's
``agent/`` folder: a terminal agent's keystrokes, Claude Code's tool calls, the oracle's output) name a path inside
its folder, ``skills/<folder>/...`` (``SKILL.md``, a script, a reference). That is what SkillFlow's use rate asks of a
trial: was the skill opened, not merely installed. Known behaviours pin it: Harbor's oracle runs the task's
``solution/solve.sh``, which on the built-in tasks prints the skill file it reads; ``nop`` does nothing, so reads
nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

LOG_BYTES = 4_000_000  # of each log file read: enough for any trajectory, bounded for a runaway one


@dataclass(frozen=True)
class SkillUse:
    """Which of a trial's injected skill folders its agent read, and whether one of them is a GT skill's."""

    read: tuple[str, ...]
    gt_read: bool

    @property
    def any_read(self) -> bool:
        return bool(self.read)


def agent_text(trial: Path) -> str:
    """What the trial kept of its agent: every file under ``agent/`` (logs, trajectories), each at most
    :data:`LOG_BYTES`."""
    parts = []
    for path in sorted((trial / "agent").rglob("*")) if (trial / "agent").is_dir() else []:
        if path.is_file():
            with open(path, "rb") as fh:
                parts.append(fh.read(LOG_BYTES).decode("utf-8", errors="replace"))
    return "\n".join(parts)


def skill_use(trial: Path, injected: Iterable[str], gt: Iterable[str]) -> SkillUse:
    """``injected``: the folder names a condition wrote under the task's skills folder; ``gt``: those of them that
    hold a GT skill."""
    text = agent_text(trial)
    read = tuple(folder for folder in injected if re.search(rf"skills/{re.escape(folder)}(?![\w-])", text))
    return SkillUse(read, any(folder in read for folder in gt))


def use_rates(trials: Iterable[tuple[str, Path]], sets: Mapping[str, Mapping], gt: Mapping[str, Iterable[str]]
              ) -> dict[str, float | int | None]:
    """Over the trials that ran (``(task, trial folder)``): the share in which the agent read any skill the condition
    injected (``skill_use_rate``) and a GT skill's (``gt_skill_use_rate``); ``sets``: per task its injected skills
    (``{"skills": [{"id", "folder"}]}``), ``gt``: per task its GT skill ids. None without a trial that ran."""
    uses = []
    for task, folder in trials:
        placed = (sets.get(task) or {}).get("skills", [])
        labelled = set(gt.get(task, ()))
        uses.append(skill_use(folder, [s["folder"] for s in placed], [s["folder"] for s in placed if s["id"] in labelled]))
    if not uses:
        return {"skill_use_rate": None, "gt_skill_use_rate": None, "trials_read": 0}
    return {"skill_use_rate": round(sum(u.any_read for u in uses) / len(uses), 6),
            "gt_skill_use_rate": round(sum(u.gt_read for u in uses) / len(uses), 6),
            "trials_read": sum(u.any_read for u in uses)}

"""Agent trials as records: each keyed by what its outcome depends on, and a condition's success from them.

A trial's key hashes the task's content, the exact injected skill set (its content digest), the agent and
model settings, the environment, the timeout multiplier and the trial index — nothing about the router
that chose the set — so every condition and cell that would run the same trial finds it in the cache.

Success per condition is the mean over tasks of the mean reward over the trials that ran (reached the
verifier); a trial that never ran is an exception, counted apart, not a failure. The spread is the standard
deviation over trial indices of the per-index success. The share of the no-skill -> gold uplift a condition
recovers is ``(s - s_none) / (s_gold - s_none)``."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..cache.store import stable_hash
from ..secrets import mask, secret_values

TRIAL_KIND = "agent_trial"  # cache folder of the trials themselves (the agent_trials stages index them)
RESULT = "result.json"
KEPT = ("agent", "verifier", "trial.log")  # what a trial keeps of Harbor's folder: the agent's log, the verifier's


def trial_key(task_fingerprint: str, skills_digest: str, agent: Mapping[str, Any], environment: str,
              timeout_multiplier: float, index: int) -> str:
    return stable_hash({"task": task_fingerprint, "skills": skills_digest, "agent": dict(agent),
                        "environment": environment, "timeout_multiplier": timeout_multiplier, "index": index}, 24)


def copy_masked(source: Path, dest: Path, secrets: list[str] | None = None) -> None:
    """Copy Harbor's trial files, every text masked of this process's secret values (a key echoed in an agent's
    log never reaches the cache)."""
    secrets = secret_values() if secrets is None else secrets
    for name in KEPT:
        src = source / name
        paths = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else []
        for path in paths:
            target = dest / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = path.read_bytes()
            try:
                target.write_text(mask(data.decode("utf-8"), secrets), encoding="utf-8")
            except UnicodeDecodeError:
                target.write_bytes(data)


@dataclass(frozen=True)
class TrialRow:
    """One trial slot of a condition: its outcome, or an exception when it never ran."""

    task: str
    index: int
    key: str
    reward: float | None
    exception: str | None = None
    reused: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "index": self.index, "key": self.key, "reward": self.reward,
                "exception": self.exception, "reused": self.reused}


def summarize(rows: Iterable[TrialRow]) -> dict[str, Any]:
    """Success (mean over tasks of the mean over trials that ran), its spread over trial indices, the per-task
    means, and the trials that ran / raised."""
    rows = list(rows)
    ran = [r for r in rows if r.reward is not None]
    by_task: dict[str, list[float]] = {}
    for r in ran:
        by_task.setdefault(r.task, []).append(r.reward)
    per_task = {t: round(statistics.fmean(v), 6) for t, v in sorted(by_task.items())}
    by_index: dict[int, list[float]] = {}
    for r in ran:
        by_index.setdefault(r.index, []).append(r.reward)
    index_means = [statistics.fmean(v) for _, v in sorted(by_index.items())]
    return {"success": round(statistics.fmean(per_task.values()), 6) if per_task else None,
            "spread": round(statistics.pstdev(index_means), 6) if len(index_means) > 1 else 0.0 if index_means else None,
            "per_task": per_task, "trials": len(ran), "exceptions": sum(1 for r in rows if r.reward is None),
            "exception_types": dict(sorted(_count(r.exception for r in rows if r.reward is None).items()))}


def _count(values: Iterable[str | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v or "never ran"] = out.get(v or "never ran", 0) + 1
    return out


def uplift_recovered(success: float | None, none: float | None, gold: float | None) -> float | None:
    """The share of the no-skill -> gold uplift a condition recovers (None without an uplift to share)."""
    if success is None or none is None or gold is None or gold - none <= 0:
        return None
    return round((success - none) / (gold - none), 6)

"""Experiment tracking: ``tracking=wandb`` (offline unless the user says otherwise) or ``tracking=none``.

One W&B group per sweep, run names from the group choices, the resolved config, metrics in the
summary, per-query results as a Table, ``wandb.finish()`` at the end of every job (sequential jobs
in one process would otherwise share a run). Configs only ever name the *variable* that holds a key;
values that look like secrets are dropped before anything is logged.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

SECRET_KEY = re.compile(r"(api_?key|token|secret|password)$", re.IGNORECASE)


def scrub(obj: Any) -> Any:
    """Drop values under secret-looking keys (``api_key_env`` names a variable, so it stays)."""
    if isinstance(obj, dict):
        return {k: ("<redacted>" if SECRET_KEY.search(str(k)) else scrub(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub(v) for v in obj]
    return obj


def run_name(choices: dict[str, str]) -> str:
    keep = ("encoder", "reranker", "loss", "fields", "tier", "topk", "fn_filter", "seed")
    return ",".join(f"{k}={choices[k]}" for k in keep if k in choices)


class Tracker:
    """No-op tracker (``tracking=none``)."""

    def start(self, cfg: DictConfig, choices: dict[str, str], run_dir: Path, group: str) -> None: ...

    def log_result(self, result: dict[str, Any], per_query: dict[str, dict[str, float]]) -> None: ...

    def finish(self, failed: bool = False) -> None: ...


class WandbTracker(Tracker):
    def __init__(self, project: str, entity: str | None, mode: str):
        self.project, self.entity, self.mode = project, entity, mode
        self.run = None

    def start(self, cfg: DictConfig, choices: dict[str, str], run_dir: Path, group: str) -> None:
        import wandb

        self.run = wandb.init(project=self.project, entity=self.entity, mode=self.mode, group=group,
                              name=run_name(choices), dir=str(run_dir), tags=[f"{k}={v}" for k, v in choices.items()],
                              config=scrub(OmegaConf.to_container(cfg, resolve=True)), reinit="finish_previous")

    def log_result(self, result: dict[str, Any], per_query: dict[str, dict[str, float]]) -> None:
        import wandb

        summary = {k: v for k, v in result["metrics"].items() if v is not None}
        summary.update({f"n/{k}": v for k, v in result["counts"].items()})
        summary.update({f"stage/{k}/cached": int(v["cached"]) for k, v in result["stages"].items()})
        self.run.summary.update(summary)
        names = sorted({m for row in per_query.values() for m in row})
        table = wandb.Table(columns=["qid", *names], data=[[qid, *[row.get(m) for m in names]] for qid, row in per_query.items()])
        self.run.log({"per_query": table})

    def finish(self, failed: bool = False) -> None:
        if self.run is not None:
            self.run.finish(exit_code=1 if failed else 0)
            self.run = None


def make_tracker(cfg: DictConfig) -> Tracker:
    t = cfg.tracking
    if t.name == "none":
        return Tracker()
    if t.name == "wandb":
        return WandbTracker(t.project, t.get("entity"), t.mode)
    raise ValueError(f"tracking must be none or wandb, got {t.name!r}")

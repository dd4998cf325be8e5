"""Hydra callbacks: a grid summary printed at the end of every multirun."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ..tuning.study import is_study, read_summary
from .plan import PLAN
from .status import format_stages, format_status, grid_status, stage_status


class GridSummary(Callback):
    """Print the state of every cell (and of the stages that failed), and what the plan found: the
    overrides that changed nothing, the cells that were one computation. Exit non-zero when any cell
    failed (cells never raise, so the whole batch runs and this hook is reached); in an Optuna study, when its
    trials failed more often than ``hydra.sweeper.max_failure_rate`` allows or its best trial's test cell did not
    complete (``study.json`` says)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if config.get("plan"):
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = grid_status(sweep_dir)
        print(format_status(rows))
        stages = stage_status(sweep_dir)
        if stages:
            print(format_stages(stages, every=False))
        if (sweep_dir / PLAN).exists():
            plan = json.loads((sweep_dir / PLAN).read_text())
            for noop in plan["noop_overrides"]:
                print(f"  no effect: {noop['key']}={','.join(noop['values'])}: {noop['why']}")
            for cells in plan["one_computation"]:
                print(f"  one computation: cells {', '.join(f'#{c}' for c in cells)} (their graphs end in one key)")
        if is_study(config.hydra):
            study = read_summary(sweep_dir)
            if study.get("too_many_failures", True) or (study.get("test") or {}).get("status") != "completed":
                sys.exit(1)
        elif any(r["status"] != "completed" for r in rows):
            sys.exit(1)

"""Hydra callbacks: a grid summary printed at the end of every multirun (``skillrouter.tuning.callbacks`` extends it
with what an Optuna study adds)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from .plan import PLAN
from .status import format_stages, format_status, grid_status, stage_status


class GridSummary(Callback):
    """Print the state of every cell (and of the stages that failed), and what the plan found: the
    overrides that changed nothing, the cells that were one computation. Exit non-zero when any cell
    failed (cells never raise, so the whole batch runs and this hook is reached), or as :meth:`failed` says."""

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
        if self.failed(config, sweep_dir, rows):
            sys.exit(1)

    def failed(self, config: DictConfig, sweep_dir: Path, rows: list[dict[str, Any]]) -> bool:
        """Whether the multirun failed: whether any of its cells did."""
        return any(r["status"] != "completed" for r in rows)

"""Hydra callbacks: a grid summary printed at the end of every multirun."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from .status import grid_status, format_status


class GridSummary(Callback):
    """Print the state of every cell; exit non-zero when any cell failed (cells never raise, so
    the whole batch runs and this hook is reached)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        rows = grid_status(Path(config.hydra.sweep.dir))
        print(format_status(rows))
        if any(r["status"] != "completed" for r in rows):
            sys.exit(1)

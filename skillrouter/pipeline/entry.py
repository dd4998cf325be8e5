"""What ``launch.py`` hands the composed config to: one cell, with Hydra's run directory and choices."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Mapping

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from ..data import DataError
from ..synth.client import LLMUnavailable
from ..tuning.study import StudyRefused, is_study, refuse_test_objective, trial_value
from ..cache.integrity import StageWriteError
from .cell import run_cell

log = logging.getLogger(__name__)
SWEEPABLE_VALUES = ("topk", "seed")  # plain keys swept like groups (numeric group options trip Hydra)


def cell_choices(cfg: DictConfig, runtime_choices: Mapping[str, Any] | None = None) -> dict[str, str]:
    """``{group: option}`` for the experiment groups, plus the plain sweep keys. ``runtime_choices``:
    Hydra's record of the groups (this job's own by default; a launcher passes a frozen config's)."""
    runtime_choices = HydraConfig.get().runtime.choices if runtime_choices is None else runtime_choices
    choices = {str(g): str(o) for g, o in runtime_choices.items() if not str(g).startswith("hydra") and o is not None}
    choices.update({k: str(cfg[k]) for k in SWEEPABLE_VALUES if k in cfg})
    return choices


def main(cfg: DictConfig) -> dict[str, Any] | float | None:
    """Run one cell; a trial of an Optuna study returns its objective (:mod:`skillrouter.tuning`). In a multirun, a
    failed cell is recorded on disk and the grid goes on (the grid summary reports it and sets the exit code); in a
    single run a data error exits with a one-line message and status 2, any other error keeps its traceback."""
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    try:
        group = Path(hc.sweep.dir).name if multirun else "single"
        if multirun and is_study(hc):
            refuse_test_objective(cfg)
            return trial_value(cfg, run_cell(cfg, Path(hc.runtime.output_dir), cell_choices(cfg), group))
        return run_cell(cfg, Path(hc.runtime.output_dir), cell_choices(cfg), group)
    except (DataError, StageWriteError, LLMUnavailable) as err:
        if multirun:
            return None
        kind = {DataError: "data error", StageWriteError: "write error", LLMUnavailable: "no LLM"}[type(err)]
        print(f"skillrouter: {kind}: {err}", file=sys.stderr)
        sys.exit(2)
    except StudyRefused as refused:
        log.error("trial refused: %s", refused)
        return None
    except Exception:
        if multirun:
            return None
        raise

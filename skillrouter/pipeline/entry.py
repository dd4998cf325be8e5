"""One cell run from its composed config, with Hydra's run directory and choices (``launch.py`` comes here through
``skillrouter.tuning.entry``, which makes a cell an Optuna study's trial where one drives the multirun)."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from ..data import DataError
from ..synth.client import LLMUnavailable
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
    if cfg.get("cascade"):  # a list: its steps, in order
        choices["cascade"] = " > ".join(str(step) for step in cfg.cascade)
    return choices


class CellRefused(ValueError):
    """A cell its caller will not run (an Optuna trial that would tune on the test split): said in one line."""


def main(cfg: DictConfig, check: Callable[[DictConfig], None] | None = None,
         value: Callable[[DictConfig, dict[str, Any]], Any] | None = None) -> Any:
    """Run one cell: ``check`` may refuse it first (:class:`CellRefused`), ``value`` makes what it returns of the
    result (an Optuna trial's objective). In a multirun, a failed cell is recorded on disk and the grid goes on (the
    grid summary reports it and sets the exit code); in a single run a data error exits with a one-line message and
    status 2, any other error keeps its traceback."""
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    try:
        group = Path(hc.sweep.dir).name if multirun else "single"
        if check is not None:
            check(cfg)
        result = run_cell(cfg, Path(hc.runtime.output_dir), cell_choices(cfg), group)
        return value(cfg, result) if value is not None else result
    except (DataError, StageWriteError, LLMUnavailable) as err:
        if multirun:
            return None
        kind = {DataError: "data error", StageWriteError: "write error", LLMUnavailable: "no LLM"}[type(err)]
        print(f"skillrouter: {kind}: {err}", file=sys.stderr)
        sys.exit(2)
    except CellRefused as refused:
        log.error("refused: %s", refused)
        return None
    except Exception:
        if multirun:
            return None
        raise

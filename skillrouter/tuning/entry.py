"""What ``launch.py`` hands the composed config to: a cell (:func:`skillrouter.pipeline.entry.main`), or, where an
Optuna study drives the multirun, a trial: the same cell, refused when it would tune on the test split, returning its
objective to the study."""
from __future__ import annotations

from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from ..pipeline import entry
from .study import is_study, refuse_test_objective, trial_value


def main(cfg: DictConfig) -> Any:
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN and is_study(hc):
        return entry.main(cfg, check=refuse_test_objective, value=trial_value)
    return entry.main(cfg)

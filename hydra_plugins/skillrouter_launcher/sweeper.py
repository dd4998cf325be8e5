"""The grid sweeper (``hydra/sweeper=skillrouter_basic``, the default): Hydra's basic sweeper without its up-front
validation. The grid launchers compose every cell themselves before anything runs (a bad override stops the grid
there, in Hydra's own words), so validating composed each cell a second time: half of a large grid's planning.

``hydra/sweeper=study_cell``: the command line's overrides as one cell, whatever a study's config says of its
search (the best trial's test cell, :mod:`skillrouter.tuning.callbacks`, composed from the study's own config)."""
from __future__ import annotations

from typing import Any, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class GridSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """The launcher's composition of each cell is the validation (see the module docstring)."""


class StudyCellSweeper(Sweeper):
    def __init__(self, **study: Any) -> None:
        """``study``: the study's settings, which one cell does not use."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.launcher = Plugins.instance().instantiate_launcher(config=config, hydra_context=hydra_context,
                                                                 task_function=task_function)

    def sweep(self, arguments: list[str]) -> Any:
        return self.launcher.launch([list(arguments)], initial_job_idx=0)

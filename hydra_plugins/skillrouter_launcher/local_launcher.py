"""The local grid launcher (``hydra/launcher=local``, the default): the sweep's cells composed into one
graph, its unique stages built in topological order in this process (``workers`` side by side, as threads or
``processes``), then each cell scored in its own run directory through Hydra's ``run_job`` (its ``.hydra/``
files, its log), then the grid's end told to its observers (W&B's grid run when tracking is on)."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from hydra.core.utils import JobReturn, run_job
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

log = logging.getLogger(__name__)


class StageLog:
    """While the grid's stages build, this process's own lines go to the console and to
    ``<sweep>/stages.log``, in the cells' log format; third-party loggers at the levels the config's
    ``hydra.job_logging.loggers`` gives them in the cells."""

    def __init__(self, sweep_dir: Path, quiet: Mapping[str, Any]):
        from skillrouter.pipeline.execute.slurm import LOG_FORMAT

        for name, settings in quiet.items():
            logging.getLogger(name).setLevel(settings.get("level", "WARNING"))
        self.logger = logging.getLogger("skillrouter")
        self.handlers = [logging.StreamHandler(sys.stdout), logging.FileHandler(sweep_dir / "stages.log")]
        for h in self.handlers:
            h.setFormatter(logging.Formatter(LOG_FORMAT))

    def __enter__(self) -> StageLog:
        self.level, self.propagate = self.logger.level, self.logger.propagate
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        for h in self.handlers:
            self.logger.addHandler(h)
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.handlers:
            self.logger.removeHandler(h)
            h.close()
        self.logger.setLevel(self.level)
        self.logger.propagate = self.propagate


class LocalGridLauncher(Launcher):
    def __init__(self, workers: int = 1, processes: bool = False) -> None:
        self.workers, self.processes = workers, processes
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from skillrouter.events import observers_of
        from skillrouter.pipeline.cell import GridRun, grid_run
        from skillrouter.pipeline.execute.build import Builder
        from skillrouter.pipeline.execute.local import LocalExecutor
        from skillrouter.pipeline.grid import end_grid, launch_grid
        from skillrouter.pipeline.journal import StageJournal
        from skillrouter.progress import quiet_library_bars
        from skillrouter.tuning.study import trial_batch

        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        first, study = trial_batch(self.config.hydra, initial_job_idx, len(job_overrides))
        grid = launch_grid(self.config, self.hydra_context, job_overrides, first, study=study)
        if grid is None:
            return []
        sweep_dir = grid.sweep_dir
        quiet_library_bars()
        cfg: Any = next(iter(grid.configs.values()))
        builder = Builder(grid.cache, StageJournal(sweep_dir), progress=cfg.progress, user=str(sweep_dir),
                          observers=observers_of(cfg, sweep_dir.name))
        with StageLog(sweep_dir, self.config.hydra.job_logging.get("loggers") or {}):
            LocalExecutor(builder, workers=self.workers, processes=self.processes, server=grid.llm_server()).run(grid.sinks())
        runs = []
        with grid_run(GridRun(str(sweep_dir), "stage", grid.graphs, grid.plan.built_for())):
            for idx, config in grid.configs.items():
                runs.append(run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=config,
                                    job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir"))
        end_grid(grid, study_batch=study)
        return runs

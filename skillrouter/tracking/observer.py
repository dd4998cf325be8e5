"""The W&B observer ``tracking=wandb`` names (``conf/tracking/wandb.yaml``: ``observer._target_``): it is told what
happened (:mod:`skillrouter.events`) and turns it into runs — a run per built stage (:mod:`.stage_runs`), per cell
(:mod:`.cell_runs`), per grid or study (:mod:`.grid_run`). It imports nothing of the rooms it watches.

It pickles with its settings only (a SLURM stage job carries it); the runs it holds open stay in the process that
opened them."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import events
from .cell_runs import CellTracker
from .grid_run import log_grid
from .settings import TrackingSettings
from .stage_runs import StageRun


class WandbObserver:
    def __init__(self, project: str, entity: str | None, mode: str, group: str, upload: bool = False):
        self.settings = TrackingSettings(str(project), entity, str(mode), group, bool(upload))
        self.stages: dict[str, StageRun] = {}  # open stage runs, by stage key
        self.cells: dict[str, CellTracker] = {}  # open cell runs, by run folder

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.settings, self.stages, self.cells = state["settings"], {}, {}

    def notify(self, event: Any) -> None:
        if isinstance(event, events.StageStarted):
            self.stages[event.stage.key] = StageRun(self.settings, event)
        elif isinstance(event, events.StageStep) and event.stage.key in self.stages:
            self.stages[event.stage.key].log(dict(event.values), event.step)
        elif isinstance(event, events.StageSummary) and event.stage.key in self.stages:
            self.stages[event.stage.key].summary(dict(event.values))
        elif isinstance(event, events.StageTable) and event.stage.key in self.stages:
            self.stages[event.stage.key].table(event.name, event.columns, event.rows)
        elif isinstance(event, events.StageEnded) and event.stage.key in self.stages:
            run = self.stages.pop(event.stage.key)
            if not event.failed and event.entry:
                run.publish(Path(event.entry), Path(event.cache_root))
            run.finish(failed=event.failed)
        elif isinstance(event, events.CellStarted):
            self.cells[event.run_dir] = CellTracker(self.settings, event)
        elif isinstance(event, events.CellScored) and event.run_dir in self.cells:
            self.cells[event.run_dir].log_result(event)
        elif isinstance(event, events.CellEnded) and event.run_dir in self.cells:
            self.cells.pop(event.run_dir).finish(failed=event.failed)
        elif isinstance(event, events.GridEnded) and not event.study_batch:
            log_grid(self.settings, event)
        elif isinstance(event, events.StudyEnded):
            log_grid(self.settings, event.grid, study=event.summary)

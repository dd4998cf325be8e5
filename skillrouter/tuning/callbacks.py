"""The Hydra callback of every multirun: the grid summary (:class:`~skillrouter.pipeline.callbacks.GridSummary`) and,
around an Optuna study, :func:`~.study.prepare` before the plugin opens the study; when it ends, the best trial scored
once on the test split, ``study.json``, and the study's end told to its observers (W&B's grid run).

The test score of the best trial is a cell of its own (``<sweep>/test/trial_<n>/``): the trial's overrides with
``eval.split=test data.hold_out_dev=true`` (the same trained stages, from the cache, scored on the test queries),
launched like a one-cell grid with the study's launcher. It is scored once: a resumed study whose best trial did
not change reads it back."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .. import events
from ..data.jsonl import read_json
from ..pipeline.callbacks import GridSummary
from ..pipeline.status import cell_overrides, grid_ended
from .study import StudyRefused, is_study, prepare, read_summary, storage_of, summarize, write_summary

log = logging.getLogger(__name__)
TEST_DIR = "test"
SCORED_ELSEWHERE = ("eval.split", "data.hold_out_dev")  # what the test cell sets itself
STUDY_ONLY = ("hydra/sweeper", "hydra.sweeper", "hydra.sweep.dir", "hydra.sweep.subdir")  # not carried to the test cell


class StudyCallback(GridSummary):
    """A grid's summary; in an Optuna study, the study's work first, and the exit status the study's."""

    def __init__(self) -> None:
        self.before: set[int] = set()  # the trials the study had when this run started

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not is_study(config.hydra):
            return
        try:
            said, self.before = prepare(config)
        except StudyRefused as refused:
            print(f"skillrouter: {refused}", file=sys.stderr)
            sys.exit(2)
        log.info(said)
        print(said)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if is_study(config.hydra):
            self._end_study(config)
        super().on_multirun_end(config, **kwargs)

    def failed(self, config: DictConfig, sweep_dir: Path, rows: list[dict[str, Any]]) -> bool:
        """A study failed when its trials failed more often than ``hydra.sweeper.max_failure_rate`` allows or its best
        trial's test cell did not complete (``study.json`` says); a grid, when any cell did."""
        if not is_study(config.hydra):
            return super().failed(config, sweep_dir, rows)
        study = read_summary(sweep_dir)
        return study.get("too_many_failures", True) or (study.get("test") or {}).get("status") != "completed"

    def _end_study(self, config: DictConfig) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        summary = summarize(*storage_of(config.hydra), self.before, float(config.hydra.sweeper.max_failure_rate))
        summary.update(objective=str(config.objective), n_trials=len(summary["trials"]))
        best = summary["best"]
        if best is not None:
            trial = read_json(sweep_dir / best["cell"] / "metrics.json")
            summary["split"] = trial.get("split")
            summary["test"] = test_of_best(config, sweep_dir, best["number"], trial)
        path = write_summary(sweep_dir, summary)
        test = summary.get("test") or {}
        on_test = (f"on test: {config.objective}={test['metrics'].get(config.objective)}" if test.get("status") == "completed"
                   else f"its test cell did not complete ({test.get('status')}: {test.get('error')}), see {sweep_dir / TEST_DIR}")
        print(f"study {summary['study']}: {len(summary['trials'])} trials; best "
              + (f"#{best['number']} {best['params']} {config.objective}={best['value']:.4f} on {summary['split']['scored']}; "
                 f"{on_test}" if best else "none (no trial finished)") + f"; {path}")
        events.publish(events.observers_of(config, sweep_dir.name), events.StudyEnded(grid_ended(sweep_dir), summary))


def test_of_best(config: DictConfig, sweep_dir: Path, number: int, trial: dict[str, Any]) -> dict[str, Any]:
    """The best trial's test metrics: its own when it was scored on test (``allow_test_tuning``), else those of its
    test cell, run here the first time (see the module docstring)."""
    if trial.get("split", {}).get("scored") == "test":
        return {"cell": str(number), "status": "completed", "metrics": trial["metrics"]}
    cell_root = sweep_dir / TEST_DIR / f"trial_{number}"
    metrics = cell_root / "0" / "metrics.json"
    if not (metrics.exists() and read_json(metrics).get("status") == "completed"):
        overrides = [o for o in cell_overrides(sweep_dir / str(number)) if o.split("=")[0].lstrip("+~") not in SCORED_ELSEWHERE]
        carried = [o for o in OmegaConf.to_container(config.hydra.overrides.hydra)
                   if not o.split("=")[0].startswith(STUDY_ONLY)]
        sources = {s.provider: s.path for s in config.hydra.runtime.config_sources}
        config_dir = sources.get("command-line") or sources["main"]  # -cd sweeps, else the app's conf/
        command = [sys.executable, str(Path(sys.argv[0]).resolve()), "-m", "--config-dir", str(config_dir),
                   "--config-name", str(config.hydra.job.config_name), *overrides, "eval.split=test",
                   "data.hold_out_dev=true", *carried, "hydra/sweeper=study_cell", f"hydra.sweep.dir={cell_root}"]
        log.info("scoring the best trial #%d on the test split, once: %s", number, " ".join(command))
        own_service = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}  # W&B: its own, not this process's
        subprocess.run(command, check=False, env=own_service)
    scored = read_json(metrics) if metrics.exists() else {"status": "missing", "metrics": {}}
    return {"cell": str(metrics.parent.relative_to(sweep_dir)), "status": scored.get("status"),
            "metrics": scored.get("metrics", {}), "error": scored.get("error")}

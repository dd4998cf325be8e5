"""An Optuna study driven by Hydra's own sweeper (``hydra/sweeper=optuna``) whose trials are cells of our grid.

The plugin asks Optuna for a batch of ``hydra.sweeper.n_jobs`` trials and hands their overrides to our grid
launcher, which plans, dedupes and dispatches them like any grid (a stage the trials share is built once, and
stays in the cache for the next batch); each trial returns its ``objective``, a metric of ``eval.split``. What
this module adds around the plugin, read before it starts (:func:`prepare`):

* the study lives in the sweep folder (SQLite ``study.db``) unless ``hydra.sweeper.storage`` names another;
* resuming (the same ``hydra.sweep.dir``): a trial a killed study left running is marked failed, and
  ``hydra.sweeper.n_trials`` counts the study's finished trials, so only the ones left run; a trial's cell
  folder is its trial number, so no resumed trial overwrites a finished one; the sampler's seed (``seed`` unless
  set) is offset by the trials the study has, so it does not propose its first trials again;
* the objective is never scored on the test split unless ``allow_test_tuning=true``.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from ..data.jsonl import atomic_write_json, read_json
from ..eval.metrics import parse_metrics
from ..pipeline.compose import scored_split
from ..pipeline.entry import CellRefused

log = logging.getLogger(__name__)
os.environ.setdefault("SQLALCHEMY_SILENCE_UBER_WARNING", "1")  # optuna 2.10 on SQLAlchemy 1.4 (pinned <2 for it)
STUDY_DB = "study.db"
SUMMARY = "study.json"


class StudyRefused(CellRefused):
    """A study that would tune on the wrong thing: said in one line before any trial runs."""


def is_study(hydra_cfg: DictConfig) -> bool:
    """Whether Hydra's Optuna sweeper drives this multirun."""
    return "optuna" in str(hydra_cfg.sweeper.get("_target_", "")).lower()


def refuse_test_objective(cfg: DictConfig) -> None:
    """A study's objective is scored on a dev split unless ``allow_test_tuning=true`` (checked for the study, and
    for each trial, whose own overrides could move it)."""
    if scored_split(cfg) == "test" and not cfg.allow_test_tuning:
        raise StudyRefused(
            f"refusing to tune on the test split: the objective {cfg.objective} would be scored on eval.split=test. "
            "Tune on a dev split (eval.split=dev: a seeded share of the training queries held out of training, or "
            "data.dev_queries=FILE), or pass allow_test_tuning=true (every output then records it)")


def check(cfg: DictConfig) -> None:
    """Refuse what would make a study's best trial meaningless: the test split as objective (unless
    ``allow_test_tuning``), an objective the cells do not score, minimising a metric where higher is better."""
    refuse_test_objective(cfg)
    scored = [m.name for m in parse_metrics(cfg.eval.metrics)]
    if cfg.objective not in scored:
        raise StudyRefused(f"objective={cfg.objective} is not a metric the cells score (eval.metrics: {', '.join(scored)})")
    directions = cfg.hydra.sweeper.direction
    directions = list(directions) if OmegaConf.is_list(directions) else [directions]
    if any(str(getattr(d, "name", d)) != "maximize" for d in directions):
        raise StudyRefused(f"hydra.sweeper.direction={'/'.join(str(getattr(d, 'name', d)) for d in directions)}: "
                           f"every metric here ({cfg.objective} included) is better when higher; pass "
                           "hydra.sweeper.direction=maximize")
    if cfg.plan:
        raise StudyRefused("plan=true plans a grid; a study chooses its trials as it runs (plan one trial with "
                           "its overrides and hydra/sweeper=skillrouter_basic)")


def storage_of(hydra_cfg: DictConfig) -> tuple[str, str]:
    """The study's storage URL and name, as :func:`prepare` set them."""
    return str(hydra_cfg.sweeper.storage), str(hydra_cfg.sweeper.study_name)


def prepare(cfg: DictConfig) -> tuple[str, set[int]]:
    """Check the study (:func:`check`), put its storage in the sweep folder unless one is named, and resume it:
    stale running trials marked failed (their cells too), ``n_trials`` cut by the finished ones. Returns what it
    did, in one line, and the numbers of the trials the study had already."""
    import optuna

    check(cfg)
    sweep_dir = Path(str(cfg.hydra.sweep.dir)).resolve()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    sweeper = cfg.hydra.sweeper
    with read_write(sweeper), open_dict(sweeper):
        if not sweeper.storage:
            sweeper.storage = f"sqlite:///{sweep_dir / STUDY_DB}"
        if not sweeper.study_name:
            sweeper.study_name = sweep_dir.name
        if "seed" in sweeper.sampler and sweeper.sampler.seed is None:  # a study that can be run again
            sweeper.sampler.seed = int(cfg.seed)
    storage, name = storage_of(cfg.hydra)
    if name not in {s.study_name for s in optuna.get_all_study_summaries(storage)}:
        return f"study {name}: new, {sweeper.n_trials} trials in batches of {sweeper.n_jobs}, in {storage}", set()
    study = optuna.load_study(study_name=name, storage=storage)
    stale = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for trial in stale:
        study._storage.set_trial_state(trial._trial_id, optuna.trial.TrialState.FAIL)
        mark_stopped(sweep_dir / str(trial.number))
    finished = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    before = {t.number for t in study.get_trials(deepcopy=False)}
    with read_write(sweeper):
        left = max(0, int(sweeper.n_trials) - finished)
        sweeper.n_trials = left
        if sweeper.sampler.get("seed") is not None:  # a sampler seeded as before would propose the first trials again
            sweeper.sampler.seed = int(sweeper.sampler.seed) + len(before)
    said = (f"study {name}: resumed with {finished} finished trials kept"
            + (f", {len(stale)} left running by a stopped study marked failed ({', '.join(f'#{t.number}' for t in stale)})"
               if stale else "") + f"; {left} to run, in {storage}")
    return said, before


def mark_stopped(run_dir: Path) -> None:
    """A stale trial's cell, left ``running`` by the killed study: recorded as failed, saying why."""
    if (run_dir / "status.json").exists() and not (run_dir / "metrics.json").exists():
        started = read_json(run_dir / "status.json")
        failed = {"choices": started.get("choices", {}), "status": "failed",
                  "error": "the study was stopped while this trial ran (marked failed when it resumed)"}
        for name in ("metrics.json", "status.json"):
            atomic_write_json(run_dir / name, failed)


def batch_start(hydra_cfg: DictConfig, initial_job_idx: int, n: int) -> int:
    """The job number of a batch's first cell: its trial's number (the plugin restarts its count on resume; the
    trials it just asked are the study's ``n`` running ones, in order)."""
    import optuna

    storage, name = storage_of(hydra_cfg)
    running = sorted(t.number for t in optuna.load_study(study_name=name, storage=storage).get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)))
    if len(running) != n or running != list(range(running[0], running[0] + n)):
        raise RuntimeError(f"study {name}: expected {n} consecutive running trials for this batch, found {running} "
                           "(is another process running this study?)")
    return running[0]


def trial_batch(hydra_cfg: DictConfig, initial_job_idx: int, n: int) -> tuple[int, bool]:
    """What a grid launcher asks before it plans ``n`` cells: the first cell's number and whether they are a batch
    of a study's trials (numbered by :func:`batch_start`), or a grid's cells as Hydra numbered them."""
    study = is_study(hydra_cfg)
    return (batch_start(hydra_cfg, initial_job_idx, n) if study else initial_job_idx), study


def trial_value(cfg: DictConfig, result: Mapping[str, Any] | None) -> float | None:
    """What a trial returns to the study: its objective (None for a failed cell: Optuna marks the trial failed)."""
    if result is None:
        return None
    value = result["metrics"].get(cfg.objective)
    return None if value is None else float(value)


def summarize(storage: str, name: str, before: set[int], max_failure_rate: float) -> dict[str, Any]:
    """Every trial of the study (state, params, value, cell folder), the best one, and whether the trials this run
    added (the ones not in ``before``) failed more often than ``max_failure_rate`` allows."""
    import optuna

    study = optuna.load_study(study_name=name, storage=storage)
    trials = [{"number": t.number, "state": t.state.name, "params": t.params, "value": t.value, "cell": str(t.number)}
              for t in study.get_trials(deepcopy=False)]
    complete = [t for t in trials if t["state"] == "COMPLETE"]
    best = study.best_trial.number if complete else None
    added = [t for t in trials if t["number"] not in before]
    failed = [t["number"] for t in added if t["state"] != "COMPLETE"]
    return {"study": name, "storage": storage, "direction": study.direction.name.lower(), "trials": trials,
            "best": next((t for t in trials if t["number"] == best), None), "failed_this_run": failed,
            "too_many_failures": best is None or bool(added) and len(failed) / len(added) > max_failure_rate}


def write_summary(sweep_dir: Path, summary: Mapping[str, Any]) -> Path:
    atomic_write_json(sweep_dir / SUMMARY, dict(summary))
    return sweep_dir / SUMMARY


def read_summary(sweep_dir: Path) -> dict[str, Any]:
    """A study's ``study.json`` ({} when the study wrote none: it stopped before it ended)."""
    path = sweep_dir / SUMMARY
    return read_json(path) if path.exists() else {}

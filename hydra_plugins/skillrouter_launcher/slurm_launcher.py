"""The SLURM grid launcher (``hydra/launcher=slurm``; ``slurm_dev`` for the repository's cluster).

Every cell's config is composed and frozen at launch (YAML edited while jobs wait in the queue changes
nothing), the grid planned, and then, by ``dispatch``:

* ``stage`` (the default): each unique stage to build is submitted once, with the resources of its
  class (``resources.gpu|cpu|llm``, per kind ``resources.kinds.<kind>``) and ``afterok`` on the jobs
  building its inputs, siblings as job arrays (:mod:`skillrouter.pipeline.execute.slurm`); the cells
  are scored by small CPU array jobs, one per set of stage jobs the cells wait for, each as soon as
  those end (``afterany``: a cell whose stage failed is scored as failed, naming the stage). Cached
  stages submit nothing;
* ``cell``: one job per cell, each building its own graph (stages shared with other cells are built
  once, under a lock, while the others wait) — how grids ran before, kept for comparison.

A submission the scheduler refuses ends the grid with one line naming the stage (or cell), SLURM's
reason and the override that fixes it; what was submitted is cancelled. A cell whose job died outside
it (over its ``--mem``, its node lost) is recorded as failed with SLURM's reason; the grid goes on.
The launcher submits and waits: SLURM's dependencies, arrays and requeue do the scheduling.
"""
from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, run_job, setup_globals
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import DictConfig, open_dict, read_write

log = logging.getLogger(__name__)
DISPATCH = ("stage", "cell")


def _sinfo(fmt: str) -> list[str]:
    try:
        out = subprocess.run(["sinfo", "-h", "-o", fmt], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({v.strip().rstrip("*") for v in out.split() if v.strip()})


def refusal_fix(reason: str, resource: str) -> str:
    """The override that answers sbatch's reason for a job of ``resource`` class, with this cluster's
    values where sinfo knows them."""
    key = f"hydra.launcher.resources.{resource}"
    if "generic resource" in reason or "gres" in reason.lower() or "node configuration is not available" in reason:
        gpus = max((int(m.group(1)) for g in _sinfo("%G") for m in [re.search(r"gpu(?::[^:(]+)?:(\d+)", g)] if m), default=0)
        return (f"{key}.gpus={gpus} (or fewer)" if gpus else f"this cluster has no GPUs: {key}.gpus=null") + \
            " (and see sinfo for CPUs and memory)"
    if "More processors requested" in reason:
        cpus = max((int(c) for c in _sinfo("%c") if c.isdigit()), default=1)
        return f"a node here has {cpus} CPUs: {key}.cpus={cpus} (or fewer)"
    if "Memory specification" in reason:
        mem = max((int(m) for m in _sinfo("%m") if m.isdigit()), default=0)
        return f"a node here has {mem // 1024} GB: {key}.mem_gb={max(1, mem // 1024 - 1)} (or null)"
    if "partition" in reason.lower():
        return f"{key}.partition=<one of: {', '.join(_sinfo('%P')) or 'see sinfo'}>"
    return f"check {key}.* against `sinfo` (on this repository's cluster: hydra/launcher=slurm_dev)"


def refusal_line(what: str, stderr: str, resource: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if "error" in ln.lower()]
    reason = lines[-1] if lines else stderr.strip().splitlines()[-1] if stderr.strip() else "sbatch failed"
    reason = re.sub(r"^sbatch: error: (Batch job submission failed: )?", "", reason)
    return f"skillrouter: SLURM refused {what}: {reason}; fix: {refusal_fix(stderr, resource)}"


def lost_job_reason(job: Any) -> str:
    """SLURM's account of a job that died outside its cell: its state and slurmstepd's own words
    (a memory or time limit) when it left any, else the last error line of the job's output."""
    from skillrouter.pipeline.execute.slurm_jobs import memory_fix, stepd_reason

    said = stepd_reason(str(job.paths.stderr))
    fix = memory_fix(str(job.paths.stderr), "hydra.launcher.mem_gb")
    if not said:
        try:
            said = next((ln.strip() for ln in reversed((job.stderr() or "").splitlines()) if "error" in ln.lower()), None)
        except OSError:
            said = None
    return f"SLURM job {job.job_id} {job.state}" + (f": {said}" if said else "") + (f"; {fix}" if fix else "")


def cell_resource(graph: Any) -> str:
    """The class of a whole cell's job (cell-level dispatch): the most demanding of its stages."""
    classes = {s.resource for s in graph.stages()} if graph else {"gpu"}
    return next((r for r in ("gpu", "agent", "llm") if r in classes), "cpu")


class SlurmGridLauncher(SlurmLauncher):
    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.frozen: dict[int, DictConfig] = {}
        self.grid_run: Any = None

    def __call__(self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str,
                 singleton_state: dict) -> JobReturn:
        """A cell's job (cell dispatch): its frozen config through Hydra's ``run_job``, as a cell of this grid."""
        from skillrouter.pipeline.execute.slurm_jobs import leave_quickly

        Singleton.set_state(singleton_state)
        setup_globals()
        try:
            return self._run_cell(job_num)
        finally:
            leave_quickly()

    def score_cells(self, job_nums: list[int], singleton_state: dict) -> list[JobReturn]:
        """A task of the scoring array (stage dispatch): a few cells, one after the other (one process start)."""
        from skillrouter.pipeline.execute.slurm_jobs import leave_quickly

        Singleton.set_state(singleton_state)
        setup_globals()
        try:
            return [self._run_cell(num) for num in job_nums]
        finally:
            leave_quickly()

    def _run_cell(self, job_num: int) -> JobReturn:
        import submitit

        from skillrouter.pipeline.cell import grid_run

        sweep_config = self.frozen[job_num].copy()
        with read_write(sweep_config.hydra.job), open_dict(sweep_config.hydra.job):
            sweep_config.hydra.job.id = submitit.JobEnvironment().job_id
            sweep_config.hydra.job.num = job_num
        with grid_run(self.grid_run):
            return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                           job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from skillrouter.pipeline.cell import GridRun
        from skillrouter.pipeline.grid import end_grid, launch_grid
        from skillrouter.tuning.study import trial_batch

        assert self.config is not None and self.hydra_context is not None
        first, study = trial_batch(self.config.hydra, initial_job_idx, len(job_overrides))
        grid = launch_grid(self.config, self.hydra_context, job_overrides, first, self.describe, study=study)
        if grid is None:
            return []
        sweep_dir = grid.sweep_dir
        self.frozen = dict(grid.configs.items())  # every cell's full config, frozen now: the jobs carry them
        dispatch = str(next(iter(grid.views.values())).dispatch)
        if dispatch not in DISPATCH:
            raise ValueError(f"dispatch must be one of {DISPATCH}, got {dispatch!r}")
        server = grid.llm_server()
        if server:
            server.start()
        try:
            if dispatch == "cell":
                self.grid_run = GridRun(str(sweep_dir), "cell", grid.graphs)
                results = self._cells_as_jobs(grid, sweep_dir)
            else:
                results = self._stages_as_jobs(grid, sweep_dir, server)
        finally:
            if server:
                server.stop()
        end_grid(grid, study_batch=study)
        return results

    def describe(self, grid: Any) -> dict[str, Any]:
        """What the grid will submit (the plan says it before anything is): jobs, job arrays, submissions, the
        cells' scoring arrays, and the limits they respect."""
        from skillrouter.pipeline.execute.slurm import plan_units, same_resources, scoring_groups, submission_waves

        view: Any = next(iter(grid.views.values()))
        limits = {"max_queued": self.params.get("max_queued"), "array_parallelism": self.params.get("array_parallelism")}
        if str(view.dispatch) == "cell":
            classes = {cell_resource(grid.graphs.get(i)) for i in grid.views}
            return {"dispatch": "cell", "jobs": len(grid.views), "arrays": len(classes), **limits}
        units = plan_units(grid.plan, same_resources(self._classes()))
        waves = submission_waves(units, self._classes(), self.params.get("max_queued"))
        unit_of = {s.key: str(i) for i, u in enumerate(units) for s in u.stages}
        size = max(1, int(self.params.get("score_cells_per_job") or 1))
        scoring = scoring_groups(grid.views, grid.graphs, unit_of)
        return {"dispatch": "stage", "jobs": len(units), "submissions": sum(len(w) for w in waves),
                "arrays": sum(1 for w in waves for members in w if len(members) > 1), "waves": len(waves),
                "scoring_arrays": len(scoring), "scoring_tasks": sum(-(-len(c) // size) for c in scoring.values()), **limits}

    # -- submission ----------------------------------------------------------------------------------
    def _base(self) -> dict[str, Any]:
        params = dict(self.params)
        params.pop("resources", None)
        return params

    def _classes(self) -> dict[str, Any]:
        return self.params.get("resources") or {}

    def _refused(self, what: str, exc: Exception, resource: str, submitted: list[Any]) -> None:
        for job in submitted:
            job.cancel(check=False)
        print(refusal_line(what, str(exc), resource), file=sys.stderr)
        sys.exit(2)

    def _cell_params(self, idx: int) -> tuple:
        return ([*self.frozen[idx].hydra.overrides.task], "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state())

    def _cells_as_jobs(self, grid: Any, sweep_dir: Path) -> list[JobReturn]:
        """Cell dispatch: a job per cell, one array per resource class of the cells' most demanding stage;
        on a refusal everything submitted is cancelled."""
        import submitit

        from skillrouter.pipeline.execute.slurm import CELL_KIND, make_executor
        from skillrouter.pipeline.status import split_shared

        groups: dict[str, list[int]] = {"gpu": [], "agent": [], "llm": [], "cpu": []}
        for idx in grid.configs:
            groups[cell_resource(grid.graphs.get(idx))].append(idx)
        params = self._base()
        jobs: dict[int, Any] = {}
        for resource, cells in ((r, c) for r, c in groups.items() if c):
            for idx in cells:
                log.info("\t#%d : %s  [%s]", idx, " ".join(filter_overrides(list(self.frozen[idx].hydra.overrides.task))),
                         resource)
            executor = make_executor(params["submitit_folder"], params, self._classes(), CELL_KIND, resource)
            try:
                for idx, job in zip(cells, executor.map_array(self, *zip(*(self._cell_params(i) for i in cells)))):
                    jobs[idx] = job
            except submitit.core.utils.FailedJobError as exc:
                _, labels = split_shared([filter_overrides(list(self.frozen[i].hydra.overrides.task)) for i in grid.configs])
                order = list(grid.configs)
                what = ", ".join(f"cell #{i} ({labels[order.index(i)]})" for i in cells)
                self._refused(what, exc, resource, list(jobs.values()))
        return self._results(jobs, sweep_dir)

    def _stages_as_jobs(self, grid: Any, sweep_dir: Path, server: Any) -> list[JobReturn]:
        import submitit

        from skillrouter.pipeline.cell import GridRun
        from skillrouter.pipeline.execute.slurm import (SCORE_KIND, SlurmStageDispatch, StageJob, make_executor,
                                                        plan_units, reconcile, same_resources, scoring_groups, wait_all)
        from skillrouter.events import observers_of
        from skillrouter.pipeline.journal import StageJournal

        cfg: Any = next(iter(grid.configs.values()))
        params = self._base()
        job = StageJob(str(grid.cache.root), str(sweep_dir), bool(cfg.progress), grid.cache.stale_after,
                       grid.cache.verify_after_days, observers_of(cfg, sweep_dir.name))
        dispatcher = SlurmStageDispatch(params["submitit_folder"], params, self._classes(), job, params.get("max_queued"))
        units = plan_units(grid.plan, same_resources(self._classes()))
        try:
            submitted = dispatcher.submit(units)
        except submitit.core.utils.FailedJobError as exc:
            refused = exc.units  # type: ignore[attr-defined]
            cells = sorted({c for u in refused for p in grid.plan.stages if p.stage.key == u.primary.key for c in p.cells})
            what = f"stage {refused[0].primary.label} (cells {', '.join(f'#{c}' for c in cells)})"
            self._refused(what, exc, refused[0].primary.resource, exc.submitted)  # type: ignore[attr-defined]
        stage_jobs = list(submitted.jobs.values())
        journal = StageJournal(sweep_dir)
        for i, unit in enumerate(units):
            for stage in unit.stages:
                journal.note(stage, job_id=str(submitted.jobs[i].job_id))
        self.grid_run = GridRun(str(sweep_dir), "stage", grid.graphs, grid.plan.built_for(), submitted.job_ids(),
                                submitted.job_logs())
        size = max(1, int(self.params.get("score_cells_per_job") or 1))
        chunks, scoring = [], []
        for deps, cells in scoring_groups(grid.configs, grid.graphs, submitted.job_ids()).items():
            dependency = "afterany:" + ":".join(deps) if deps else None
            group = [cells[i:i + size] for i in range(0, len(cells), size)]
            executor = make_executor(params["submitit_folder"], params, self._classes(), SCORE_KIND, "cpu", dependency)
            try:
                scoring += executor.map_array(self.score_cells, group, [Singleton.get_state()] * len(group))
            except submitit.core.utils.FailedJobError as exc:
                self._refused("the cells' scoring job", exc, "cpu", stage_jobs + scoring)
            chunks += group
        if server:
            wait_all([submitted.jobs[i] for i, u in enumerate(units) if any(st.llm_server for st in u.stages)])
            server.stop()  # after the last generation stage, not when the grid ends
        wait_all(scoring)
        results = [r for chunk, job in zip(chunks, scoring) for r in self._chunk_results(chunk, job, sweep_dir)]
        wait_all(stage_jobs)
        reconcile(submitted, journal)
        return results

    def _results(self, jobs: dict[int, Any], sweep_dir: Path) -> list[JobReturn]:
        from skillrouter.pipeline.execute.slurm import wait_all

        wait_all(list(jobs.values()))
        return [self._result(i, jobs[i], sweep_dir) for i in sorted(jobs)]

    def _result(self, idx: int, job: Any, sweep_dir: Path) -> JobReturn:
        """The cell's own return, or, when the job died outside it, a failed cell on disk."""
        try:
            return job.results()[0]
        except Exception:  # noqa: BLE001 - any way a job can die; the cell's own errors never reach here
            return self._lost(idx, job, sweep_dir)

    def _chunk_results(self, cells: list[int], job: Any, sweep_dir: Path) -> list[JobReturn]:
        """The returns of a scoring task's cells, or for each a failed cell when the task died."""
        try:
            return job.results()[0]
        except Exception:  # noqa: BLE001 - as in _result
            return [self._lost(idx, job, sweep_dir) for idx in cells]

    def _lost(self, idx: int, job: Any, sweep_dir: Path) -> JobReturn:
        from skillrouter.data.jsonl import atomic_write_json
        from skillrouter.pipeline.entry import cell_choices

        cfg = self.frozen[idx]
        run_dir = sweep_dir / str(idx)
        run_dir.mkdir(parents=True, exist_ok=True)
        if not (run_dir / "metrics.json").exists():  # else the cell ended and its task died after it
            failed = {"choices": cell_choices(cfg, cfg.hydra.runtime.choices), "status": "failed",
                      "error": lost_job_reason(job), "ended": time.time()}
            for name in ("metrics.json", "status.json"):
                atomic_write_json(run_dir / name, failed)
            log.error("cell #%d lost: %s", idx, failed["error"])
        return JobReturn(overrides=list(cfg.hydra.overrides.task), cfg=cfg, working_dir=str(run_dir),
                         status=JobStatus.COMPLETED, _return_value=None)

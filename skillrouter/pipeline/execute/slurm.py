"""Stage-level SLURM dispatch: each stage to build is one submitit job (or one task of a job array) with
the resources of its class, and ``--dependency=afterok`` on the jobs that build its inputs. SLURM does
the scheduling; this module only turns the plan into submissions.

* A *unit* is what one job builds: a non-cheap stage, plus the cheap GPU stages that follow it (a
  dense retrieval right after the pool embedding it reads), plus the stage after it when that stage is
  the only one waiting for it, of the same class and resources (a pool embedding with the encoder just
  trained; pair scores with the reranker just trained): no parallelism is lost, a job start is saved
  (Snakemake's group jobs). Cheap CPU stages (a parsed dataset, a reorder by pair scores already
  computed) run inside whichever job reads them first; the cells' scoring and run directories are written
  by small CPU array jobs, one per set of stage jobs the cells wait for (:func:`scoring_groups`;
  ``afterany``: a cell whose stage failed is scored as failed, naming it).
* Sibling units — same stage kind, same resources, same dependency jobs — go out as one job array.
* Every job is submitted with ``--kill-on-invalid-dep=yes``: when a stage fails, SLURM cancels what
  depends on it, so nothing stays pending on a dependency that can never be met.
* Jobs requeue on timeout or preemption (``max_num_timeout``) and resume through the cache and their
  training checkpoints.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from ... import events
from ...cache.store import StageCache
from ...models import respect_cpu_allocation
from ...progress import quiet_library_bars
from ...stages.graph import Stage
from ..journal import TERMINAL, StageJournal
from ..plan import GridPlan
from .build import Builder
from .slurm_jobs import job_state, leave_quickly, memory_fix

log = logging.getLogger(__name__)
RESOURCE_KEYS = ("gpus", "cpus", "mem_gb", "timeout_min", "partition", "nodes", "tasks_per_node")
SCORE_KIND, CELL_KIND = "score", "cell"  # the job kinds of a cell: its scoring (stage dispatch), its whole graph (cell)
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


@dataclass
class Unit:
    """The stages one job builds, primary first; ``deps``: the units building their inputs."""

    stages: list[Stage]
    deps: list[int] = field(default_factory=list)

    @property
    def primary(self) -> Stage:
        return self.stages[0]

    @property
    def label(self) -> str:
        return " + ".join(s.label for s in self.stages)


def plan_units(plan: GridPlan, same_job: Callable[[Stage, Stage], bool] = lambda a, b: a.resource == b.resource
               ) -> list[Unit]:
    """The plan's stages to build, grouped into units (see the module docstring), inputs first.
    ``same_job(a, b)``: whether stages ``a`` and ``b`` may share a job (the same resources)."""
    todo = {p.stage.key: p.stage for p in plan.to_build()}
    units: list[Unit] = []
    unit_of: dict[str, int] = {}
    for stage in todo.values():  # inputs first, so a unit's dependencies exist before it does
        if stage.cheap and stage.resource == "cpu":
            continue  # runs inside the job that first reads it
        host = _host(stage, todo, unit_of, units) if stage.cheap else None
        if host is None:
            host = len(units)
            units.append(Unit([]))
        units[host].stages.append(stage)
        units[host].deps = sorted((set(units[host].deps) | _producers(stage, todo, unit_of)) - {host})
        unit_of[stage.key] = host
    return _fuse(units, same_job)


def _fuse(units: list[Unit], same_job: Callable[[Stage, Stage], bool]) -> list[Unit]:
    """Merge each unit into the one it waits for, when no other unit waits for that one and every other
    input it needs is built before it (see the module docstring)."""
    into = list(range(len(units)))

    def root(i: int) -> int:
        while into[i] != i:
            i = into[i]
        return i

    for i, unit in enumerate(units):  # inputs first: a unit's producers are settled before it is
        deps = {root(d) for d in unit.deps}
        for p in sorted(deps, reverse=True):
            waiting = [j for j, u in enumerate(units) if root(j) not in (p, i) and p in {root(d) for d in u.deps}]
            if waiting or not same_job(units[p].primary, unit.primary) or not deps - {p} <= _ancestors(p, units, root):
                continue
            units[p].stages += unit.stages  # its other inputs are p's ancestors already: p's deps stand
            into[i] = p
            break
    kept = [i for i in range(len(units)) if root(i) == i]
    index = {old: new for new, old in enumerate(kept)}
    return [Unit(units[i].stages, sorted({index[root(d)] for d in units[i].deps} - {index[i]})) for i in kept]


def _producers(stage: Stage, todo: Mapping[str, Stage], unit_of: Mapping[str, int]) -> set[int]:
    """The units building what ``stage`` reads, looking through the cheap CPU stages it builds itself."""
    out: set[int] = set()
    for up in stage.upstream():
        if up.key not in todo:
            continue
        if up.key in unit_of:
            out.add(unit_of[up.key])
        else:
            out |= _producers(up, todo, unit_of)
    return out


def _host(stage: Stage, todo: Mapping[str, Stage], unit_of: Mapping[str, int], units: list[Unit]) -> int | None:
    """The unit a cheap GPU stage can follow: one building an input of the same resource class, whose
    job has every other input of the stage by then (built before it, or in it)."""
    producers = _producers(stage, todo, unit_of)
    for i in sorted(producers, reverse=True):
        if units[i].primary.resource != stage.resource:
            continue
        before = _ancestors(i, units)
        if producers - {i} <= before:
            return i
    return None


def _ancestors(i: int, units: list[Unit], root: Callable[[int], int] = lambda j: j) -> set[int]:
    seen: set[int] = set()
    stack = [root(d) for d in units[i].deps]
    while stack:
        j = stack.pop()
        if j not in seen:
            seen.add(j)
            stack.extend(root(d) for d in units[j].deps)
    return seen


def resources_for(stage_kind: str, resource: str, classes: Mapping[str, Any]) -> dict[str, Any]:
    """A job's resources: its class (``resources.gpu|cpu|llm``), then the stage kind's own overrides
    (``resources.kinds.<kind>``)."""
    merged = {k: (classes.get(resource) or {}).get(k) for k in RESOURCE_KEYS}
    merged.update({k: v for k, v in ((classes.get("kinds") or {}).get(stage_kind) or {}).items() if k in RESOURCE_KEYS})
    return merged


def same_resources(classes: Mapping[str, Any]) -> Callable[[Stage, Stage], bool]:
    """Whether two stages' jobs would ask for the same resources (so one job may build both)."""
    return lambda a, b: resources_for(a.kind, a.resource, classes) == resources_for(b.kind, b.resource, classes)


def submitit_parameters(base: Mapping[str, Any], res: Mapping[str, Any], name: str, dependency: str | None
                        ) -> dict[str, Any]:
    """``update_parameters`` keywords for one job: the launcher's settings, overridden by the job's
    resources; every job is killed by SLURM when a dependency can never be met."""
    extra = {**(base.get("additional_parameters") or {}), "kill-on-invalid-dep": "yes"}
    params: dict[str, Any] = {
        "name": name, "timeout_min": res.get("timeout_min") or base.get("timeout_min"),
        "cpus_per_task": res.get("cpus") or base.get("cpus_per_task"), "gpus_per_node": res.get("gpus"),
        "mem_gb": res.get("mem_gb") if res.get("mem_gb") is not None else base.get("mem_gb"),
        "tasks_per_node": res.get("tasks_per_node") or base.get("tasks_per_node", 1),
        "nodes": res.get("nodes") or base.get("nodes", 1),
        "stderr_to_stdout": base.get("stderr_to_stdout", False),
        "slurm_partition": res.get("partition") or base.get("partition"),
        "slurm_additional_parameters": extra, "slurm_array_parallelism": base.get("array_parallelism", 256),
        "slurm_signal_delay_s": base.get("signal_delay_s", 120),
    }
    for key in ("qos", "account", "constraint", "exclude", "comment", "setup"):
        if base.get(key):
            params[f"slurm_{key}"] = base[key]
    if dependency:
        params["slurm_dependency"] = dependency
    return params


def make_executor(folder: str, params: Mapping[str, Any], classes: Mapping[str, Any], kind: str, resource: str,
                  dependency: str | None = None, name: str | None = None):
    """A submitit executor for one job (or array) of ``kind`` with the resources of its class."""
    import submitit

    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=params.get("max_num_timeout", 0))
    executor.update_parameters(**submitit_parameters(params, resources_for(kind, resource, classes), name or f"sr-{kind}",
                                                     dependency))
    return executor


@dataclass
class StageJob:
    """What a stage job runs: its unit's stages, each after its cheap missing inputs, journaled."""

    cache_dir: str
    sweep_dir: str
    progress: bool = True
    stale_after: float = 300.0
    verify_after_days: float | None = 7.0
    observers: Sequence[events.Observer] = ()

    def __call__(self, unit: Unit) -> dict[str, str]:
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stdout, force=True)
        respect_cpu_allocation()
        quiet_library_bars()
        try:
            if int(os.environ.get("SLURM_NTASKS", "1")) > 1:  # nodes / tasks_per_node: every task is a training rank
                from ...train import data_parallel  # torch: only in a job that trains

                folder = data_parallel.handoff_folder(self.sweep_dir)
                if data_parallel.JobTasks.from_slurm().index > 0:
                    data_parallel.follow(folder)
                    return {}
                with data_parallel.leading(folder):
                    return self._build(unit)
            return self._build(unit)
        finally:
            leave_quickly()

    def _build(self, unit: Unit) -> dict[str, str]:
        job_id = os.environ.get("SLURM_ARRAY_JOB_ID", "") and f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
        builder = Builder(StageCache(self.cache_dir, self.stale_after, self.verify_after_days), StageJournal(self.sweep_dir),
                          self.progress, user=self.sweep_dir, job_id=job_id or os.environ.get("SLURM_JOB_ID"),
                          observers=self.observers)
        done: set[str] = set()
        for n, stage in enumerate(unit.stages):
            try:
                builder.ensure_inputs(stage, done)
            except Exception as exc:
                for left in unit.stages[n:]:
                    builder.journal.write(left, "cancelled", job_id=builder.job_id, error=f"an input failed: {exc}")
                raise
            builder.build(stage)
            done.add(stage.key)
        return {s.key: "built" for s in unit.stages}

    def checkpoint(self, unit: Unit) -> Any:
        """Requeued on timeout or preemption: the same unit again (training resumes from its checkpoint)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, unit)


@dataclass
class Submitted:
    units: list[Unit]
    jobs: dict[int, Any]  # unit index -> submitit job

    def job_ids(self) -> dict[str, str]:
        """Per stage key, the id of the job building it."""
        return {s.key: str(self.jobs[i].job_id) for i, u in enumerate(self.units) for s in u.stages}

    def job_logs(self) -> dict[str, str]:
        """Per stage key, the stderr file of the job building it."""
        return {s.key: str(self.jobs[i].paths.stderr) for i, u in enumerate(self.units) for s in u.stages}


def submission_waves(units: list[Unit], classes: Mapping[str, Any], max_queued: int | None = None) -> list[list[list[int]]]:
    """How the units go out: in waves (a unit once every unit it depends on has gone), each wave a list of
    submissions — sibling units (same kind, resources and dependencies) as one job array, cut into arrays of at most
    ``max_queued`` jobs."""
    done: set[int] = set()
    waves = []
    waiting = list(range(len(units)))
    while waiting:
        ready = [i for i in waiting if all(d in done for d in units[i].deps)]
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i in ready:
            u = units[i]
            res = resources_for(u.primary.kind, u.primary.resource, classes)
            groups[(u.primary.kind, u.primary.resource, tuple(sorted(res.items(), key=str)), tuple(sorted(u.deps)))].append(i)
        size = max_queued or max(len(g) for g in groups.values())
        waves.append([members[j:j + size] for members in groups.values() for j in range(0, len(members), size)])
        done |= set(ready)
        waiting = [i for i in waiting if i not in done]
    return waves


def queued(job_ids: Sequence[str]) -> int:
    """How many of these jobs (array tasks counted one by one) SLURM still holds pending or running."""
    if not job_ids:
        return 0
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(job_ids)], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return len(out.split())


class SlurmStageDispatch:
    """Submits a plan's units in waves (:func:`submission_waves`); with ``max_queued``, a submission waits until the
    grid's jobs still in the queue leave room for it (a cluster's cap on queued jobs per user)."""

    def __init__(self, folder: str, params: Mapping[str, Any], classes: Mapping[str, Any], job: StageJob,
                 max_queued: int | None = None, poll_s: float = 5.0):
        self.folder, self.params, self.classes, self.job = folder, params, classes, job
        self.max_queued, self.poll_s = max_queued, poll_s

    def _room_for(self, n: int, jobs: Mapping[int, Any]) -> None:
        if not self.max_queued:
            return
        ids = [str(j.job_id).split("_")[0] for j in jobs.values()]
        while queued(sorted(set(ids))) + n > self.max_queued:
            time.sleep(self.poll_s)

    def submit(self, units: list[Unit]) -> Submitted:
        """Submit every unit; a refused submission raises submitit's ``FailedJobError`` with the units
        of that submission in ``exc.units`` (those already submitted are in ``exc.submitted``)."""
        import submitit

        jobs: dict[int, Any] = {}
        for wave in submission_waves(units, self.classes, self.max_queued):
            for members in wave:
                u = units[members[0]]
                deps = sorted(str(jobs[d].job_id) for d in u.deps)
                executor = make_executor(self.folder, self.params, self.classes, u.primary.kind, u.primary.resource,
                                         "afterok:" + ":".join(deps) if deps else None)
                self._room_for(len(members), jobs)
                try:
                    submitted = (executor.map_array(self.job, [units[i] for i in members]) if len(members) > 1
                                 else [executor.submit(self.job, units[members[0]])])
                except submitit.core.utils.FailedJobError as exc:
                    exc.units, exc.submitted = [units[i] for i in members], list(jobs.values())  # type: ignore[attr-defined]
                    raise
                for i, job in zip(members, submitted):
                    jobs[i] = job
                    log.info("submitted %s as SLURM job %s (%s)", units[i].label, job.job_id, u.primary.resource)
        return Submitted(units, jobs)


def scoring_groups(cells: Iterable[int], graphs: Mapping[int, Any], job_ids: Mapping[str, str]) -> dict[tuple[str, ...], list[int]]:
    """The cells grouped by the stage jobs they wait for (``job_ids``: stage key -> job id), each group
    scored by its own array as soon as its jobs end: in a ``loss x topk`` grid the cells of one reranker
    do not wait for the other's training. A cell without a graph (it failed to compose) waits for none."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for idx in cells:
        graph = graphs.get(idx)
        deps = {job_ids[s.key] for s in graph.stages() if s.key in job_ids} if graph else set()
        groups.setdefault(tuple(sorted(deps)), []).append(idx)
    return groups


def reconcile(submitted: Submitted, journal: StageJournal) -> None:
    """Journal the stages whose jobs ended without saying so themselves (cancelled by SLURM when an
    input failed, killed over a limit), with SLURM's account of the job."""
    for i, unit in enumerate(submitted.units):
        job = submitted.jobs[i]
        for stage in unit.stages:
            rec = journal.read(stage) or {}
            if rec.get("state") not in TERMINAL:
                state = job_state(str(job.job_id))
                fix = memory_fix(str(job.paths.stderr), f"++hydra.launcher.resources.kinds.{stage.kind}.mem_gb")
                journal.write(stage, "cancelled" if state.startswith("CANCELLED") else "failed", job_id=str(job.job_id),
                              error=f"SLURM job {job.job_id}: {state}" + (f"; {fix}" if fix else ""))


def wait_all(jobs: Sequence[Any], poll_s: float = 1.0, force_every_s: float = 10.0) -> None:
    """Block until every job has ended, whatever its outcome. A job's result file is looked for every
    ``poll_s``; SLURM is asked every ``force_every_s`` (submitit alone asks at most every few minutes,
    late for a job SLURM cancelled before it ran, which leaves no result file)."""
    pending = list(jobs)
    last_force = time.monotonic()
    while pending:
        force = time.monotonic() - last_force >= force_every_s
        if force:
            last_force = time.monotonic()
        pending = [job for job in pending if not job.done(force_check=force)]
        if pending:
            time.sleep(poll_s)

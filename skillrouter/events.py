"""What happened, told as plain data to whoever watches: the pipeline publishes (a stage started, stepped, ended; a
cell scored; a grid ended), the tuning layer too (a study ended), and a stage's own code reports while it is built
(a training step, a summary, a table). Observers subscribe through the config (``tracking.observer``: a Hydra
``_target_``, see ``conf/tracking/``), so no publisher imports one and an observer imports none of the rooms it
watches: ``tracking/`` gets W&B runs out of these events alone.

An observer never costs the work it watches: an error it raises is one warning line. Observers travel with the
work (a SLURM stage job pickles its observers), so they must pickle.

A stage's code reports with :func:`log_step`, :func:`log_summary` and :func:`log_table`; the builder opens the
stage's scope (:func:`building`) around its build, and outside one these calls do nothing. A data-parallel training
reports from its rank-0 process through a queue the parent drains (:class:`QueueObserver`, :func:`drain`)."""
from __future__ import annotations

import contextlib
import contextvars
import logging
import queue as queue_module
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping, Protocol, Sequence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageRef:
    """A stage as watchers name it: its kind (the cache folder) and key."""

    kind: str
    key: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.key[:8]}"


@dataclass(frozen=True)
class StageStarted:
    """A stage is really being built (a stage found in the cache starts nothing). ``folder``: the run or sweep
    folder that asked for it, where a watcher may write its own records of the stage."""

    stage: StageRef
    params: Mapping[str, Any]
    inputs: Mapping[str, StageRef]
    folder: str


@dataclass(frozen=True)
class StageStep:
    """One optimisation step's figures (``step`` counts from 1 and continues across a resume)."""

    stage: StageRef
    values: Mapping[str, Any]
    step: int | None = None


@dataclass(frozen=True)
class StageSummary:
    stage: StageRef
    values: Mapping[str, Any]


@dataclass(frozen=True)
class StageTable:
    stage: StageRef
    name: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]


@dataclass(frozen=True)
class StageEnded:
    """A started stage ended: published into ``entry`` (its cache folder under ``cache_root``), or failed."""

    stage: StageRef
    cache_root: str
    entry: str | None = None
    failed: bool = False


@dataclass(frozen=True)
class CellStarted:
    run_dir: str
    group: str  # the sweep's name ("single" for one run)
    choices: Mapping[str, str]
    config: Mapping[str, Any]  # resolved


@dataclass(frozen=True)
class CellScored:
    """A cell's ``metrics.json`` payload and what a watcher shows beside it: per-query metrics, the queries
    (``data.types.Query``), their rankings (``rankings.Ranking``), the texts each stage saw, the stages it read."""

    run_dir: str
    cache_root: str
    result: Mapping[str, Any]
    rows: Mapping[str, Mapping[str, float]]
    queries: Sequence[Any]
    rankings: Sequence[Any]
    examples: Mapping[str, Any] = field(default_factory=dict)
    stages: Mapping[str, StageRef] = field(default_factory=dict)


@dataclass(frozen=True)
class CellEnded:
    run_dir: str
    failed: bool = False


@dataclass(frozen=True)
class GridEnded:
    """A grid's cells ended (failed ones too). ``cells``: one status row per cell (choices, status, headline
    metrics, stages, error); ``plan``: the plan's totals; ``study_batch``: a batch of an Optuna study's trials
    (the study as a whole ends with :class:`StudyEnded`)."""

    sweep_dir: str
    group: str
    cells: Sequence[Mapping[str, Any]]
    plan: Mapping[str, Any] = field(default_factory=dict)
    study_batch: bool = False


@dataclass(frozen=True)
class StudyEnded:
    """An Optuna study ended: its grid (as :class:`GridEnded`) and ``summary``: its trials, the best one and that
    trial's test score (``study.json``)."""

    grid: GridEnded
    summary: Mapping[str, Any]


class Observer(Protocol):
    def notify(self, event: Any) -> None: ...


def publish(observers: Sequence[Observer], event: Any) -> None:
    """Tell every observer; an observer's error is one warning line, never the caller's failure."""
    for observer in observers:
        try:
            observer.notify(event)
        except Exception as exc:  # noqa: BLE001 - watching is never worth the work it watches
            log.warning("observer %s failed on %s (%s: %s); going on", type(observer).__name__, type(event).__name__,
                        type(exc).__name__, str(exc)[:200])


def observers_of(cfg: Any, group: str) -> list[Observer]:
    """The observers a config names (``tracking.observer``, a Hydra ``_target_`` given the sweep's ``group``)."""
    spec = (cfg.get("tracking") or {}).get("observer")
    if not spec:
        return []
    from hydra.utils import instantiate

    return [instantiate(spec, group=group)]


_scope: contextvars.ContextVar[tuple[Sequence[Observer], StageRef] | None] = contextvars.ContextVar("stage", default=None)


@contextlib.contextmanager
def building(observers: Sequence[Observer], stage: StageRef) -> Iterator[None]:
    """Inside this block, what the stage's code reports goes to ``observers``."""
    token = _scope.set((observers, stage) if observers else None)
    try:
        yield
    finally:
        _scope.reset(token)


def _report(make: Any) -> None:
    scope = _scope.get()
    if scope is not None:
        observers, stage = scope
        publish(observers, make(stage))


def log_step(values: Mapping[str, Any], step: int) -> None:
    _report(lambda stage: StageStep(stage, dict(values), step))


def log_summary(values: Mapping[str, Any]) -> None:
    _report(lambda stage: StageSummary(stage, dict(values)))


def log_table(name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    _report(lambda stage: StageTable(stage, name, list(columns), [list(r) for r in rows]))


def reporting() -> bool:
    """Whether a stage's reports go anywhere here (a data-parallel parent forwards its ranks' only then)."""
    return _scope.get() is not None


@dataclass(frozen=True)
class QueueObserver:
    """An observer in another process: every event goes onto a multiprocessing queue, for :func:`drain`."""

    queue: Any

    def notify(self, event: Any) -> None:
        self.queue.put(event)


@contextlib.contextmanager
def forwarding(queue: Any) -> Iterator[None]:
    """In a child process: what the stage's code reports goes onto ``queue``."""
    with building([QueueObserver(queue)], StageRef("", "")):
        yield


def drain(queue: Any) -> None:
    """Publish the events waiting on ``queue`` (a child's reports) as this scope's stage's."""
    scope = _scope.get()
    while True:
        try:
            event = queue.get_nowait()
        except queue_module.Empty:
            return
        if scope is not None:
            publish(scope[0], replace(event, stage=scope[1]))

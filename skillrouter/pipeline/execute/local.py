"""The local executor: a graph's stages in topological order in this process (``hydra/launcher=local``,
a single run, and each job of cell-level dispatch).

``workers > 1`` runs independent stages side by side, GPU-class ones one at a time (one machine, one
accelerator). With ``processes`` each stage is built in a worker process on its share of the cores
(:mod:`.processes`), and where no GPU is visible the GPU-class ones run side by side too: trainings on CPU
cores. A failed stage cancels the stages that need it and nothing else; with ``fail_fast`` (a
single run) its error is raised as it was. A grid's LLM server is started before the first generation
stage that has to be built and stopped after the last."""
from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol

from ...cache.store import StageRecord
from ...models import gpu_visible
from ...stages.graph import Stage, needed_stages
from .build import Builder, StageFailed
from .processes import StageProcesses

log = logging.getLogger(__name__)


class _InPlace:
    """A pool of one that runs each stage in the calling thread (``workers=1``): a build sees its process
    as a single-threaded program does (signals, a debugger, the fault hook's SIGSTOP)."""

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller like a pool's future
            future.set_exception(exc)
        return future

    def __enter__(self) -> _InPlace:
        return self

    def __exit__(self, *exc: object) -> None: ...


class Server(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass
class Outcome:
    """What became of one stage: its record when it is in the cache, else the failure it met."""

    record: StageRecord | None = None
    failure: StageFailed | None = None


@dataclass
class LocalExecutor:
    builder: Builder
    workers: int = 1
    processes: bool = False
    fail_fast: bool = False
    server: Server | None = None
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def run(self, sinks: list[Stage]) -> dict[str, Outcome]:
        """Build what ``sinks`` need (:func:`needed_stages`) and return every outcome by key."""
        pending = needed_stages(sinks, self.builder.intact)
        llm_todo = {s.key for s in pending if s.llm_server and not self.builder.complete(s)}
        running: dict[Future, Stage] = {}
        workers = max(1, self.workers)
        one_gpu_stage = not (self.processes and not gpu_visible())
        try:
            with self._pool(workers) as pool:
                while pending or running:
                    unfinished = {s.key for s in pending} | {s.key for s in running.values()}
                    starting: list[Stage] = []
                    for stage in list(pending):
                        if len(running) + len(starting) >= workers:
                            break
                        busy = [*running.values(), *starting]
                        if any(u.key in unfinished for u in stage.upstream()) or (
                                one_gpu_stage and stage.resource == "gpu" and any(r.resource == "gpu" for r in busy)):
                            continue
                        pending.remove(stage)
                        failure = next((self.outcomes[u.key].failure for u in stage.upstream()
                                        if u.key in self.outcomes and self.outcomes[u.key].failure), None)
                        if failure:
                            self._cancel(stage, failure)
                            llm_todo.discard(stage.key)
                            continue
                        if stage.key in llm_todo and self.server:
                            self.server.start()
                        starting.append(stage)
                    side_by_side = len(running) + len(starting)
                    for stage in starting:
                        running[self._submit(pool, stage, side_by_side)] = stage
                    if not running:
                        continue
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        stage = running.pop(future)
                        self._settle(stage, future)
                        if stage.key in llm_todo:
                            llm_todo.discard(stage.key)
                            if not llm_todo and self.server:
                                self.server.stop()
        finally:
            if self.server:
                self.server.stop()
        return self.outcomes

    def _pool(self, workers: int) -> ThreadPoolExecutor | StageProcesses | _InPlace:
        if workers == 1:
            return _InPlace()
        return StageProcesses(workers) if self.processes else ThreadPoolExecutor(workers)

    def _submit(self, pool: ThreadPoolExecutor | StageProcesses | _InPlace, stage: Stage, sharing: int) -> Future:
        """``sharing``: how many stages run side by side from now on, whose cores worker processes split."""
        if isinstance(pool, StageProcesses):
            return pool.submit(self.builder.build, stage, sharing=sharing)
        return pool.submit(self.builder.build, stage)

    def _settle(self, stage: Stage, future: Future) -> None:
        try:
            record = future.result()
            self.builder.records.setdefault(stage.key, record)  # a worker process built it with its copy of the builder
            self.outcomes[stage.key] = Outcome(record=record)
        except BaseException as exc:  # noqa: BLE001 - any stage error fails its dependents, never the grid
            if self.fail_fast:
                raise
            log.error("stage %s failed: %s: %s", stage.label, type(exc).__name__, exc)
            self.outcomes[stage.key] = Outcome(failure=StageFailed(stage, f"{type(exc).__name__}: {exc}", exc))

    def _cancel(self, stage: Stage, cause: StageFailed) -> None:
        if self.builder.journal:
            self.builder.journal.write(stage, "cancelled", error=f"input {cause.stage.label} failed")
        self.outcomes[stage.key] = Outcome(failure=cause)

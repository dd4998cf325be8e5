"""Building one stage through the cache, wherever it runs: this process, a SLURM stage job or a cell's job.

A stage is built only when its inputs are complete; the cheap inputs that are not (a parsed dataset,
a merge of embedding shards) are built on the spot, first — that is how a cheap stage runs inside the
job of the stage it feeds. Every outcome goes to the grid's journal when there is one."""
from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Sequence

from ... import events
from ...cache.store import StageCache, StageRecord
from ...models import keep_freed_memory
from ...progress import stage_label
from ...stages.graph import BuildContext, Stage
from ..journal import StageJournal


class StageFailed(RuntimeError):
    """A stage (or one of its inputs) could not be built: names the stage the failure came from."""

    def __init__(self, stage: Stage, error: str, cause: BaseException | None = None):
        self.stage, self.error, self.cause = stage, error, cause
        super().__init__(f"stage {stage.label} failed: {error}")


class MissingInput(RuntimeError):
    """A non-cheap input is not in the cache: it was never built (its job died or was cancelled)."""

    def __init__(self, stage: Stage):
        self.stage = stage
        super().__init__(f"stage {stage.label} was not built")


@dataclass
class Builder:
    """Builds stages into ``cache``; ``user`` (a run directory) goes into the entries' users, ``job_id``
    into the journal. ``observers`` are told of each stage that is really built (:mod:`skillrouter.events`: it
    started, what its code reported, it ended published or failed); a reused stage tells them nothing."""

    cache: StageCache
    journal: StageJournal | None = None
    progress: bool = True
    user: str | None = None
    job_id: str | None = None
    observers: Sequence[events.Observer] = ()
    records: dict[str, StageRecord] = field(default_factory=dict)  # what this builder got or built, by key

    def complete(self, stage: Stage) -> bool:
        return self.cache.is_complete(stage.kind, stage.key)

    def intact(self, stage: Stage) -> bool:
        """In the cache and passing the reuse check (sizes always, hashes when due); a damaged entry is
        quarantined here (and journaled, for the cells that use it), so what it needs to be rebuilt is needed
        again."""
        if not self.complete(stage):
            return False
        if self.cache.check(stage.kind, stage.key):
            return True
        if self.journal:
            self.journal.note(stage, quarantined=self.cache.quarantined[-1])
        return False

    def build(self, stage: Stage, **journal_info: Any) -> StageRecord:
        """Get or build ``stage`` (its inputs must be complete), journaled: ``running`` (unless another job
        is on it — this one waits for its lock — or has built it), then ``built``, or ``reused`` (never over
        another job's ``built``), or ``failed`` with the error (re-raised)."""
        keep_freed_memory()  # once per process, wherever the builder was made or unpickled: model steps page-fault less
        if self.journal:
            self.journal.write(stage, "running", unless=lambda r: self._taken(stage, r), job_id=self.job_id,
                               pid=os.getpid(), **journal_info)
        t0 = time.perf_counter()
        ref, started = events.StageRef(stage.kind, stage.key), []

        def run(out, work=None):
            events.publish(self.observers, events.StageStarted(
                ref, dict(stage.params), {role: events.StageRef(up.kind, up.key) for role, up in stage.inputs.items()},
                str(self.user or self.cache.root)))
            started.append(ref)
            with events.building(self.observers, ref):
                return stage.build(BuildContext(stage, self.cache, out, work, self.progress))

        try:
            with stage_label(stage.label):
                rec = self.cache.get_or_build(stage.kind, stage.key, run, manifest=stage.manifest_fields(), user=self.user,
                                              resumable=stage.resumable)
        except BaseException as exc:
            if started:
                events.publish(self.observers, events.StageEnded(ref, str(self.cache.root), failed=True))
            if self.journal:
                self.journal.write(stage, "failed", job_id=self.job_id, error=f"{type(exc).__name__}: {exc}",
                                   traceback=traceback.format_exc(), seconds=round(time.perf_counter() - t0, 3))
            raise
        if self.journal and not rec.cached:
            self.journal.write(stage, "built", job_id=self.job_id, seconds=rec.seconds)
        elif self.journal:
            self.journal.write(stage, "reused", unless=lambda r: bool(r) and r["state"] == "built", seconds=rec.seconds)
        if started:
            events.publish(self.observers, events.StageEnded(ref, str(self.cache.root),
                                                             str(self.cache.entry(stage.kind, stage.key))))
        self.records[stage.key] = rec
        return rec

    def _taken(self, stage: Stage, record: dict[str, Any] | None) -> bool:
        """Another job is building ``stage``, or it was built and still is."""
        if not record:
            return False
        return ((record["state"] == "running" and record.get("job_id") != self.job_id)
                or (record["state"] == "built" and self.complete(stage)))

    def ensure_inputs(self, stage: Stage, done: set[str] | None = None) -> None:
        """Build the cheap inputs of ``stage`` that are missing (theirs first); a missing non-cheap input
        raises :class:`MissingInput`."""
        done = set() if done is None else done
        for up in stage.upstream():
            if up.key in done or self.intact(up):
                done.add(up.key)
                continue
            if not up.cheap:
                raise MissingInput(up)
            self.ensure_inputs(up, done)
            self.build(up)
            done.add(up.key)

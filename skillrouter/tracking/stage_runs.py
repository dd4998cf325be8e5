"""A W&B run per built stage, and the stage as an artifact by reference to its cache entry.

The run starts only when the stage is really built (a reused stage logs nothing new). Its id comes from the
stage key, so a requeued job that resumes a training from its checkpoint continues the same run, its steps
numbered on from the checkpoint's. When the entry is published, the run logs it as an artifact named
``<kind>-<key>`` (type = the kind) that references the entry's folder with its checksums — or carries the
files with ``tracking.upload=true`` — and the artifact's name and digest are recorded beside the cache
(``<cache_dir>/.wandb/<kind>/<key>.json``), where every later cell that uses the stage finds them.

Offline, W&B refuses ``use_artifact``; each run's config names the artifacts it read (``inputs``) and
:mod:`.sync` links them after upload."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from ..data.jsonl import atomic_write_json
from ..events import StageRef, StageStarted
from ..secrets import scrub
from .settings import TrackingSettings, finish, guarded

RECORDS = ".wandb"


def artifact_name(kind: str, key: str) -> str:
    return f"{kind}-{key}"


def record_path(cache_root: Path, kind: str, key: str) -> Path:
    return Path(cache_root) / RECORDS / kind / f"{key}.json"


def artifact_record(cache_root: Path, kind: str, key: str) -> dict[str, Any] | None:
    """What the stage run logged for this entry (artifact name, digest, run), if one did."""
    path = record_path(cache_root, kind, key)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_directory(root: Path, stage: StageRef) -> Path:
    """Where a stage's run writes (one folder per stage: concurrent jobs never share W&B's symlinks)."""
    return Path(root) / "stages" / f"{stage.kind}-{stage.key[:8]}"


class StageRun:
    """The open run of one stage being built (from its :class:`~skillrouter.events.StageStarted`). Every call is
    guarded: after a W&B failure the run is dropped and the build goes on."""

    def __init__(self, settings: TrackingSettings, started: StageStarted):
        stage = started.stage
        self.settings, self.stage, self.inputs, self.run = settings, stage, dict(started.inputs), None
        config = {"stage": stage.kind, "key": stage.key, "params": dict(started.params),
                  "inputs": {role: artifact_name(up.kind, up.key) for role, up in started.inputs.items()}}
        with guarded(f"starting the run of stage {stage.label}"):
            self.run = settings.init(run_directory(Path(started.folder), stage), stage.kind, stage.label, config,
                                     run_id=artifact_name(stage.kind, stage.key))
            if self.run is not None and not self.run.offline:
                for up in started.inputs.values():
                    self.run.use_artifact(f"{artifact_name(up.kind, up.key)}:latest")

    def _call(self, what: str, fn: Callable[[], None]) -> None:
        if self.run is None:
            return
        ok = False
        with guarded(f"{what} (stage {self.stage.label})"):
            fn()
            ok = True
        if not ok:
            self.run = None

    def log(self, values: dict[str, Any], step: int | None = None) -> None:
        self._call("logging a step", lambda: self.run.log(values, step=step))

    def summary(self, values: dict[str, Any]) -> None:
        self._call("updating the summary", lambda: self.run.summary.update(scrub(values)))

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        import wandb

        self._call(f"logging table {name}", lambda: self.run.log({name: wandb.Table(columns=list(columns),
                                                                                   data=scrub([list(r) for r in rows]))}))

    def publish(self, entry: Path, cache_root: Path) -> None:
        """Log the published entry as this stage's artifact and record its name and digest beside the cache."""
        import wandb

        def log_artifact() -> None:
            stage = self.stage
            name = artifact_name(stage.kind, stage.key)
            inputs = {role: up.key for role, up in self.inputs.items()}
            artifact = wandb.Artifact(name, type=stage.kind, metadata=scrub({"key": stage.key, "label": stage.label,
                                                                             "inputs": inputs}))
            if self.settings.upload:
                artifact.add_dir(str(entry))
            else:
                artifact.add_reference(entry.resolve().as_uri(), checksum=True)
            self.run.log_artifact(artifact)
            atomic_write_json(record_path(cache_root, stage.kind, stage.key),
                              {"artifact": name, "type": stage.kind, "digest": artifact.digest, "run_id": self.run.id,
                               "project": self.settings.project, "entity": self.settings.entity,
                               "folder": str(Path(self.run.dir).resolve().parent)})

        self._call("logging the artifact", log_artifact)

    def finish(self, failed: bool = False) -> None:
        self._call("finishing the run", lambda: finish(self.run, exit_code=1 if failed else 0))
        self.run = None

"""A grid's journal of stage outcomes: ``<sweep>/.stages/<kind>-<key>.json``, written by whoever runs the
stage (this process, or the SLURM job that builds it) — ``pending`` with its job id when it is submitted,
``running`` when it starts, then ``built``,
``reused``, ``failed`` (with the error) or ``cancelled`` (an input failed, or its job never ran).

Cells read it to say which stage a failure came from and which cell a stage was built for; ``status``
reads it beside ``plan.json`` to show the stage graph's state with job ids."""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any, Callable

from ..cache.locks import FileLock
from ..data.jsonl import atomic_write_json
from ..stages.graph import Stage

TERMINAL = ("built", "reused", "failed", "cancelled")
DIR = ".stages"


class StageJournal:
    def __init__(self, sweep_dir: str | Path):
        self.root = Path(sweep_dir) / DIR

    def path(self, kind: str, key: str) -> Path:
        return self.root / f"{kind}-{key}.json"

    def read(self, stage: Stage) -> dict[str, Any] | None:
        return self.read_key(stage.kind, stage.key)

    def read_key(self, kind: str, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.path(kind, key).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def write(self, stage: Stage, state: str | None, unless: Callable[[dict[str, Any] | None], bool] | None = None,
              **info: Any) -> dict[str, Any] | None:
        """Record ``state`` for ``stage`` (None: keep the current one, ``pending`` when there is none),
        keeping what earlier writes said (job id, start time) — unless ``unless(current record)`` says not
        to (then None). Read and write happen under the record's lock: two jobs that both build a cheap
        stage must not write ``reused`` over the other's ``built``."""
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(self.root / f"{stage.kind}-{stage.key}.lock", stale_after=30.0, poll=0.05):
            current = self.read(stage)
            if unless and unless(current):
                return None
            record = {**(current or {}), "stage": stage.kind, "key": stage.key,
                      "state": state or (current or {}).get("state", "pending"),
                      "resource": stage.resource, "cheap": stage.cheap, **info}
            if state == "running":
                record.update(started=time.time(), host=socket.gethostname())
            if state in TERMINAL:
                record["ended"] = time.time()
            atomic_write_json(self.path(stage.kind, stage.key), record)
            return record

    def note(self, stage: Stage, **info: Any) -> None:
        """Add to ``stage``'s record without changing its state (``pending`` when it has none yet): the
        job that will build it, a damaged entry of it that was quarantined."""
        self.write(stage, None, **info)

    def all(self) -> dict[str, dict[str, Any]]:
        """Every record, by key."""
        out = {}
        for f in sorted(self.root.glob("*.json")):
            try:
                rec = json.loads(f.read_text())
            except json.JSONDecodeError:
                continue
            out[rec["key"]] = rec
        return out

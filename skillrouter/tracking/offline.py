"""Read W&B's offline run files (``offline-run-*/run-<id>.wandb``) back: what :mod:`.sync` needs to link a
grid's lineage after upload, and what the tests check — the files themselves, not our own calls.

The file is W&B's record log: a 7-byte header (``:W&B``, magic ``0xBEE1``, version), then LevelDB log
blocks of 32 KiB holding length-prefixed chunks (full, first, middle, last) of protobuf ``Record`` messages.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

BLOCK, CHUNK_HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator[Any]:
    """Every protobuf record of one ``.wandb`` file, in order (a torn last record is left out)."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file")
    pos, pending = 7, b""
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK_HEADER])
        chunk = data[pos + CHUNK_HEADER:pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending + chunk if kind == LAST else chunk)
            pending = b""
            yield record


def _items(updates: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in updates:
        path = list(item.nested_key) or [item.key]
        target = out
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = json.loads(item.value_json)
    return out


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


@dataclass
class OfflineRun:
    """One offline run as W&B would upload it."""

    folder: Path
    run_id: str = ""
    project: str = ""
    entity: str = ""
    group: str = ""
    job_type: str = ""
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None

    @property
    def steps(self) -> list[int]:
        return [int(row["_step"]) for row in self.history if "_step" in row]


def read_run(folder: Path) -> OfflineRun:
    """The run in an ``offline-run-*`` folder: config (with later updates), summary, history, artifacts. A
    process killed before W&B wrote anything leaves a folder with no records: an empty run (no ``run_id``)."""
    folder = Path(folder)
    run = OfflineRun(folder)
    files = list(folder.glob("run-*.wandb"))
    for rec in records(files[0]) if files else ():
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            run.run_id, run.project, run.entity, run.group = r.run_id, r.project, r.entity, r.run_group
            run.job_type, run.name = r.job_type, r.display_name
            _merge(run.config, _items(r.config.update))
        elif kind == "config":
            _merge(run.config, _items(rec.config.update))
        elif kind == "summary":
            _merge(run.summary, _items(rec.summary.update))
        elif kind == "history":
            run.history.append(_items(rec.history.item))
        elif kind == "artifact":
            a = rec.artifact
            run.artifacts.append({"name": a.name, "type": a.type, "digest": a.digest, "metadata": json.loads(a.metadata or "{}"),
                                  "entries": [{"path": e.path, "ref": e.ref, "digest": e.digest} for e in a.manifest.contents]})
        elif kind == "exit":
            run.exit_code = rec.exit.exit_code
    return run


def ended(folder: Path) -> bool:
    """Whether the run in ``folder`` has its exit record on disk (W&B's service writes it after ``finish`` returns)."""
    files = list(Path(folder).glob("run-*.wandb"))
    try:
        return bool(files) and any(r.WhichOneof("record_type") == "exit" for r in records(files[0]))
    except Exception:  # noqa: BLE001 - a record still being written
        return False


def offline_runs(root: Path) -> list[OfflineRun]:
    """Every offline run under ``root`` (a sweep folder: its cells', stages' and grid's runs), oldest first."""
    return [read_run(p) for p in sorted(Path(root).rglob("offline-run-*"), key=lambda p: p.name) if p.is_dir()]


def table(run: OfflineRun, name: str) -> dict[str, Any]:
    """A Table the run logged under ``name`` (its last version): ``{"columns": [...], "data": [[...]]}``."""
    files = sorted((run.folder / "files" / "media" / "table").glob(f"{name}_*.table.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"run {run.run_id} logged no table {name!r}")
    return json.loads(files[-1].read_text())

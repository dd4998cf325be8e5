"""Upload a grid's offline runs and link the lineage W&B cannot record offline.

    python -m skillrouter.tracking sync SWEEP [--dry-run]

Offline, ``use_artifact`` is refused ("Cannot use artifact when in offline mode"), so each run's config
names what it read: a cell run its ``stages.<name>.artifact``, a stage run its ``inputs``. Sync uploads
the runs (``wandb sync``), producers first — including, from their own sweeps, the runs that built a
reused stage (the cache's artifact record says where they are) — then declares every read through the
public API (``Run.use_artifact``), so the lineage graph shows which trained encoder and reranker fed
which cells. The two W&B calls sit behind :class:`Service`, the one boundary the tests stand in for.
"""
from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .offline import OfflineRun, offline_runs, read_run
from .stage_runs import artifact_record

log = logging.getLogger(__name__)


class Service(Protocol):
    def upload(self, folders: list[Path]) -> None: ...

    def link(self, entity: str | None, project: str, run_id: str, artifact: str) -> None: ...


class WandbService:
    """The real thing: ``wandb sync`` and ``wandb.Api`` (needs a key and the network)."""

    def upload(self, folders: list[Path]) -> None:
        subprocess.run([sys.executable, "-m", "wandb", "sync", *map(str, folders)], check=True)

    def link(self, entity: str | None, project: str, run_id: str, artifact: str) -> None:
        import wandb

        api = wandb.Api()
        entity = entity or api.default_entity
        api.run(f"{entity}/{project}/{run_id}").use_artifact(api.artifact(f"{entity}/{project}/{artifact}:latest"))


def reads(run: OfflineRun) -> list[str]:
    """The artifacts a run read: a cell's stages, a stage's inputs."""
    if run.job_type == "cell":
        return sorted({s["artifact"] for s in (run.config.get("stages") or {}).values()})
    return sorted(set((run.config.get("inputs") or {}).values()))


def _producers_elsewhere(runs: list[OfflineRun], root: Path) -> list[OfflineRun]:
    """The offline runs, outside ``root``, that built artifacts ``runs`` read (reused from another sweep)."""
    made = {a["name"] for r in runs for a in r.artifacts}
    caches = {r.config.get("cfg", {}).get("cache_dir") for r in runs if r.job_type == "cell"} - {None}
    found: dict[str, OfflineRun] = {}
    for r in runs:
        for name in reads(r):
            stage = next((s for s in (r.config.get("stages") or {}).values() if s["artifact"] == name), None)
            if name in made or stage is None:
                continue
            for cache in caches:
                record = artifact_record(Path(cache), stage["type"], stage["key"]) or {}
                folder = Path(record.get("folder", ""))
                if record and folder.is_dir() and root not in folder.parents:
                    found[str(folder)] = read_run(folder)
    return list(found.values())


@dataclass
class SyncReport:
    uploaded: list[Path] = field(default_factory=list)
    linked: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str, str]] = field(default_factory=list)


def sync(root: Path, service: Service, dry_run: bool = False) -> SyncReport:
    """Upload every offline run under ``root`` (producers first) and link what each read."""
    runs = [r for r in offline_runs(root) if r.run_id]  # a process killed before W&B wrote a record left nothing
    runs = _producers_elsewhere(runs, Path(root).resolve()) + runs
    order = sorted(runs, key=lambda r: r.job_type in ("cell", "grid"))  # stages (producers) before cells
    report = SyncReport(uploaded=[r.folder for r in order])
    if not dry_run:
        service.upload(report.uploaded)
    for run in order:
        for artifact in reads(run):
            if dry_run:
                report.linked.append((run.run_id, artifact))
                continue
            try:
                service.link(run.entity or None, run.project, run.run_id, artifact)
                report.linked.append((run.run_id, artifact))
            except Exception as exc:  # noqa: BLE001 - one missing artifact must not stop the others' links
                report.failed.append((run.run_id, artifact, f"{type(exc).__name__}: {exc}"))
    return report


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m skillrouter.tracking sync", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="say what would be uploaded and linked; touch nothing")
    args = parser.parse_args(argv)
    report = sync(args.sweep, WandbService(), args.dry_run)
    verb = "would upload" if args.dry_run else "uploaded"
    print(f"{verb} {len(report.uploaded)} runs; {'would link' if args.dry_run else 'linked'} {len(report.linked)} artifact reads")
    for run_id, artifact, error in report.failed:
        print(f"  not linked: run {run_id} <- {artifact}: {error}")
    return 1 if report.failed else 0

"""The state of a grid read from disk: ``python -m skillrouter.pipeline.status DIR`` shows the stage graph
(``plan.json`` and the stage journal: pending / running / built / reused / cached / failed / cancelled,
with SLURM job ids) and the cells (their run directories)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .. import events
from ..eval.metrics import HEADLINE


def run_dirs(sweep_dir: Path) -> list[Path]:
    """Cell directories in job order (``#2`` before ``#10``; then nested ones, a study's ``test/trial_<n>/0``)."""
    dirs = (p.parent for p in sweep_dir.rglob("status.json"))
    return sorted(dirs, key=lambda p: [(0, int(part), "") if part.isdigit() else (1, 0, part)
                                       for part in p.relative_to(sweep_dir).parts])


def cell_status(run_dir: Path) -> dict[str, Any]:
    """Status from ``metrics.json`` when the cell ended, else from ``status.json`` (running or killed)."""
    metrics_file, status_file = run_dir / "metrics.json", run_dir / "status.json"
    data = json.loads((metrics_file if metrics_file.exists() else status_file).read_text())
    stages = data.get("stages", {})
    return {
        "run": str(run_dir), "status": data.get("status", "unknown"), "choices": data.get("choices", {}),
        "error": data.get("error"), "overrides": cell_overrides(run_dir), "metrics": {k: data.get("metrics", {}).get(k) for k in HEADLINE},
        "stages_reused": sum(1 for s in stages.values() if s.get("cached")), "stages": len(stages),
        "seconds": data.get("seconds"),
    }


def grid_status(sweep_dir: Path) -> list[dict[str, Any]]:
    """Each cell's status, with its folder in the sweep (``cell``: ``3``, or a study's ``test/trial_3/0``)."""
    return [{**cell_status(d), "cell": d.relative_to(sweep_dir).as_posix()} for d in run_dirs(sweep_dir)]


def grid_ended(sweep_dir: Path, study_batch: bool = False) -> events.GridEnded:
    """What a grid's observers are told when it ends: each cell's state as it wrote it, and the plan's totals."""
    from .plan import PLAN

    plan = json.loads((sweep_dir / PLAN).read_text()) if (sweep_dir / PLAN).exists() else {}
    return events.GridEnded(str(sweep_dir), sweep_dir.name, grid_status(sweep_dir), plan.get("totals", {}), study_batch)


def cell_overrides(run_dir: Path) -> list[str]:
    """The command-line overrides Hydra recorded for the cell (``data.pool=...`` included, which choices lack)."""
    recorded = run_dir / ".hydra" / "overrides.yaml"
    if not recorded.exists():
        return []
    return [line[2:].strip() for line in recorded.read_text().splitlines() if line.startswith("- ")]


def split_shared(settings: list[list[str]]) -> tuple[list[str], list[str]]:
    """Settings every cell shares, and per cell what sets it apart, so a grid's lines stay readable."""
    shared = set.intersection(*(set(s) for s in settings)) if len(settings) > 1 else set()
    common = [s for s in settings[0] if s in shared] if settings else []
    return common, [" ".join(s for s in cell if s not in shared) for cell in settings]


def cell_labels(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    return split_shared([r["overrides"] or [f"{k}={v}" for k, v in sorted(r["choices"].items())] for r in rows])


def stage_status(sweep_dir: Path) -> list[dict[str, Any]]:
    """One row per stage of the grid's plan, with what the journal says became of it."""
    from .journal import StageJournal
    from .plan import PLAN

    plan_file = sweep_dir / PLAN
    if not plan_file.exists():
        return []
    journal = StageJournal(sweep_dir).all()
    rows = []
    for planned in json.loads(plan_file.read_text())["stages"]:
        rec = journal.get(planned["key"], {})
        state = rec.get("state") or ("cached" if planned["state"] == "cached" else "pending")
        rows.append({"stage": planned["stage"], "key": planned["key"], "state": state, "resource": planned["resource"],
                     "cheap": planned["cheap"], "cells": planned["cells"], "job_id": rec.get("job_id"),
                     "seconds": rec.get("seconds"), "error": rec.get("error")})
    return rows


def format_stages(rows: list[dict[str, Any]], every: bool = True) -> str:
    counts = {s: sum(r["state"] == s for r in rows) for s in dict.fromkeys(r["state"] for r in rows)}
    lines = [f"{len(rows)} stages: " + ", ".join(f"{n} {s}" for s, n in counts.items())]
    for r in rows if every else [r for r in rows if r["state"] in ("failed", "cancelled")]:
        job = f" job {r['job_id']}" if r["job_id"] else ""
        took = f" {r['seconds']:.0f} s" if r.get("seconds") else ""
        why = f"  {r['error']}" if r.get("error") else ""
        lines.append(f"  [{r['state']:>9}] {r['stage']:<16} {r['key'][:8]} {r['resource']}{job}{took}{why}")
    return "\n".join(lines)


def format_status(rows: list[dict[str, Any]]) -> str:
    lines = [f"{len(rows)} cells: " + ", ".join(f"{sum(r['status'] == s for r in rows)} {s}"
                                               for s in sorted({r["status"] for r in rows}))]
    reused = sum(r["stages_reused"] for r in rows)
    lines.append(f"stages reused from cache: {reused} of {sum(r['stages'] for r in rows)}")
    common, labels = cell_labels(rows)
    if common:
        lines.append("every cell: " + " ".join(common))
    for r, label in zip(rows, labels):
        detail = r["error"] if r["status"] == "failed" else " ".join(
            f"{k}={v:.4f}" for k, v in r["metrics"].items() if v is not None)
        lines.append(f"  [{r['status']:>9}] #{r['cell']} {label}  {detail}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Print the state of a grid (a multirun directory): its stages, its cells.")
    parser.add_argument("sweep_dir", type=Path)
    sweep_dir = parser.parse_args().sweep_dir
    stages = stage_status(sweep_dir)
    if stages:
        print(format_stages(stages))
    print(format_status(grid_status(sweep_dir)))


if __name__ == "__main__":
    main()

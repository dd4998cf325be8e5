"""One W&B run per grid (``job_type=grid``), from the :class:`~skillrouter.events.GridEnded` the launcher publishes
when the grid has ended — under SLURM too, and after a failed cell: a Table with one row per cell (its choices,
status, headline metrics, how many of its stages were reused, its error) and the plan's totals. An Optuna study is
one grid run, from its :class:`~skillrouter.events.StudyEnded` (a batch of its trials logs nothing). :func:`log_report`:
what ``python -m skillrouter.report --tracking`` logs (the rendered tables and the R@K figure, as one ``report``
artifact)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..cache.store import stable_hash
from ..eval.metrics import HEADLINE
from ..events import GridEnded
from .settings import TrackingSettings, finish, guarded


def grid_table(cells: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    choices = sorted({k for r in cells for k in r["choices"]})
    columns = ["cell", *choices, "status", *HEADLINE, "stages_reused", "stages", "seconds", "error"]
    data = [[r["cell"], *[r["choices"].get(k) for k in choices], r["status"], *[r["metrics"].get(m) for m in HEADLINE],
             r["stages_reused"], r["stages"], r["seconds"], r["error"]] for r in cells]
    return columns, data


def seed_table(cells: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]] | None:
    """The completed cells grouped over ``seed`` (a grid that sweeps it): per system, its seeds and each headline
    metric's mean and sample s.d., as the report's tables show them. None for a one-seed grid."""
    done = [c for c in cells if c["status"] == "completed"]
    if len({c["choices"].get("seed") for c in done}) < 2:
        return None
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for c in done:
        groups.setdefault(tuple(sorted((k, v) for k, v in c["choices"].items() if k != "seed")), []).append(c)
    choices = sorted({k for key in groups for k, _ in key})
    columns = [*choices, "n_seeds", *[name for m in HEADLINE for name in (m, f"{m} sd")]]
    data = []
    for key, members in groups.items():
        row: list[Any] = [dict(key).get(k) for k in choices] + [len(members)]
        for m in HEADLINE:
            values = [c["metrics"][m] for c in members if c["metrics"].get(m) is not None]
            row += [float(np.mean(values)) if values else None, float(np.std(values, ddof=1)) if len(values) > 1 else None]
        data.append(row)
    return columns, data


def log_grid(settings: TrackingSettings, grid: GridEnded, study: Mapping[str, Any] | None = None) -> None:
    """Log the ended grid; an Optuna study's (``study``: its summary) with its trials as a table and the best trial
    and its test score in the summary."""
    with guarded("logging the grid's run"):
        import wandb

        sweep_dir = Path(grid.sweep_dir)
        columns, data = grid_table(grid.cells)
        statuses = [row[columns.index("status")] for row in data]
        run = settings.init(sweep_dir / "grid", "grid", f"grid {settings.group}", {"sweep": str(sweep_dir), "cells": len(data)},
                            run_id=f"grid-{stable_hash(str(sweep_dir.resolve()), 12)}")
        run.log({"cells": wandb.Table(columns=columns, data=data)})
        over_seeds = seed_table(grid.cells)
        if over_seeds is not None:
            run.log({"cells_over_seeds": wandb.Table(columns=over_seeds[0], data=over_seeds[1])})
        if study is not None:
            run.log({"trials": wandb.Table(*trials_table(study))})
            run.summary.update(study_summary(study))
        run.summary.update({"cells": len(data), "completed": statuses.count("completed"),
                            "failed": len(data) - statuses.count("completed"), **{f"plan/{k}": v for k, v in grid.plan.items()}})
        finish(run)


def trials_table(study: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    params = sorted({p for t in study["trials"] for p in t["params"]})
    return (["trial", "state", *params, study["objective"]],
            [[t["number"], t["state"], *[t["params"].get(p) for p in params], t["value"]] for t in study["trials"]])


def study_summary(study: Mapping[str, Any]) -> dict[str, Any]:
    best = study.get("best") or {}
    test = (study.get("test") or {}).get("metrics", {})
    return {"study/trials": len(study["trials"]), "study/best_trial": best.get("number"),
            **{f"study/best/{k}": v for k, v in best.get("params", {}).items()},
            f"study/best/{study['objective']}@{(study.get('split') or {}).get('scored', 'dev')}": best.get("value"),
            **{f"study/test/{k}": v for k, v in test.items()}}


def log_report(written: list[Path], roots: list[Path], out: Path) -> None:
    """One ``job_type=report`` run holding the report files as an artifact, the figures as images too."""
    settings = TrackingSettings(os.environ.get("WANDB_PROJECT", "skillrouter"), os.environ.get("WANDB_ENTITY"),
                                os.environ.get("WANDB_MODE", "offline"), "report")
    with guarded("logging the report"):
        import wandb

        run = settings.init(Path(out) / ".tracking", "report", f"report {Path(out).name}", {"runs": [str(r) for r in roots]})
        artifact = wandb.Artifact("reports", type="report", metadata={"runs": [str(r) for r in roots]})
        for path in written:
            artifact.add_file(str(path), name=path.name)
        run.log_artifact(artifact)
        run.log({p.stem: wandb.Image(str(p)) for p in written if p.suffix == ".png"})
        finish(run)

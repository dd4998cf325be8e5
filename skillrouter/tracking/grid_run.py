"""One W&B run per grid (``job_type=grid``), logged by the launcher when the grid has ended — under SLURM
too, and after a failed cell: a Table with one row per cell (its choices, status, headline metrics, how many
of its stages were reused, its error) and the plan's totals. Read from the sweep folder, so it shows what
the cells wrote whatever happened to their jobs. :func:`log_report`: what ``python -m skillrouter.report
--tracking`` logs (the rendered tables and the R@K figure, as one ``report`` artifact)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ..cache.store import stable_hash
from ..pipeline.plan import PLAN
from ..pipeline.status import HEADLINE, grid_status
from .settings import TrackingSettings, guarded


def grid_table(sweep_dir: Path) -> tuple[list[str], list[list[Any]]]:
    rows = grid_status(sweep_dir)
    choices = sorted({k for r in rows for k in r["choices"]})
    columns = ["cell", *choices, "status", *HEADLINE, "stages_reused", "stages", "seconds", "error"]
    data = [[Path(r["run"]).name, *[r["choices"].get(k) for k in choices], r["status"], *[r["metrics"].get(m) for m in HEADLINE],
             r["stages_reused"], r["stages"], r["seconds"], r["error"]] for r in rows]
    return columns, data


def log_grid(cfg: DictConfig, sweep_dir: Path) -> None:
    """Log the ended grid in ``sweep_dir`` (a cell's frozen config says where and whether to track)."""
    settings = TrackingSettings.of(cfg, Path(sweep_dir).name)
    if settings is None:
        return
    with guarded("logging the grid's run"):
        import wandb

        columns, data = grid_table(sweep_dir)
        plan = json.loads((sweep_dir / PLAN).read_text()) if (sweep_dir / PLAN).exists() else {}
        statuses = [row[columns.index("status")] for row in data]
        run = settings.init(sweep_dir / "grid", "grid", f"grid {settings.group}", {"sweep": str(sweep_dir), "cells": len(data)},
                            run_id=f"grid-{stable_hash(str(Path(sweep_dir).resolve()), 12)}")
        run.log({"cells": wandb.Table(columns=columns, data=data)})
        run.summary.update({"cells": len(data), "completed": statuses.count("completed"),
                            "failed": len(data) - statuses.count("completed"), **{f"plan/{k}": v for k, v in plan.get("totals", {}).items()}})
        run.finish()


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
        run.finish()

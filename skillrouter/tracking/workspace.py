"""A saved W&B view of one grid, built with ``wandb-workspaces``.

    python -m skillrouter.tracking.workspace SWEEP [--entity E] [--project P] [--push]

The view: the grid's runs (its W&B group), grouped by the choices the grid sweeps; a bar panel per
headline metric across the cells; the training curves (loss, its terms, learning rate, gradient norm,
examples/s) of its stage runs. Without ``--push`` (offline, the default) the view's spec is written to
``SWEEP/workspace.json`` with the command that pushes it; ``--push`` saves it to W&B and prints its URL.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ..data.jsonl import atomic_write_json, read_json
from ..eval.metrics import HEADLINE

CURVES = ("train/loss", "train/loss_main", "train/loss_sibling", "train/lr", "train/grad_norm", "train/examples_per_s")
SPEC = "workspace.json"


def swept_choices(sweep: Path) -> list[str]:
    """The choices whose values differ across the grid's cells (the runs table's grouping), as each cell's
    ``status.json`` records them."""
    rows = [read_json(path).get("choices", {}) for path in sorted(sweep.rglob("status.json"))]
    keys = sorted({k for r in rows for k in r})
    return [k for k in keys if len({r.get(k) for r in rows}) > 1]


def build_workspace(sweep: Path, entity: str, project: str) -> Any:
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    group = sweep.name
    cells = ws.Section(name="Cells", is_open=True, panels=[wr.BarPlot(title=m, metrics=[m]) for m in HEADLINE])
    training = ws.Section(name="Training", is_open=True, panels=[wr.LinePlot(title=c, x="Step", y=[c]) for c in CURVES])
    return ws.Workspace(entity=entity, project=project, name=f"skillrouter {group}", sections=[cells, training],
                        runset_settings=ws.RunsetSettings(filters=f"Metric('Group') == '{group}'",
                                                          groupby=[ws.Config(k) for k in swept_choices(sweep)]))


def _project_of(sweep: Path) -> tuple[str | None, str]:
    """The W&B entity and project the grid's cells logged to (their frozen configs say)."""
    for run in sorted(sweep.glob("*/.hydra/config.yaml")):
        tracking = OmegaConf.load(run).get("tracking") or {}
        if tracking.get("name") == "wandb":
            return tracking.get("entity"), str(tracking.get("project"))
    return None, "skillrouter"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillrouter.tracking.workspace", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--entity")
    parser.add_argument("--project")
    parser.add_argument("--push", action="store_true", help="save the view to W&B (needs a key and the network)")
    args = parser.parse_args(argv)
    entity, project = _project_of(args.sweep)
    entity, project = args.entity or entity, args.project or project
    if args.push:
        import wandb

        workspace = build_workspace(args.sweep, entity or wandb.Api().default_entity, project)
        print(f"saved: {workspace.save().url}")
        return 0
    workspace = build_workspace(args.sweep, entity or "<entity>", project)
    spec = workspace._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)
    atomic_write_json(args.sweep / SPEC, spec)
    print(f"view spec written to {args.sweep / SPEC} ({len(spec['spec']['section']['panelBankConfig']['sections'])} sections)")
    print(f"push it once online: python -m skillrouter.tracking.workspace {args.sweep} --push"
          + ("" if entity else " --entity <your-entity>"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
